"""The allocator interface: per-prompt statistics + a rollout budget -> rows per prompt.

docs/algorithms.md §6: `allocate(stats[C], budget) -> n[C]` (ints, `Σ n = budget`), run on the host
before sampling. One interface covers two kinds of method:

* allocation (`uniform`, `knapsack`, `dars`, `xrpo`, `v0`): every candidate enters the batch
  (C = B) and gets `min_n <= n_b <= max_n` rows;
* data selection (`vade`, `insight`): B of C >= B candidates enter the batch (`selected`), each
  with the same share of the budget; the others get 0 rows.

An allocator is a frozen dataclass of its options (built by `make(name, **options)`) with

    init_state() -> dict                                  (JSON-ready; {} when stateless)
    allocate(stats, budget, state, rng) -> Allocation     (pure: same inputs, same output)
    observe(state, prompt_ids, attempts, successes, step) -> dict   (the new state)

`rng` is a `np.random.Generator` the caller derives from (seed, step) only, so a resumed run
allocates exactly like an uninterrupted one. `state` is what must survive a resume beyond the
rollout history (VADE's posteriors); history-based allocators read the history through
`PromptStats` and keep no state.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from rl_jax.registry import Registry

ALLOCATORS = Registry("allocator")


class AllocationError(ValueError):
  """A budget or statistics that no allocation can satisfy (the message names the values)."""


@dataclasses.dataclass(frozen=True)
class PromptStats:
  """Per-candidate statistics, all [C].

  attempts / successes: rollouts observed for the prompt and how many were correct (the rollout
    history's window, plus this step's probe rows in two-stage allocation).
  p_hat: optional predicted success rates (V0's `p̂`), float [C].
  step: the RL step being allocated (XRPO's `T`, VADE's decay clock).
  """
  prompt_ids: np.ndarray
  attempts: np.ndarray
  successes: np.ndarray
  p_hat: Optional[np.ndarray] = None
  step: int = 0

  def __post_init__(self):
    for name in ("prompt_ids", "attempts", "successes"):
      object.__setattr__(self, name, np.asarray(getattr(self, name), np.int64).reshape(-1))
    c = len(self.prompt_ids)
    if len(self.attempts) != c or len(self.successes) != c:
      raise AllocationError(f"PromptStats: prompt_ids, attempts, successes must have one "
                            f"length; got {c}, {len(self.attempts)}, {len(self.successes)}")
    if (self.attempts < 0).any() or (self.successes < 0).any() or (
        self.successes > self.attempts).any():
      raise AllocationError("PromptStats: expected 0 <= successes <= attempts for every prompt")
    if self.p_hat is not None:
      p = np.asarray(self.p_hat, np.float64).reshape(-1)
      if len(p) != c or not np.all((p >= 0) & (p <= 1)):
        raise AllocationError(f"PromptStats.p_hat must be {c} values in [0, 1], got {p}")
      object.__setattr__(self, "p_hat", p)

  def __len__(self) -> int:
    return len(self.prompt_ids)

  def rate(self) -> np.ndarray:
    """Empirical success rate [C] (NaN where no rollout was observed)."""
    with np.errstate(invalid="ignore", divide="ignore"):
      return np.where(self.attempts > 0, self.successes / np.maximum(self.attempts, 1), np.nan)

  def subset(self, keep: np.ndarray) -> "PromptStats":
    return PromptStats(self.prompt_ids[keep], self.attempts[keep], self.successes[keep],
                       None if self.p_hat is None else self.p_hat[keep], self.step)


@dataclasses.dataclass(frozen=True)
class Budget:
  """total rows for the batch; B = num_prompts enter it, each with min_n <= n_b <= max_n."""
  total: int
  num_prompts: int
  min_n: int = 1
  max_n: int = 64

  def check(self, num_candidates: int) -> None:
    """Raises AllocationError when no allocation fits (the message names the numbers)."""
    b = self.num_prompts
    if not 1 <= b <= num_candidates:
      raise AllocationError(f"budget.num_prompts={b} must be in [1, {num_candidates}] "
                            f"(the number of candidate prompts)")
    if not 0 <= self.min_n <= self.max_n or self.max_n < 1:
      raise AllocationError(f"budget min_n={self.min_n}, max_n={self.max_n}: expected "
                            f"0 <= min_n <= max_n and max_n >= 1")
    if self.total < b * self.min_n:
      raise AllocationError(f"rollout budget {self.total} is smaller than {b} prompts x "
                            f"min_n={self.min_n} = {b * self.min_n}")
    if self.total > b * self.max_n:
      raise AllocationError(f"rollout budget {self.total} exceeds {b} prompts x "
                            f"max_n={self.max_n} = {b * self.max_n}")


@dataclasses.dataclass(frozen=True)
class Allocation:
  """counts int [C] (0 for prompts left out) and selected bool [C] (which prompts enter)."""
  counts: np.ndarray
  selected: np.ndarray


class Allocator:
  """Base class: stateless, keeps every candidate, `allocate` to be defined."""

  selects = False  # True: picks B of C candidates (data selection).
  # True: `allocate` reads `stats.p_hat`, the predictions of `config.rl.allocator_prior`; a
  # prior named for an allocator that does not is refused (rl_jax/rollout/checks.py).
  reads_prior = False
  # False: the counts follow from the budget alone (no history, no state, no probe round), so the
  # planner may run it without the history's statistics (`rollout.planner.allocate`).
  reads_history = True
  needs_prior = False  # True: cannot allocate without `config.rl.allocator_prior`.
  # True: every prompt gets the same row count (runs in dense groups, needs no ragged layout).
  equal_counts = False

  def init_state(self) -> dict:
    return {}

  def allocate(self, stats: PromptStats, budget: Budget, state: dict,
               rng: np.random.Generator) -> Allocation:
    raise NotImplementedError(f"{type(self).__name__} must define allocate (Allocator is the "
                              "base class)")

  def observe(self, state: dict, prompt_ids, attempts, successes, step: int) -> dict:
    del prompt_ids, attempts, successes, step
    return state


def make(name: str, **options) -> Allocator:
  """The allocator registered as `name` with `options`; unknown names / options raise."""
  cls = ALLOCATORS.get(name)
  fields = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(options) - fields)
  if unknown:
    raise AllocationError(f"allocator {name!r} has no options {unknown}; expected a subset of "
                          f"{sorted(fields)}")
  return cls(**options)


def run(allocator: Allocator, stats: PromptStats, budget: Budget, state: dict,
        rng: np.random.Generator) -> Allocation:
  """`allocator.allocate` with the budget checked before and the result checked after:
  Σ counts == budget.total, B prompts selected, min_n <= counts <= max_n on them, 0 elsewhere."""
  c = len(stats)
  if not allocator.selects and budget.num_prompts != c:
    raise AllocationError(f"{type(allocator).__name__} allocates over every candidate; got "
                          f"{c} candidates for {budget.num_prompts} prompts")
  budget.check(c)
  out = allocator.allocate(stats, budget, state, rng)
  n, sel = np.asarray(out.counts, np.int64), np.asarray(out.selected, bool)
  if (n.shape != (c,) or sel.shape != (c,) or int(sel.sum()) != budget.num_prompts
      or int(n.sum()) != budget.total or (n[~sel] != 0).any()
      or (n[sel] < budget.min_n).any() or (n[sel] > budget.max_n).any()):
    raise AssertionError(f"{type(allocator).__name__} broke the allocation contract: counts "
                         f"{n.tolist()}, selected {sel.tolist()}, budget {budget}")
  return Allocation(n, sel)


# ---------------------------------------------------------------------------------------------
# Shared helpers.


def spread(total: int, num: int) -> np.ndarray:
  """`total` split over `num` slots as evenly as possible (the first slots get the remainder)."""
  base, rem = divmod(int(total), int(num))
  return base + (np.arange(num) < rem).astype(np.int64)


def fit_to_budget(counts: np.ndarray, budget: Budget, order: Optional[np.ndarray] = None
                  ) -> np.ndarray:
  """Clips `counts` to [min_n, max_n] and moves rows until Σ = budget.total.

  Rows missing are added one at a time, in `order` (default: index order) cycling over the
  prompts below max_n; rows in excess are removed in reverse order from prompts above min_n.
  Deterministic; requires a feasible budget (`Budget.check`).
  """
  n = np.clip(np.asarray(counts, np.int64), budget.min_n, budget.max_n)
  order = np.arange(len(n)) if order is None else np.asarray(order)
  diff = budget.total - int(n.sum())
  while diff > 0:
    room = [i for i in order if n[i] < budget.max_n]
    for i in room[:diff]:
      n[i] += 1
    diff = budget.total - int(n.sum())
  while diff < 0:
    room = [i for i in order[::-1] if n[i] > budget.min_n]
    for i in room[:-diff]:
      n[i] -= 1
    diff = budget.total - int(n.sum())
  return n


def top_b(score: np.ndarray, b: int) -> np.ndarray:
  """bool mask of the b highest scores (ties: the lower index first)."""
  keep = np.zeros(len(score), bool)
  keep[np.argsort(-np.asarray(score, np.float64), kind="stable")[:b]] = True
  return keep


def uniform_counts(budget: Budget) -> np.ndarray:
  return spread(budget.total, budget.num_prompts)


@ALLOCATORS.register("uniform")
@dataclasses.dataclass(frozen=True)
class Uniform(Allocator):
  """Today's behaviour: every prompt gets `total // B` rows (the first `total % B` one more);
  with total = B·G exactly G each."""
  equal_counts = True
  reads_history = False

  def allocate(self, stats, budget, state, rng):
    del state, rng
    return Allocation(uniform_counts(budget), np.ones(len(stats), bool))
