"""The default experiment (to be tuned): SFT on noisy demonstrations, then GRPO.

Command:
  python -m experiments.run --config=experiments/configs/default.py --workdir=runs/default
Variants: `:smoke` (seconds; used by the tests).
"""

from __future__ import annotations

from experiments.configs import common


def get_config(arg: str = ""):
  c = common.base()
  c.task.options.update(min_terms=3, max_terms=3, min_digits=1, max_digits=1)
  c.task.demo_noise = 0.6
  c.model.tie_embeddings = False
  c.sft.update(steps=800, batch_size=128, eval_every=200)
  c.sft.optim.lr = 2e-3
  c.rl.update(steps=200, prompts_per_step=32, group_size=8, eval_every=25)
  c.rl.optim.lr = 2e-4
  if arg == "smoke":
    c.task.train_size = 300
    c.task.eval_size = 40
    c.model.update(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64)
    c.sft.update(steps=6, batch_size=16)
    c.rl.update(steps=4, prompts_per_step=4, group_size=4, eval_every=2)
    c.eval.update(batch_size=64)
    c.checkpoint.every = 2
    c.progress = False
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of default.py; expected '' or 'smoke'")
  c.lock()
  return c
