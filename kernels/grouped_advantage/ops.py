"""Dispatch of the grouped advantage: Pallas on GPU/TPU, the XLA reference elsewhere.

    adv, token_adv = grouped_advantage(rewards, valid, group_size=G, mode="mean_std",
                                       token_mask=mask)

Same signature and results as `reference.reference` (see its docstring for the formulas), plus
`impl` ('auto' | 'pallas' | 'xla' | 'interpret') and the tile sizes. 'median_mad' needs a sort
and always runs the XLA reference. No custom_vjp: advantages are constants of the loss.

`impl='auto'` chooses when the program is lowered (`lax.platform_dependent`), not when it is
traced: a TPU executable gets the Mosaic kernel and a CUDA one the Triton kernel even when it is
compiled ahead of time on a CPU host (`experiments.aot`); CPU gets the XLA reference. Pallas
kernels cannot be partitioned by XLA, so under a context mesh (`jax.set_mesh`, as the training
loop sets) of several devices the kernel runs in a `shard_map`: each device takes its own whole
groups of rows when the mesh's ('data', 'fsdp') devices divide the groups, else all rows.
"""

from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.sharding import PartitionSpec as P

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
  ref = functools.partial(reference, group_size=group_size, segment_ids=segment_ids,
                          num_segments=num_segments, mode=mode, eps=eps, weights=weights)
  if impl == "xla" or mode == "median_mad":
    return ref(rewards, valid, token_mask=token_mask)
  kw = dict(group_size=group_size, segment_ids=segment_ids, num_segments=num_segments,
            mode=mode, eps=eps, weights=weights, block_r=block_r, block_t=block_t)
  # Advantages are constants of the loss; the kernel has no derivative rule, so differentiating
  # a caller must not reach it.
  rewards, token_mask = jax.lax.stop_gradient((rewards, token_mask))
  if impl == "interpret":
    return _pallas(rewards, valid, token_mask, platform=None, interpret=True, **kw)
  if impl == "pallas":
    return _sharded_pallas(rewards, valid, token_mask, platform=backend, **kw)
  return jax.lax.platform_dependent(
      rewards, valid, token_mask,
      tpu=functools.partial(_sharded_pallas, platform="tpu", **kw),
      cuda=functools.partial(_sharded_pallas, platform="gpu", **kw),
      default=lambda r, v, m: ref(r, v, token_mask=m))


def _sharded_pallas(rewards, valid, token_mask, *, platform: str, **kw):
  """The kernel, in a `shard_map` over the context mesh when it has several devices."""
  mesh = jax.sharding.get_abstract_mesh()
  call = functools.partial(_pallas, platform=platform, interpret=False, **kw)
  if mesh.empty or mesh.size == 1:
    return call(rewards, valid, token_mask)
  if kw["group_size"] is None:  # Segment ids may put a segment's rows on any device.
    ref = {k: kw[k] for k in ("segment_ids", "num_segments", "mode", "eps", "weights")}
    return reference(rewards, valid, token_mask=token_mask, **ref)
  axes = tuple(a for a in ("data", "fsdp") if a in mesh.axis_names)
  shards = math.prod(mesh.shape[a] for a in axes)
  # Each device takes whole groups of rows where they divide, else every device all rows.
  spec = P(axes) if axes and rewards.shape[0] % (shards * kw["group_size"]) == 0 else P()
  if token_mask is None:
    body = lambda r, v: call(r, v, None)[0]  # noqa: E731
    adv = jax.shard_map(body, mesh=mesh, in_specs=(spec, spec), out_specs=spec,
                        check_vma=False)(rewards, valid)
    return adv, None
  return jax.shard_map(call, mesh=mesh, in_specs=(spec, spec, spec), out_specs=(spec, spec),
                       check_vma=False)(rewards, valid, token_mask)


def _pallas(rewards, valid, token_mask, *, group_size, segment_ids, num_segments, mode, eps,
            weights, block_r, block_t, platform, interpret):
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
  block_t = min(block_t, pl.next_power_of_2(t))
  # Token columns padded (zero mask) to whole blocks: Triton does not mask a partial last block,
  # and on an H100 T=100 with block_t=128 gave wrong token advantages (interpret mode hid it).
  mask = jnp.pad(mask, ((0, 0), (0, -t % block_t)))
  adv, tok = kernel.grouped_advantage(
      pad(jnp.where(v > 0, x, 0.0)), pad(v), pad(ids[:, None]), pad(mask), mode=mode,
      eps=float(eps), weights=w, num_segments=pl.next_power_of_2(s),
      block_r=min(block_r, r_pad), block_t=block_t, platform=platform, interpret=interpret)
  adv = adv[:n_rows].reshape(rewards.shape)
  return adv, (None if token_mask is None else tok[:n_rows, :t])
