"""Proving ground v2: 4- to 8-term chains, a constant learning rate after warmup, a dev/test split.

Command (2-core CPU, no accelerator, no network):
  python -m experiments.run --config=experiments/configs/ladder2.py --workdir=runs/ladder2
Variants: `:smoke` (seconds; the tests use it).

The ladder (`ladder.py`, kept as the record) met its gate and still could not rank methods
(issue 32): its cosine schedule decayed the budget axis away by the final evaluation, three
evaluations per curve made areas and tokens-to-target crude, and design and results shared one
held-out set. This ground changes exactly those things:

* Task: the ladder's scratchpad chains (`rl_jax.data.ladder`, flawed-carry demonstrations, every
  step graded) with 4 to 8 terms of one or two digits: five strata, longer chains where step
  credit and budget can matter. Completions of up to 96 tokens in a 160-token context.
* Sets: 30,000 train draws; a 1,200-problem dev set (240 per stratum) for every choice of
  settings; a disjoint 1,200-problem test set (`task.test_size`) read only by the result tables
  (summary.json's `rl_test_accuracy`, `sft_test_accuracy`). The periodic evaluations run every 10
  RL steps on a fixed 600-problem dev subset (`rl.eval_subset`, 120 per stratum); the final ones
  on all of dev and test.
* SFT: the ladder's (1,600 steps of 64, AdamW 2e-3, cosine), one SFT policy for every training
  seed (`sft.seed = 0`).
* RL: GRPO with the ladder's DeepSeekMath defaults (PPO-clip 0.2, token-mean, k3 KL 0.04) at
  G = 4, 32 prompts per step, 100 steps; AdamW 4e-5 with 10 warmup steps, then constant, so the
  last steps learn as much as the middle ones and a budget difference lasts to the end.

The sweep that measures the ground (`experiments/sweeps/ground_v2.py`) runs GRPO at G = 4, 8, 16
and the three oracles (process reward, Knapsack prior, step-boundary TreePO) from one SFT.

Settings: those of issue 32's two-seed check (4-8 terms, 96 new tokens, 160 context, constant
rate after warmup, 100 RL steps), except the learning rate, chosen on the dev set
(`experiments/sweeps/ground_v2_pilot.py`, docs/research/ground-v2.md): the first
sweep ran at 1e-4, where G = 4 caught up with G = 16 and the oracles after about 40 of the 100
steps; 150 steps at 1e-4 narrowed the oracle process reward's dev gain further. Measured alone on
the 2-core CPU (2026-11-26, the first sweep's first two processes): the SFT run 437 s (346 s of
SFT steps; dev greedy 0.283, test 0.271), then GRPO G = 4 from it at 1e-4, 170 s (110 s of RL
steps, ten periodic evaluations and the final ones): about 10 minutes for one G = 4 run, SFT
included. The learning rate does not change a step's cost.
"""

from __future__ import annotations

from experiments.configs import common


def get_config(arg: str = ""):
  c = common.base()
  c.task.name = "ladder"
  c.task.options = dict(min_terms=4, max_terms=8, min_digits=1, max_digits=2)
  c.task.update(train_size=30000, eval_size=1200, test_size=1200, demo_noise=0.6)
  c.task.seed = 0  # One problem set (train, dev, test) for every training seed.
  c.model.update(tie_embeddings=False, max_seq_len=160)
  c.sampling.max_new_tokens = 96
  c.sft.update(steps=1600, batch_size=64, length_buckets=4, eval_every=0, seed=0)
  c.sft.optim.lr = 2e-3
  c.rl.update(steps=100, prompts_per_step=32, group_size=4, eval_every=10, eval_subset=600,
              kl_coef=0.04, kl_kind="k3")
  # 4e-5 (chosen on the dev set, experiments/sweeps/ground_v2_pilot.py): at 1e-4 GRPO G = 4 caught
  # up with the oracles and G = 16 after about 40 steps, so the finals showed less of the gaps.
  c.rl.optim.update(lr=4e-5, warmup_steps=10, schedule="constant")
  c.control.enabled = False
  # 8 samples per dev prompt at the rollout temperature give the success-rate histogram (the
  # share of prompts whose group is all right or all wrong).
  c.eval.update(batch_size=600, num_samples=8, temperatures=())
  c.checkpoint.every = 10
  if arg == "smoke":
    common.smoke(c, eval_size=30, eval_batch_size=90, length_buckets=2)  # 6 per stratum.
    c.task.test_size = 30
    c.rl.eval_subset = 10
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of ladder2.py; expected '' or 'smoke'")
  c.lock()
  return c
