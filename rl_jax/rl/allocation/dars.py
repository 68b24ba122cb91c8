"""DARS — Difficulty Adaptive Rollout Sampling (docs/algorithms.md §6.2, [V] yangzhch6/DARS).

Stage 1 samples N rows per prompt (accuracy `a`); stage 2 tops up the prompts with `a < 0.5`
so that their cumulative |advantage| reaches a target (`a = 0` is read as `0.5/N`):
  `S(a) = 2a(1−a)` (no-std advantages) or `2√(a(1−a))` (std-normalised);
  `A_peak = 0.5·N` or `N`;
  Equal Treatment (ET):     `Δn = ceil((A_peak − N·S(a)) / S(a))`
  Hardness Weighted (HW):   `Δn = ceil((2(1−a)·A_peak − N·S(a)) / S(a))`
capped at `N_max − N` (ET: N_max = 32, HW: 64).

Under a fixed budget (this interface) the requested `Δn` are scaled down proportionally when
they exceed the rows left after stage 1 (largest remainders first), and rows they leave unused
are spread over the prompts with `a < 1` (`fit_to_budget`) — a choice of ours: DARS itself has
no fixed budget.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rl_jax.rl.allocation.base import (ALLOCATORS, Allocation, AllocationError, Allocator,
                                       fit_to_budget)

SCHEDULES = ("et", "hw")


def dars_extra(acc, n: int, n_max: int, schedule: str = "et", use_std: bool = False) -> np.ndarray:
  """Δn(a) [B] int: the stage-2 rows DARS asks for each prompt (§8.5 `dars_extra`)."""
  if schedule not in SCHEDULES:
    raise AllocationError(f"dars schedule={schedule!r}; expected one of {SCHEDULES}")
  acc = np.asarray(acc, np.float64)
  a = np.where(acc <= 1e-6, 0.5 / n, acc)
  s = 2.0 * np.sqrt(a * (1.0 - a)) if use_std else 2.0 * a * (1.0 - a)
  peak = float(n) if use_std else 0.5 * n
  target = 2.0 * (1.0 - a) * peak if schedule == "hw" else peak
  with np.errstate(divide="ignore", invalid="ignore"):
    dn = np.ceil((target - n * s) / s - 1e-9)
  dn = np.where(a >= 0.5, 0, np.minimum(dn, n_max - n))
  return np.maximum(dn, 0).astype(np.int64)


def scale_to(request: np.ndarray, total: int) -> np.ndarray:
  """`request` scaled down to sum to `total` when it sums to more (largest remainders first,
  ties by index); unchanged otherwise."""
  request = np.asarray(request, np.int64)
  have = int(request.sum())
  if have <= total:
    return request
  exact = request * (total / have)
  out = np.floor(exact).astype(np.int64)
  left = total - int(out.sum())
  out[np.argsort(-(exact - out), kind="stable")[:left]] += 1
  return out


@ALLOCATORS.register("dars")
@dataclasses.dataclass(frozen=True)
class Dars(Allocator):
  """DARS [V] under a fixed budget. Stage 1 is `budget.min_n` rows per prompt (N); `a` is the
  prompt's observed accuracy (this step's stage-1 rows, plus history when given). schedule:
  'et' | 'hw'; n_max: the cap N_max (0: 32 for ET, 64 for HW, as the reference scripts);
  use_std: the std-normalised S(a)."""
  schedule: str = "hw"
  n_max: int = 0
  use_std: bool = False

  def __post_init__(self):
    if self.schedule not in SCHEDULES:
      raise AllocationError(f"dars schedule={self.schedule!r}; expected one of {SCHEDULES}")

  def allocate(self, stats, budget, state, rng):
    del state, rng
    n1 = max(budget.min_n, 1)
    cap = self.n_max or (32 if self.schedule == "et" else 64)
    acc = np.nan_to_num(stats.rate(), nan=0.5)
    want = dars_extra(acc, n1, max(cap, n1), self.schedule, self.use_std)
    counts = budget.min_n + scale_to(want, budget.total - budget.min_n * len(stats))
    order = np.argsort(acc, kind="stable")  # Leftover rows: hardest prompts first.
    order = np.concatenate([order[acc[order] < 1], order[acc[order] >= 1]])
    return Allocation(fit_to_budget(counts, budget, order), np.ones(len(stats), bool))
