"""Knapsack RL (docs/algorithms.md §6.1, [V] liziniu/KnapsackRL `exploration_utils.py`) and the V0
allocation rule (§4.1, [R]).

Item value of N rollouts of a prompt with success rate p:
  `Value(N, p) = (1 − p^N − (1−p)^N) · p(1−p)²`
(probability that the group is not degenerate x the per-prompt information gain). Following the
public code, effective prompts (0 < p < 1) start at `min_n` rows and the extra rows `k_i` maximise
`Σ_i 1[k_i >= 1] · Value(min_n + k_i, p_i)` subject to `Σ k_i = R`: a prompt given no extra row
counts 0 (not `Value(min_n, p)`). Each prompt's gains (`Value(min_n + 1, p)`, then the
increments) decrease, so greedy marginal allocation equals the exact DP (`knapsack_dp` is the DP,
kept for the tests).
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from rl_jax.rl.allocation.base import (ALLOCATORS, Allocation, AllocationError, Allocator,
                                       Budget, fit_to_budget, spread)


def value(n, p):
  """`Value(N, p) = (1 − p^N − (1−p)^N) · p(1−p)²` (elementwise)."""
  n, p = np.asarray(n, np.float64), np.asarray(p, np.float64)
  return (1.0 - p ** n - (1.0 - p) ** n) * p * (1.0 - p) ** 2


def marginal_gains(p: float, min_n: int, max_extra: int) -> np.ndarray:
  """Gains of the 1st, 2nd, ... extra row: `Value(min_n+1, p)`, then `Value(min_n+k, p) −
  Value(min_n+k−1, p)` (public-code objective: no extra row is worth 0)."""
  v = value(min_n + np.arange(1, max_extra + 1), p)
  return np.diff(v, prepend=0.0)


def knapsack_greedy(p: np.ndarray, extra: int, min_n: int, max_extra: int) -> np.ndarray:
  """Extra rows k [E] maximising `Σ 1[k>=1]·Value(min_n + k, p)`, `Σ k = min(extra, E·max_extra)`.

  Takes the largest next gain one row at a time (ties: the lower prompt index); exact because
  every prompt's gains decrease (tested against `knapsack_dp`).
  """
  p = np.asarray(p, np.float64)
  k = np.zeros(len(p), np.int64)
  if not len(p) or max_extra <= 0:
    return k
  gains = [marginal_gains(pi, min_n, max_extra) for pi in p]
  heap = [(-g[0], i) for i, g in enumerate(gains)]
  heapq.heapify(heap)
  for _ in range(min(int(extra), len(p) * max_extra)):
    _, i = heapq.heappop(heap)
    k[i] += 1
    if k[i] < max_extra:
      heapq.heappush(heap, (-gains[i][k[i]], i))
  return k


def knapsack_dp(p: np.ndarray, extra: int, min_n: int, max_extra: int) -> tuple[np.ndarray, float]:
  """The reference's exact DP (Σ k = extra exactly; k = 0 is worth 0) -> (k, best value)."""
  p = np.asarray(p, np.float64)
  e = len(p)
  dp = np.full((e + 1, extra + 1), -np.inf)
  dp[0, 0] = 0.0
  pick = np.zeros((e + 1, extra + 1), np.int64)
  for i in range(1, e + 1):
    for w in range(extra + 1):
      dp[i, w], pick[i, w] = dp[i - 1, w], 0
      for kk in range(1, min(max_extra, w) + 1):
        cand = dp[i - 1, w - kk] + float(value(min_n + kk, p[i - 1]))
        if cand > dp[i, w] + 1e-15:
          dp[i, w], pick[i, w] = cand, kk
  k, w = np.zeros(e, np.int64), extra
  for i in range(e, 0, -1):
    k[i - 1] = pick[i, w]
    w -= k[i - 1]
  return k, float(dp[e, extra])


def total_value(k: np.ndarray, p: np.ndarray, min_n: int) -> float:
  k = np.asarray(k)
  return float(np.sum(np.where(k >= 1, value(min_n + k, p), 0.0)))


def _fallback_cost(p: np.ndarray, alpha: float, kind: str) -> np.ndarray:
  """Rollouts needed to see both outcomes: `log(1−α)/log(max(p, 1−p))` ('probability') or
  `1/(p(1−p)) − 1` ('expectation')."""
  if kind == "probability":
    return np.log(1.0 - alpha) / np.log(np.maximum(p, 1.0 - p))
  return 1.0 / (p * (1.0 - p)) - 1.0


def knapsack_counts(p: np.ndarray, valid: np.ndarray, budget: Budget, *, default_n: int,
                    alpha: float = 0.9, cost: str = "probability",
                    fallback: bool = True) -> np.ndarray:
  """The public code's allocation (§6.1 steps 1-4), within [min_n, max_n] and Σ = budget.

  p [B] success rates, valid [B] whether p is an estimate. Invalid prompts get `default_n`,
  p = 0 / p = 1 / effective prompts `min_n`; the rest R goes (fallback) first to p = 0 prompts up
  to what the effective ones can use (`Σ int(min(max_n, cost_i))`), then to the effective ones
  by greedy knapsack. Rows the rules leave over, or above max_n, are spread by `fit_to_budget`
  (effective prompts first).
  """
  b, m = budget.num_prompts, budget.min_n
  p = np.where(valid, np.asarray(p, np.float64), 0.5)
  eff = valid & (p > 0) & (p < 1)
  zero = valid & (p == 0)
  n = np.where(valid, m, default_n).astype(np.int64)
  rest = budget.total - int(n.sum())
  if rest > 0 and not eff.any():
    if zero.any():
      n[zero] += spread(rest, int(zero.sum()))
    else:
      n[:] = spread(budget.total, b)
    rest = 0
  elif rest > 0:
    if fallback:
      est = int(np.sum(np.minimum(budget.max_n, _fallback_cost(p[eff], alpha, cost)).astype(
          np.int64)))
      cand = zero if zero.any() else ~eff
      if est < rest and cand.any():  # (Every prompt effective: the reference divides by 0.)
        n[cand] += spread(rest - est, int(cand.sum()))
        rest = est
    k = knapsack_greedy(p[eff], rest, m, budget.max_n - m)
    n[eff] += k
    rest -= int(k.sum())
    if rest > 0:  # Infeasible for the effective prompts alone: spread over them (reference).
      n[eff] += spread(rest, int(eff.sum()))
  order = np.concatenate([np.flatnonzero(eff), np.flatnonzero(~eff)])
  return fit_to_budget(n, budget, order)


@ALLOCATORS.register("knapsack")
@dataclasses.dataclass(frozen=True)
class Knapsack(Allocator):
  """Knapsack RL [V]. `p` = the prompt's success rate over its observed rollouts (the history
  window, plus this step's probe); it is an estimate when at least `min_obs` were seen (the
  reference: 8 of a 16-rollout buffer). With a prior (`config.rl.allocator_prior`, e.g. the
  `oracle` prior's Monte Carlo rates) `p` is the prior's `p_hat` for every prompt instead, an
  estimate whatever the history holds. `default_n` = rows of a prompt without an estimate
  (0: the budget's mean, total // B). alpha, cost: the fallback's cost estimate; fallback: send
  what the effective prompts cannot use to the p = 0 prompts."""
  reads_prior = True
  min_obs: int = 8
  default_n: int = 0
  alpha: float = 0.9
  cost: str = "probability"
  fallback: bool = True

  def __post_init__(self):
    if self.cost not in ("probability", "expectation"):
      raise AllocationError(f"knapsack cost={self.cost!r}; expected 'probability' or "
                            f"'expectation'")
    if not 0 < self.alpha < 1:
      raise AllocationError(f"knapsack alpha={self.alpha}; expected 0 < alpha < 1")

  def allocate(self, stats, budget, state, rng):
    del state, rng
    if stats.p_hat is not None:
      p, valid = stats.p_hat, np.ones(len(stats), bool)
    else:
      valid = stats.attempts >= max(self.min_obs, 1)
      p = np.nan_to_num(stats.rate(), nan=0.5)
    default = self.default_n or budget.total // budget.num_prompts
    n = knapsack_counts(p, valid, budget, default_n=default, alpha=self.alpha, cost=self.cost,
                        fallback=self.fallback)
    return Allocation(n, np.ones(len(stats), bool))


@ALLOCATORS.register("v0")
@dataclasses.dataclass(frozen=True)
class V0Allocation(Allocator):
  """V0-guided allocation (`v0_alloc_reconstructed`, §4.1 [R]): prompts with `p̂ < δ` or
  `p̂ > 1 − δ` get `min_n` rows; the rest of the budget is split over the others by the Knapsack
  value with `p̂` in place of the historical rate (greedy == DP). Needs `stats.p_hat`.
  With `reconstructed=False` there is no published rule to fall back on: it raises."""
  reads_prior = True
  needs_prior = True
  delta: float = 0.05
  reconstructed: bool = True

  def allocate(self, stats, budget, state, rng):
    del state, rng
    if not self.reconstructed:
      raise AllocationError("allocator 'v0': no published allocation rule exists; only the "
                            "reconstructed one (reconstructed=True)")
    if stats.p_hat is None:
      raise AllocationError("allocator 'v0' needs predictions stats.p_hat (V0's p̂); got None")
    p = stats.p_hat
    keep = (p >= self.delta) & (p <= 1.0 - self.delta)
    m = budget.min_n
    n = np.full(len(p), m, np.int64)
    rest = budget.total - int(n.sum())
    k = knapsack_greedy(p[keep], rest, m, budget.max_n - m)
    n[keep] += k
    order = np.concatenate([np.flatnonzero(keep), np.flatnonzero(~keep)])
    return Allocation(fit_to_budget(n, budget, order), np.ones(len(p), bool))
