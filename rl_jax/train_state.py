"""TrainState, the optimizer built from config, and that config (`optim_config`)."""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import optax


@flax.struct.dataclass
class TrainState:
  """Everything an update changes. `tx` is static (not a pytree leaf)."""

  step: jax.Array
  params: Any
  opt_state: Any
  tx: optax.GradientTransformation = flax.struct.field(pytree_node=False)

  @classmethod
  def create(cls, params, tx: optax.GradientTransformation) -> "TrainState":
    return cls(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params), tx=tx)

  def apply_gradients(self, grads) -> "TrainState":
    updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
    return self.replace(step=self.step + 1, params=optax.apply_updates(self.params, updates),
                        opt_state=opt_state)


def make_optimizer(optim, total_steps: int) -> optax.GradientTransformation:
  """AdamW with warmup + constant/cosine/linear decay and global-norm clipping.

  Args:
    optim: a ConfigDict with lr, warmup_steps, schedule ('constant' | 'cosine' | 'linear'),
      end_lr_frac, weight_decay, b1, b2, eps, grad_clip (0 = off).
    total_steps: length of the schedule.
  """
  if optim.lr <= 0:
    raise ValueError(f"optim.lr must be positive, got {optim.lr}")
  warmup = min(int(optim.warmup_steps), max(total_steps - 1, 0))
  decay_steps = max(total_steps - warmup, 1)
  end = optim.lr * optim.end_lr_frac
  if optim.schedule == "constant":
    decay = optax.constant_schedule(optim.lr)
  elif optim.schedule == "cosine":
    decay = optax.cosine_decay_schedule(optim.lr, decay_steps, alpha=optim.end_lr_frac)
  elif optim.schedule == "linear":
    decay = optax.linear_schedule(optim.lr, end, decay_steps)
  else:
    raise ValueError(f"optim.schedule must be 'constant', 'cosine' or 'linear', got "
                     f"{optim.schedule!r}")
  schedule = optax.join_schedules(
      [optax.linear_schedule(0.0, optim.lr, warmup), decay], [warmup]) if warmup else decay
  chain = []
  if optim.grad_clip:
    chain.append(optax.clip_by_global_norm(optim.grad_clip))
  chain.append(optax.adamw(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps,
                           weight_decay=optim.weight_decay))
  return optax.chain(*chain)


def optim_config(lr: float, *, warmup_steps: int = 0, schedule: str = "constant",
                 end_lr_frac: float = 0.0, weight_decay: float = 0.0, b1: float = 0.9,
                 b2: float = 0.99, eps: float = 1e-8,
                 grad_clip: float = 1.0) -> ml_collections.ConfigDict:
  """The optimizer settings `make_optimizer` reads (`config.*.optim`), as a ConfigDict."""
  return ml_collections.ConfigDict(dict(
      lr=lr, warmup_steps=warmup_steps, schedule=schedule, end_lr_frac=end_lr_frac,
      weight_decay=weight_decay, b1=b1, b2=b2, eps=eps, grad_clip=grad_clip))
