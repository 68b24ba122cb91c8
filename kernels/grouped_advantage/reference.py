"""XLA reference of the grouped advantage: per-segment statistics -> normalized advantages.

    adv, token_adv = reference(rewards, valid, group_size=G, mode="mean_std", token_mask=m)

Rows r = 0..R-1 belong to segments (prompt groups) given either by `group_size` G (contiguous:
row r is in segment r // G) or by `segment_ids` [R] with a static `num_segments` S. Rewards are
[R] or [R, K] (K reward columns, each normalized on its own). Over the valid members of a
segment, with n members:

  mean_std    A = (r - mu) / (sigma + eps)        mu = mean, sigma = unbiased std (ddof 1)
  mean        A = r - mu                          (Dr.GRPO)
  loo         A = (n r - sum r) / (n - 1)         (RLOO; r itself when n == 1)
  median_mad  A = (r - med) / (MAD + eps)         med = lower median; MAD = lower median of
                                                  |r - med| (MC-GRPO)

A segment with one valid member has mu = 0 and sigma = 1 (verl). Invalid rows get A = 0. With a
token mask [R, T], the per-row advantage sum_k w_k A_k (weights w, default all 1) is broadcast to
the tokens in the same call: token_adv[r, t] = mask[r, t] * sum_k w_k A[r, k].
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp

MODES = ("mean_std", "mean", "loo", "median_mad")


def segments(n_rows: int, group_size: Optional[int], segment_ids: Optional[jax.Array],
             num_segments: Optional[int]) -> tuple[jax.Array, int]:
  """(segment_ids [R] int32, S) from either a contiguous group size or explicit ids."""
  if (group_size is None) == (segment_ids is None):
    raise ValueError("pass exactly one of group_size (contiguous) and segment_ids")
  if group_size is not None:
    if group_size <= 0 or n_rows % group_size:
      raise ValueError(f"group_size={group_size} must divide the {n_rows} rows")
    return jnp.arange(n_rows, dtype=jnp.int32) // group_size, n_rows // group_size
  if num_segments is None:
    raise ValueError("segment_ids needs a static num_segments")
  return jnp.asarray(segment_ids, jnp.int32), num_segments


def _lower_median(x: jax.Array, valid: jax.Array, ids: jax.Array, n: jax.Array, s: int):
  """Lower median of x [R] over the valid rows of each segment -> [S]."""
  order = jnp.lexsort((x, ~valid, ids))  # By segment, valid rows first, ascending x.
  start = jnp.cumsum(jnp.bincount(ids, length=s)) - jnp.bincount(ids, length=s)
  k = (jnp.maximum(n, 1).astype(jnp.int32) - 1) // 2
  return x[order][jnp.clip(start + k, 0, x.shape[0] - 1)]


def segment_stats(values: jax.Array, valid: jax.Array, segment_ids: jax.Array,
                  num_segments: int, *, median: bool = False) -> dict:
  """Per-segment statistics of values [R, K] over valid rows.

  Returns a dict of [S] (count) and [S, K] arrays: count n, sum, mean mu, std sigma (unbiased;
  mu = 0 and sigma = 1 for singletons), and with `median` the lower median and the MAD.
  """
  v = valid.astype(jnp.float32)[:, None]
  x = jnp.where(v > 0, values.astype(jnp.float32), 0.0)
  seg_sum = lambda a: jax.ops.segment_sum(a, segment_ids, num_segments)  # noqa: E731
  n = seg_sum(v[:, 0])
  total = seg_sum(x * v)
  mean = total / jnp.maximum(n, 1.0)[:, None]
  var = seg_sum(jnp.square(x - mean[segment_ids]) * v) / jnp.maximum(n - 1.0, 1.0)[:, None]
  single = (n == 1)[:, None]
  out = dict(count=n, sum=total, mean=jnp.where(single, 0.0, mean),
             std=jnp.where(single, 1.0, jnp.sqrt(var)))
  if median:
    ok = valid.astype(bool)
    med_fn = lambda col: _lower_median(col, ok, segment_ids, n, num_segments)  # noqa: E731
    med = jax.vmap(med_fn, in_axes=1, out_axes=1)(x)
    out["median"] = med
    out["mad"] = jax.vmap(med_fn, in_axes=1, out_axes=1)(jnp.abs(x - med[segment_ids]))
  return out


def row_advantage(x: jax.Array, ids: jax.Array, stats: dict, mode: str, eps: float):
  """A [R, K] from values x [R, K] and their segments' statistics."""
  if mode == "mean_std":
    return (x - stats["mean"][ids]) / (stats["std"][ids] + eps)
  if mode == "mean":
    return x - stats["mean"][ids]
  if mode == "loo":
    n = stats["count"][ids][:, None]
    return jnp.where(n > 1, (n * x - stats["sum"][ids]) / jnp.maximum(n - 1.0, 1.0), x)
  if mode == "median_mad":
    return (x - stats["median"][ids]) / (stats["mad"][ids] + eps)
  raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def reference(rewards: jax.Array, valid: jax.Array, *, group_size: Optional[int] = None,
              segment_ids: Optional[jax.Array] = None, num_segments: Optional[int] = None,
              mode: str = "mean_std", eps: float = 1e-6,
              weights: Optional[Sequence[float]] = None,
              token_mask: Optional[jax.Array] = None):
  """Grouped advantages (see the module docstring).

  Args:
    rewards: [R] or [R, K] rewards.
    valid: [R] bool, the row exists.
    group_size: G for contiguous segments (R % G == 0); or
    segment_ids: [R] int segment of each row, in [0, num_segments).
    num_segments: S (static), with segment_ids.
    mode: 'mean_std' | 'mean' | 'loo' | 'median_mad'.
    eps: added to the std (or MAD) before dividing.
    weights: K weights of the reward columns in the token advantage (default all 1).
    token_mask: optional [R, T] mask of the tokens that get the row's advantage.

  Returns:
    (adv, token_adv): adv float32 shaped like rewards (0 on invalid rows); token_adv [R, T]
    float32, or None without token_mask.
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  x = rewards.reshape(rewards.shape[0], -1).astype(jnp.float32)
  ids, s = segments(x.shape[0], group_size, segment_ids, num_segments)
  stats = segment_stats(x, valid, ids, s, median=mode == "median_mad")
  adv = jnp.where(valid[:, None], row_advantage(x, ids, stats, mode, eps), 0.0)
  token_adv = None
  if token_mask is not None:
    w = jnp.ones(x.shape[1]) if weights is None else jnp.asarray(weights, jnp.float32)
    token_adv = jnp.sum(adv * w, axis=1)[:, None] * token_mask.astype(jnp.float32)
  return adv.reshape(rewards.shape), token_adv
