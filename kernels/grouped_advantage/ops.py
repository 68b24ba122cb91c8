"""Dispatch of the grouped advantage: Pallas on GPU/TPU, the XLA reference elsewhere.

    adv, token_adv = grouped_advantage(rewards, valid, group_size=G, mode="mean_std",
                                       token_mask=mask)

Same signature and results as `reference.reference` (see its docstring for the formulas), plus
`impl` ('auto' | 'pallas' | 'xla' | 'interpret') and the tile sizes. 'median_mad' needs a sort
and always runs the XLA reference. No custom_vjp: advantages are constants of the loss.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from kernels.grouped_advantage import kernel
from kernels.grouped_advantage.reference import MODES, reference, segments

IMPLS = ("auto", "pallas", "xla", "interpret")


def grouped_advantage(rewards: jax.Array, valid: jax.Array, *, group_size: Optional[int] = None,
                      segment_ids: Optional[jax.Array] = None,
                      num_segments: Optional[int] = None, mode: str = "mean_std",
                      eps: float = 1e-6, weights: Optional[Sequence[float]] = None,
                      token_mask: Optional[jax.Array] = None, impl: str = "auto",
                      block_r: int = 256, block_t: int = 512):
  """Grouped advantages and their token broadcast; see `reference.reference`.

  Args:
    rewards, valid, group_size, segment_ids, num_segments, mode, eps, weights, token_mask: as
      in `reference.reference`.
    impl: 'auto' (Pallas on GPU/TPU, XLA otherwise), 'pallas', 'xla' or 'interpret'.
    block_r: rows per program (a power of 2; clipped to the padded row count).
    block_t: tokens per program (a power of 2, or 128-multiple on TPU; clipped to T).
  """
  if impl not in IMPLS:
    raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  backend = jax.default_backend()
  accel = backend in ("gpu", "cuda", "rocm", "tpu")
  if impl == "pallas" and not accel:
    raise ValueError(f"impl='pallas' needs a GPU or TPU backend, got {backend!r}")
  use_kernel = impl == "interpret" or (impl in ("auto", "pallas") and accel)
  if not use_kernel or mode == "median_mad":
    return reference(rewards, valid, group_size=group_size, segment_ids=segment_ids,
                     num_segments=num_segments, mode=mode, eps=eps, weights=weights,
                     token_mask=token_mask)
  x = rewards.reshape(rewards.shape[0], -1).astype(jnp.float32)
  n_rows, k = x.shape
  ids, s = segments(n_rows, group_size, segment_ids, num_segments)
  w = (1.0,) * k if weights is None else tuple(float(a) for a in weights)
  if len(w) != k:
    raise ValueError(f"weights must have {k} entries, got {len(w)}")
  mask = (jnp.zeros((n_rows, 1), jnp.float32) if token_mask is None
          else token_mask.astype(jnp.float32))
  r_pad = pl.next_power_of_2(max(n_rows, 8))
  pad = lambda a: jnp.pad(a, ((0, r_pad - n_rows), (0, 0)))  # noqa: E731
  v = valid.astype(jnp.float32)[:, None]
  t = mask.shape[1]
  adv, tok = kernel.grouped_advantage(
      pad(jnp.where(v > 0, x, 0.0)), pad(v), pad(ids[:, None]), pad(mask), mode=mode,
      eps=float(eps), weights=w, num_segments=pl.next_power_of_2(s),
      block_r=min(block_r, r_pad), block_t=min(block_t, pl.next_power_of_2(t)),
      platform=backend if accel else None, interpret=impl == "interpret")
  adv = adv[:n_rows].reshape(rewards.shape)
  return adv, (None if token_mask is None else tok[:n_rows])
