"""Pallas kernel of the grouped advantage (modes 'mean_std', 'mean', 'loo').

Grid (row blocks, token blocks). Every program reads all R rows' rewards, validity and segment
ids (small: R x K floats), forms the [R, S] one-hot of valid segment members and reduces it to
per-segment statistics [1, S]; then it broadcasts those back to its own [block_r] rows through
their [block_r, S] one-hot, writes their advantages [block_r, K] and the token advantages
[block_r, block_t] = mask * sum_k w_k A_k. Only 2-D arrays, elementwise maths and row/column
reductions, so the one body lowers with Triton (GPU) and Mosaic (TPU). Segment statistics are
recomputed by every program: O(R S) work per program, negligible next to the [R, T] token write
for RL batch sizes (R, S in the thousands at most).

Shapes are padded by `ops`: rows and segments to powers of 2 (Triton), padding rows invalid.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu


def _kernel(r_all_ref, v_all_ref, id_all_ref, r_ref, v_ref, id_ref, m_ref, adv_ref, tok_ref, *,
            mode: str, eps: float, weights: tuple, num_segments: int):
  seg = lax.broadcasted_iota(jnp.int32, (1, num_segments), 1)
  v_all = v_all_ref[...]
  members = jnp.where(id_all_ref[...] == seg, v_all, 0.0)              # [R, S]
  mine = jnp.where(id_ref[...] == seg, 1.0, 0.0)                       # [block_r, S]
  to_seg = lambda col: jnp.sum(members * col, axis=0, keepdims=True)   # noqa: E731  [R,1]->[1,S]
  to_all = lambda row: jnp.sum(members * row, axis=1, keepdims=True)   # noqa: E731  [1,S]->[R,1]
  to_mine = lambda row: jnp.sum(mine * row, axis=1, keepdims=True)     # noqa: E731  ->[block_r,1]
  n = jnp.sum(members, axis=0, keepdims=True)
  single = n == 1.0
  valid = v_ref[...] > 0
  acc = jnp.zeros(valid.shape, jnp.float32)
  for k, w in enumerate(weights):
    x_all = r_all_ref[:, k:k + 1]
    x = r_ref[:, k:k + 1]
    total = to_seg(x_all)
    if mode == "loo":
      n_r = to_mine(n)
      a = jnp.where(n_r > 1.0, (n_r * x - to_mine(total)) / jnp.maximum(n_r - 1.0, 1.0), x)
    else:
      mean = total / jnp.maximum(n, 1.0)
      a = x - to_mine(jnp.where(single, 0.0, mean))
      if mode == "mean_std":
        var = to_seg(jnp.square(x_all - to_all(mean))) / jnp.maximum(n - 1.0, 1.0)
        a = a / (to_mine(jnp.where(single, 1.0, jnp.sqrt(var))) + eps)
    a = jnp.where(valid, a, 0.0)
    adv_ref[:, k:k + 1] = a
    acc = acc + w * a
  tok_ref[...] = acc * m_ref[...]


@functools.partial(jax.jit, static_argnames=("mode", "eps", "weights", "num_segments",
                                             "block_r", "block_t", "platform", "interpret"))
def grouped_advantage(rewards, valid, segment_ids, token_mask, *, mode: str, eps: float,
                      weights: tuple, num_segments: int, block_r: int, block_t: int,
                      platform: Optional[str] = None, interpret: bool = False):
  """-> (adv [R, K], token_adv [R, T]) float32.

  Args:
    rewards: [R, K] float32, 0 on invalid rows.
    valid: [R, 1] float32 in {0, 1}.
    segment_ids: [R, 1] int32 in [0, num_segments) (anything on invalid rows).
    token_mask: [R, T] float32.
    mode, eps, weights: as in `reference` (weights a K-tuple of floats).
    num_segments: S.
    block_r, block_t: rows and tokens per program; R % block_r == 0.
    platform: 'tpu' lowers with Mosaic (TPU); anything else with Triton (GPU).
    interpret: run in interpret mode.
  """
  (r, k), t = rewards.shape, token_mask.shape[1]
  full = lambda cols: pl.BlockSpec((r, cols), lambda i, j: (0, 0))  # noqa: E731
  rows = lambda cols: pl.BlockSpec((block_r, cols), lambda i, j: (i, 0))  # noqa: E731
  tokens = pl.BlockSpec((block_r, block_t), lambda i, j: (i, j))
  if platform == "tpu":
    params = pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"))
  else:  # Triton: Pallas' default GPU lowering is Mosaic GPU, which this kernel is not written for.
    params = plgpu.CompilerParams(num_warps=4, num_stages=1)
  return pl.pallas_call(
      functools.partial(_kernel, mode=mode, eps=eps, weights=weights, num_segments=num_segments),
      grid=(r // block_r, pl.cdiv(t, block_t)),
      in_specs=[full(k), full(1), full(1), rows(k), rows(1), rows(1), tokens],
      out_specs=[rows(k), tokens],
      out_shape=[jax.ShapeDtypeStruct((r, k), jnp.float32),
                 jax.ShapeDtypeStruct((r, t), jnp.float32)],
      compiler_params=params,
      interpret=interpret,
      name="grouped_advantage",
  )(rewards, valid, segment_ids, rewards, valid, segment_ids, token_mask)
