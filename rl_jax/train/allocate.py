"""Host glue between the RL phase and the allocators (rl_jax/rl/allocation): config -> allocator
and budget, history -> per-prompt statistics, and the allocation metrics of a step.

The proving-ground pitfall, and what is done about it: the RL phase draws fresh prompts from a
large train set, so a prompt's history is almost always empty and a history-only allocator has
nothing to act on. Two remedies, both options:

* `rl.allocation.probe = m` (two-stage, in-step; DARS's own design): every prompt first gets m
  rows; their outcomes join the prompt's history, and the allocator splits the rest of the budget
  with them. Nothing about the prompt distribution changes, so the uniform GRPO baselines stay
  the fair comparison (used for the measurement in experiments/README.md).
* `rl.prompt_pool = N`: the RL phase draws from the first N train problems only, so prompts
  repeat like epochs and history-based allocators (and VADE/InSight selection) see their past.
  It changes the training distribution, so uniform baselines must use the same pool.
"""

from __future__ import annotations

import numpy as np

from rl_jax.rl import allocation as alloc_lib
from rl_jax.value.history import RolloutHistory

# Rollout modes that take ragged groups (a tree rollout has a fixed number of leaves per prompt).
RAGGED_ROLLOUTS = ("iid",)


def allocator_from_config(config) -> alloc_lib.Allocator:
  """`config.rl.allocator` with its options `config.rl.allocation.<name>`."""
  name = config.rl.allocator
  opts = config.rl.allocation[name].to_dict() if name in config.rl.allocation else {}
  return alloc_lib.make(name, **opts)


def max_rows(config) -> int:
  """n_max, the most rows one prompt can get (`allocation.max_n`, 0 = group_size)."""
  return config.rl.allocation.max_n or config.rl.group_size


def budget_from_config(config) -> alloc_lib.Budget:
  rl, a = config.rl, config.rl.allocation
  total = a.rows_per_step or rl.prompts_per_step * rl.group_size
  return alloc_lib.Budget(total=total, num_prompts=rl.prompts_per_step, min_n=a.min_n,
                          max_n=max_rows(config))


def num_candidates(config, allocator: alloc_lib.Allocator) -> int:
  """Prompts drawn per step: prompts_per_step, or `allocation.candidates` (0 = 4 x that) for
  data-selection allocators."""
  b = config.rl.prompts_per_step
  if not allocator.selects:
    return b
  return config.rl.allocation.candidates or 4 * b


def check_config(config) -> None:
  """Raises ValueError naming the field for an allocation setting no run can use."""
  rl, a = config.rl, config.rl.allocation
  if rl.allocator not in alloc_lib.ALLOCATORS:
    raise ValueError(f"config.rl.allocator={rl.allocator!r}; expected one of "
                     f"{list(alloc_lib.ALLOCATORS.names())}")
  try:
    allocator = allocator_from_config(config)
  except (alloc_lib.AllocationError, TypeError) as e:
    raise ValueError(f"config.rl.allocation.{rl.allocator}: {e}") from e
  for field in ("rows_per_step", "min_n", "max_n", "probe", "history_steps", "candidates"):
    if not isinstance(a[field], int) or a[field] < 0:
      raise ValueError(f"config.rl.allocation.{field}={a[field]!r}; expected an integer >= 0")
  if rl.prompt_pool < 0:
    raise ValueError(f"config.rl.prompt_pool={rl.prompt_pool}; expected >= 0 (0 = every train "
                     "problem)")
  budget = budget_from_config(config)
  try:
    budget.check(num_candidates(config, allocator))
  except alloc_lib.AllocationError as e:
    raise ValueError(f"config.rl.allocation: {e}") from e
  if a.probe and a.probe != a.min_n:
    raise ValueError(f"config.rl.allocation.probe={a.probe} needs min_n == probe (every prompt "
                     f"keeps its probe rows); got min_n={a.min_n}")
  if a.probe and allocator.selects:
    raise ValueError(f"config.rl.allocation.probe={a.probe} is not supported with the "
                     f"data-selection allocator {rl.allocator!r} (it picks prompts before any "
                     "row is sampled); use probe=0")
  if rl.allocator != "uniform" and rl.rollout not in RAGGED_ROLLOUTS:
    raise ValueError(f"config.rl.allocator={rl.allocator!r} needs ragged groups, which "
                     f"rollout={rl.rollout!r} does not make; use rollout in {RAGGED_ROLLOUTS} or "
                     "allocator='uniform'")
  if rl.allocator == "v0":
    raise ValueError("config.rl.allocator='v0' needs V0's predictions p_hat, which no RL run "
                     "provides yet (the V0 issue); use it through rl_jax.rl.allocation")


def prompt_stats(history: RolloutHistory, prompt_ids, step: int, history_steps: int = 0,
                 probe_attempts=None, probe_successes=None, p_hat=None) -> alloc_lib.PromptStats:
  """Per-prompt statistics for step `step`: the history of steps [step − history_steps, step)
  (all earlier steps when 0), plus this step's probe rows when given."""
  since = max(step - history_steps, 0) if history_steps else 0
  att, suc = history.stats(prompt_ids, since_step=since, before_step=step)
  if probe_attempts is not None:
    att = att + np.asarray(probe_attempts, np.int64)
    suc = suc + np.asarray(probe_successes, np.int64)
  return alloc_lib.PromptStats(np.asarray(prompt_ids), att, suc, p_hat, step)


_BUCKETS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 1 << 30))


def allocation_metrics(counts, group_rewards: list[np.ndarray]) -> dict:
  """A step's allocation metrics.

  counts: rows per prompt in the batch [B]; group_rewards: each group's scalar rewards (its
  valid rows). Returns `alloc/n_min`, `alloc/n_max`, `alloc/groups_n{lo}_{hi}` (histogram),
  `alloc/zero_var_share` (share of rows in groups whose rewards are all equal: no GRPO
  gradient), `alloc/informative_groups` (groups with reward variance > 0) and
  `alloc/effective_groups` = (Σ_b v_b)² / Σ_b v_b², v_b = Σ_i (r_bi − r̄_b)² the group's
  squared-deviation mass (an effective number of groups carrying the signal).
  """
  n = np.asarray(counts, np.int64)
  out = {"alloc/n_min": float(n.min()), "alloc/n_max": float(n.max())}
  for lo, hi in _BUCKETS:
    key = f"alloc/groups_n{lo}" if lo == hi else (
        f"alloc/groups_n{lo}_{hi}" if hi < (1 << 30) else f"alloc/groups_n{lo}_up")
    out[key] = float(((n >= lo) & (n <= hi)).sum())
  dev = np.asarray([float(np.sum((r - r.mean()) ** 2)) if len(r) else 0.0
                    for r in (np.asarray(g, np.float64) for g in group_rewards)])
  rows = np.asarray([len(g) for g in group_rewards], np.float64)
  zero = dev <= 1e-12
  out["alloc/zero_var_share"] = float(rows[zero].sum() / max(rows.sum(), 1.0))
  out["alloc/informative_groups"] = float((~zero).sum())
  out["alloc/effective_groups"] = float(dev.sum() ** 2 / max(np.sum(dev ** 2), 1e-30)
                                        if dev.sum() > 0 else 0.0)
  return out


def replay(allocator: alloc_lib.Allocator, history: RolloutHistory, before_step: int) -> dict:
  """The allocator's state after observing every step < `before_step` of the history, in step
  order (each step's rows of a prompt summed over its rounds). A stateful allocator's state is
  thus a function of the checkpointed history: a resumed run has the same state."""
  state = allocator.init_state()
  if type(allocator).observe is alloc_lib.Allocator.observe:  # Stateless.
    return state
  rec = history.records()
  rec = rec[rec["step"] < before_step]
  for step in np.unique(rec["step"]):
    ids = np.unique(rec["prompt_id"][rec["step"] == step])
    att, suc = history.stats(ids, since_step=int(step), before_step=int(step) + 1)
    state = allocator.observe(state, ids, att, suc, int(step))
  return state


class StepAllocator:
  """Drives one allocator through an RL step: which prompts, how many rows, in one or two rounds.

  `first(step, candidates, history, rng)` -> (prompt ids [B], rows [B]) of round 0; with
  `probe` > 0 these are `probe` rows for each of the first B candidates, and
  `second(step, ids, history, rng)` -> extra rows [B] (Σ = budget − B·probe) from the allocator
  run on the history including the probe round (recorded at `step`). The allocator's state
  (VADE's posteriors) is `replay`ed from the history, so the checkpointed history is all a
  resumed run needs to allocate exactly as an uninterrupted one (with the same per-step rng).
  """

  def __init__(self, config):
    self.allocator = allocator_from_config(config)
    self.budget = budget_from_config(config)
    self.probe = config.rl.allocation.probe
    self.history_steps = config.rl.allocation.history_steps
    self.num_candidates = num_candidates(config, self.allocator)

  def _run(self, history, ids, step, upto):
    stats = prompt_stats(history, ids, upto, self.history_steps)
    stats = alloc_lib.PromptStats(stats.prompt_ids, stats.attempts, stats.successes, None, step)
    return stats, replay(self.allocator, history, step)

  def first(self, step: int, candidates, history: RolloutHistory,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    cand = np.asarray(candidates, np.int64)
    if len(cand) != self.num_candidates:
      raise ValueError(f"expected {self.num_candidates} candidate prompts, got {len(cand)}")
    b = self.budget.num_prompts
    if self.probe:
      return cand[:b], np.full(b, self.probe, np.int64)
    stats, state = self._run(history, cand, step, step)
    out = alloc_lib.run(self.allocator, stats, self.budget, state, rng)
    return cand[out.selected], out.counts[out.selected]

  def second(self, step: int, ids, history: RolloutHistory,
             rng: np.random.Generator) -> np.ndarray:
    """Extra rows [B] after the probe round (`probe` > 0 only); the history holds the probe's
    outcomes at `step`."""
    stats, state = self._run(history, ids, step, step + 1)
    out = alloc_lib.run(self.allocator, stats, self.budget, state, rng)
    return out.counts - self.probe
