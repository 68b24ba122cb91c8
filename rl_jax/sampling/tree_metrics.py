"""LATR branching and lookahead-pruning metrics (docs/algorithms.md §3.1), pure jnp.

Every function is jittable and vectorised over any leading batch dims. Token
windows are int arrays `[..., r]` of one static length r (r <= 64 in use: 20,
30, 50); the two windows of a pair broadcast against each other. The dynamic
programmes (edit distance, LCS) run a `lax.scan` over the r positions of the
first sequence, each step a vectorised row update, O(r²) per pair.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array


def branch_candidates(top_probs: Array, tau_abs: float, tau_rel: float) -> Array:
  """LATR branch candidates (`ProbFilter`, §3.1 step 2).

  Args:
    top_probs: [..., m] the top-m raw (temperature-free) probabilities, in
      descending order.
    tau_abs: absolute threshold: the candidate's probability must exceed it.
    tau_rel: relative threshold: the gap to the top-1 probability must be below it.

  Returns:
    bool [..., m]: index j >= 1 (rank >= 2) is a candidate iff
    `p_j > tau_abs` and `p_1 − p_j < tau_rel`; index 0 is always False.
  """
  p = jnp.asarray(top_probs, jnp.float32)
  ok = (p > tau_abs) & (p[..., :1] - p < tau_rel)
  return ok & (jnp.arange(p.shape[-1]) >= 1)


def _pair(a: Array, b: Array):
  a, b = jnp.broadcast_arrays(jnp.asarray(a), jnp.asarray(b))
  if a.ndim < 1 or a.shape[-1] < 1:
    raise ValueError(f'token windows must have a non-empty last axis, got shape {a.shape}')
  return a, b


def edit_distance(a: Array, b: Array) -> Array:
  """Levenshtein distance between equal-length token windows, int32 [...].

  Row i of the DP table is `D[i, j] = min(D[i−1, j] + 1, D[i, j−1] + 1,
  D[i−1, j−1] + [a_i ≠ b_j])`; the in-row dependence is resolved in one pass as
  `D[i, j] = j + cummin_k≤j (t_k − k)` with t the first and third terms.
  """
  a, b = _pair(a, b)
  r = a.shape[-1]
  cols = jnp.arange(r + 1, dtype=jnp.int32)
  init = jnp.broadcast_to(cols, a.shape[:-1] + (r + 1,))

  def row(prev, x):
    i, a_i = x
    cost = (a_i[..., None] != b).astype(jnp.int32)                      # [..., r]
    t = jnp.minimum(prev[..., 1:] + 1, prev[..., :-1] + cost)
    t = jnp.concatenate([jnp.broadcast_to(i, t.shape[:-1] + (1,)), t], axis=-1)
    new = lax.cummin(t - cols, axis=t.ndim - 1) + cols
    return new, None

  xs = (jnp.arange(1, r + 1, dtype=jnp.int32), jnp.moveaxis(a, -1, 0))
  last, _ = lax.scan(row, init, xs)
  return last[..., -1]


def normalized_edit_distance(a: Array, b: Array) -> Array:
  """`ED(a, b) / r`, float32 [...]."""
  a, b = _pair(a, b)
  return edit_distance(a, b).astype(jnp.float32) / a.shape[-1]


def lcs_length(a: Array, b: Array) -> Array:
  """Length of the longest common subsequence of two windows, int32 [...].

  `L[i, j] = max(L[i, j−1], L[i−1, j], L[i−1, j−1] + [a_i = b_j])`, the in-row
  dependence resolved as a cumulative max.
  """
  a, b = _pair(a, b)
  r = a.shape[-1]
  init = jnp.zeros(a.shape[:-1] + (r + 1,), jnp.int32)

  def row(prev, a_i):
    eq = (a_i[..., None] == b).astype(jnp.int32)
    t = jnp.maximum(prev[..., 1:], prev[..., :-1] + eq)
    t = jnp.concatenate([jnp.zeros_like(t[..., :1]), t], axis=-1)
    return lax.cummax(t, axis=t.ndim - 1), None

  last, _ = lax.scan(row, init, jnp.moveaxis(a, -1, 0))
  return last[..., -1]


def rouge_l(a: Array, b: Array) -> Array:
  """ROUGE-L F1 of equal-length windows = `LCS(a, b) / r`, float32 [...]."""
  a, b = _pair(a, b)
  return lcs_length(a, b).astype(jnp.float32) / a.shape[-1]


def _longest_suffix_in(a: Array, b: Array) -> Array:
  """Longest suffix of a occurring as a contiguous substring of b, int32 [...].

  Banded equality tensor `E[..., k, j] = [a_{r−1−k} = b_{j−k}]` (k ≤ j): the run
  of leading ones along k is the common-suffix length of `a` and `b[:j+1]`.
  """
  r = a.shape[-1]
  k = jnp.arange(r)[:, None]
  j = jnp.arange(r)[None, :]
  a_k = jnp.flip(a, axis=-1)[..., :, None]                           # a_{r−1−k}
  b_jk = jnp.take(b, jnp.clip(j - k, 0, r - 1), axis=-1)             # [..., r, r]
  eq = (a_k == b_jk) & (k <= j)
  run = jnp.sum(jnp.cumprod(eq.astype(jnp.int32), axis=-2), axis=-2)  # [..., r] over j
  return jnp.max(run, axis=-1)


def suffix_match(a: Array, b: Array) -> Array:
  """LATR suffix-match score `max(ℓ₁, ℓ₂) / r`, float32 [...].

  ℓ₁ = longest suffix of a found as a contiguous substring of b, ℓ₂ symmetric.
  """
  a, b = _pair(a, b)
  best = jnp.maximum(_longest_suffix_in(a, b), _longest_suffix_in(b, a))
  return best.astype(jnp.float32) / a.shape[-1]


def prune_mask(child: Array, parent: Array, *, ed_threshold: Optional[float] = None,
               sm_threshold: Optional[float] = None,
               rl_threshold: Optional[float] = None) -> Array:
  """LATR lookahead pruning (`RolloutFilter`): prune iff any enabled criterion fires.

  Args:
    child: [..., r] the child's last r tokens (its first one the divergent token).
    parent: [..., r] the parent's tokens over the same steps.
    ed_threshold: τ_ed: prune if `ED/r < τ_ed` (None disables).
    sm_threshold: τ_sm: prune if `suffix_match > τ_sm` (None disables).
    rl_threshold: τ_rl: prune if `rouge_l > τ_rl` (None disables).

  Returns:
    bool [...] (all False when every criterion is disabled).
  """
  child, parent = _pair(child, parent)
  prune = jnp.zeros(child.shape[:-1], bool)
  if ed_threshold is not None:
    prune |= normalized_edit_distance(child, parent) < ed_threshold
  if sm_threshold is not None:
    prune |= suffix_match(child, parent) > sm_threshold
  if rl_threshold is not None:
    prune |= rouge_l(child, parent) > rl_threshold
  return prune
