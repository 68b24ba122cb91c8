"""GRPO on GSM8K from Qwen3-1.7B (post-trained, non-thinking mode): the Qwen3-0.6B recipe
(`qwen3_0_6b_gsm8k.py`: template, task, rewards and GRPO settings) on the larger checkpoint.

    python -m experiments.run --config=experiments/configs/recipes/qwen3_1_7b_gsm8k.py:gpu1 \
        --workdir=runs/qwen3-1.7b-gsm8k
Presets: `cpu_smoke`, `gpu1` (''), `gpu8`, `v5e8`, `v6e8` (experiments/configs/recipes/base.py).

* Model: `Qwen/Qwen3-1.7B` (`model.path`: a hub id, or a local copy of the checkpoint directory).
* Reference result: none published for GRPO from this checkpoint on GSM8K. The Qwen3 technical
  report gives GSM8K (4-shot CoT) for the base model Qwen3-1.7B-Base: 75.4; verl's GSM8K
  baseline for a small instruct model is Qwen2.5-0.5B-Instruct, 49.6 -> 56.7 with PPO. Evaluate
  with `python -m experiments.eval --workdir=RUN --dataset=gsm8k`.

TPU presets (scanned layers, full remat, refill engine with 256 slots; compiled by
`experiments.aot`, experiments/aot_results/qwen3-1.7b-gsm8k_v5e-8.jsonl and _v6e-8.jsonl):
per-device GB, generate / rl_step: v5e-8 10.9 / 12.8 of 17.2, v6e-8 10.8 / 11.3 of 34.4.
"""

from __future__ import annotations

import dataclasses

from experiments.configs.recipes import base, qwen3_0_6b_gsm8k

RECIPE = dataclasses.replace(qwen3_0_6b_gsm8k.RECIPE, model_path="Qwen/Qwen3-1.7B",
                             arch="qwen3-1.7b")


def get_config(arg: str = ""):
  return base.config(RECIPE, arg, name="qwen3_1_7b_gsm8k.py")
