"""The proving ground: SFT on flawed scratchpads, then GRPO, on 2- to 7-term integer chains.

Command (2-core CPU, no accelerator, no network):
  python -m experiments.run --config=experiments/configs/ladder.py --workdir=runs/ladder
Variants: `:smoke` (seconds; the tests use it).
"""

from __future__ import annotations

from experiments.configs import common


def get_config(arg: str = ""):
  c = common.base()
  c.task.name = "ladder"
  c.task.options = dict(min_terms=2, max_terms=7, min_digits=1, max_digits=2)
  c.task.update(train_size=30000, eval_size=1200, demo_noise=0.6)
  c.model.update(tie_embeddings=False, max_seq_len=128)
  c.sampling.max_new_tokens = 80
  c.sft.update(steps=1500, batch_size=128, eval_every=250)
  c.sft.optim.lr = 2e-3
  c.rl.update(steps=200, prompts_per_step=32, group_size=8, eval_every=50)
  c.rl.optim.update(lr=1e-4, warmup_steps=10, schedule="cosine", end_lr_frac=0.1)
  c.control.enabled = False
  c.eval.update(batch_size=600, num_samples=8, temperatures=())
  if arg == "smoke":
    c.task.train_size = 300
    c.task.eval_size = 36
    c.model.update(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64)
    c.sft.update(steps=6, batch_size=16)
    c.rl.update(steps=4, prompts_per_step=4, group_size=4, eval_every=2)
    c.eval.update(batch_size=64)
    c.checkpoint.every = 2
    c.progress = False
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of ladder.py; expected '' or 'smoke'")
  c.lock()
  return c
