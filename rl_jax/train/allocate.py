"""Host glue between the RL phase and the allocators (rl_jax/rl/allocation): config -> allocator
and budget, history -> per-prompt statistics, and the allocation metrics of a step.

The proving-ground pitfall, and what is done about it: the RL phase draws fresh prompts from a
large train set, so a prompt's history is almost always empty and a history-only allocator has
nothing to act on. Two remedies, both options:

* `rl.allocation.probe = m` (two-stage, in-step; DARS's own design): every prompt first gets m
  rows; their outcomes join the prompt's history, and the allocator splits the rest of the budget
  with them. Nothing about the prompt distribution changes, so the uniform GRPO baselines stay
  the fair comparison (used for the measurement in experiments/README.md).
* `rl.prompt_pool = N`: the RL phase draws from a fixed random N of the train problems, so prompts
  repeat like epochs and history-based allocators (and VADE/InSight selection) see their past.
  It changes the training distribution, so uniform baselines must use the same pool.
"""

from __future__ import annotations

import numpy as np

from rl_jax.rl import allocation as alloc_lib
from rl_jax import experiment as experiment_lib
from rl_jax import seeds
from rl_jax.train import planner, round_rules
from rl_jax.value.history import RolloutHistory

# Rollout modes that take ragged groups (`planner.RAGGED_ROLLOUTS`; the tree modes through
# `train.ragged_trees`).
RAGGED_ROLLOUTS = planner.RAGGED_ROLLOUTS


def allocator_from_config(config) -> alloc_lib.Allocator:
  """`config.rl.allocator` with its options `config.rl.allocation.<name>`."""
  name = config.rl.allocator
  opts = config.rl.allocation[name].to_dict() if name in config.rl.allocation else {}
  return alloc_lib.make(name, **opts)


def max_rows(config) -> int:
  """n_max, the most rows one prompt can get: `rl.max_group_size` (0 = group_size)."""
  return config.rl.max_group_size or config.rl.group_size


def budget_from_config(config) -> alloc_lib.Budget:
  """B = prompts_per_step prompts, B x group_size rows (group_size = the mean rows per prompt),
  `allocation.min_n` <= n_b <= `max_rows`."""
  rl = config.rl
  return alloc_lib.Budget(total=rl.prompts_per_step * rl.group_size,
                          num_prompts=rl.prompts_per_step, min_n=rl.allocation.min_n,
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
  for field in ("min_n", "probe", "history_steps", "candidates"):
    if not isinstance(a[field], int) or a[field] < 0:
      raise ValueError(f"config.rl.allocation.{field}={a[field]!r}; expected an integer >= 0")
  if not 0 <= rl.prompt_pool <= config.task.train_size:
    raise ValueError(f"config.rl.prompt_pool={rl.prompt_pool}; expected 0 (every train problem) "
                     f"to task.train_size={config.task.train_size}")
  if config.data.source != "memory" and (rl.prompt_pool or allocator.selects):
    raise ValueError(f"config.rl.prompt_pool and data-selection allocators draw their prompts "
                     f"from memory; config.data.source={config.data.source!r} is not supported "
                     "with them (use 'memory')")
  if rl.max_group_size and rl.max_group_size < rl.group_size:
    raise ValueError(f"config.rl.max_group_size={rl.max_group_size}: expected 0 (dense groups) "
                     f"or >= group_size={rl.group_size} (a budget of prompts_per_step x "
                     "group_size rows)")
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
  if rl.allocator == "uniform":
    return
  if rl.rollout not in RAGGED_ROLLOUTS:
    raise ValueError(f"config.rl.allocator={rl.allocator!r} needs ragged groups, which "
                     f"rollout={rl.rollout!r} does not make; use rollout in {RAGGED_ROLLOUTS} or "
                     "allocator='uniform'")
  if not rl.max_group_size:
    raise ValueError(f"config.rl.allocator={rl.allocator!r} gives prompts different row counts: "
                     "set config.rl.max_group_size (G_max) > 0 for the ragged layout")
  if rl.allocator == "v0" and not rl.allocator_prior:
    raise ValueError("config.rl.allocator='v0' needs predictions p_hat: set "
                     "config.rl.allocator_prior (e.g. 'history', or 'v0' once V0 is registered)")
  if a.probe and (rl.dynamic_sampling or rl.advantage == "v05"):
    raise ValueError("config.rl.allocation.probe is not supported together with "
                     "dynamic_sampling or advantage='v05' (each asks for its own extra rounds); "
                     "use probe=0")
  rows = rl.rows or rl.prompts_per_step * rl.group_size
  if rl.dynamic_sampling and rows < rl.prompts_per_step * max_rows(config):
    raise ValueError(f"config.rl.dynamic_sampling with allocator={rl.allocator!r} keeps B groups "
                     f"from several rounds, up to B x max_group_size = "
                     f"{rl.prompts_per_step * max_rows(config)} rows; config.rl.rows={rows} "
                     "is smaller")


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

  def _run(self, history, ids, step, upto, p_hat):
    history = RolloutHistory() if history is None else history
    stats = prompt_stats(history, ids, upto, self.history_steps)
    stats = alloc_lib.PromptStats(stats.prompt_ids, stats.attempts, stats.successes, p_hat, step)
    return stats, replay(self.allocator, history, step)

  def first(self, step: int, candidates, history: RolloutHistory | None,
            rng: np.random.Generator, p_hat=None) -> np.ndarray:
    """Rows of each candidate [C] in round 0 (0: not in the batch; B candidates get rows)."""
    cand = np.asarray(candidates, np.int64)
    if len(cand) != self.num_candidates:
      raise ValueError(f"expected {self.num_candidates} candidate prompts, got {len(cand)}")
    b = self.budget.num_prompts
    if self.probe:
      return np.where(np.arange(len(cand)) < b, self.probe, 0).astype(np.int64)
    stats, state = self._run(history, cand, step, step, p_hat)
    return alloc_lib.run(self.allocator, stats, self.budget, state, rng).counts

  def second(self, step: int, ids, history: RolloutHistory,
             rng: np.random.Generator, p_hat=None) -> np.ndarray:
    """Extra rows [B] after the probe round (`probe` > 0 only); the history holds the probe's
    outcomes at `step`."""
    stats, state = self._run(history, ids, step, step + 1, p_hat)
    out = alloc_lib.run(self.allocator, stats, self.budget, state, rng)
    return out.counts - self.probe


def alloc_rng(config, step: int, round_idx: int = 0) -> np.random.Generator:
  """The allocator's generator for (seed, step, round): stateless, so a resume reproduces it."""
  return np.random.default_rng([config.seed, seeds.RL_ALLOC, step, round_idx])


def prompt_pool(config, num_train: int) -> np.ndarray | None:
  """The train indices RL draws from with `rl.prompt_pool = N`: N problems drawn without
  replacement by a generator seeded with the task seed (so every training seed and every method
  of a sweep shares one pool), in ascending order; None for 0 (every train problem).

  A random subset, not the first N: task lists may be ordered (the ladder generates its train
  problems stratum by stratum, so its first 1,000 are all 2-term chains).
  """
  n = config.rl.prompt_pool
  if not n:
    return None
  rng = np.random.default_rng([experiment_lib.task_seed(config), seeds.ALLOC_POOL])
  return np.sort(rng.choice(num_train, n, replace=False))


def draw_prompts(config, num_train: int, count: int, rng: np.random.Generator) -> np.ndarray:
  """`count` distinct train indices drawn with `rng`: from every train problem, or from the
  `rl.prompt_pool` (`prompt_pool`). The RL round and APRIL's fresh groups both draw here."""
  pool = prompt_pool(config, num_train)
  if pool is None:
    return rng.choice(num_train, count, replace=False)
  return pool[rng.choice(len(pool), count, replace=False)]


def candidate_count(config) -> int:
  """Prompts round 0 draws: prompts_per_step, or more for data-selection allocators."""
  if config.rl.allocator == "uniform":
    return config.rl.prompts_per_step
  return num_candidates(config, allocator_from_config(config))


def round_counts(config, stats: planner.PromptStats, round_idx: int = 0) -> np.ndarray:
  """Rows [C] of the candidates `stats.prompt_ids` in a fresh round (0 = left out)."""
  sa = StepAllocator(config)
  return sa.first(stats.step, stats.prompt_ids, stats.history,
                  alloc_rng(config, stats.step, round_idx), stats.predictions.get("p_hat"))


@round_rules.ROUND_RULES.register("allocation_probe")
class AllocationProbe(round_rules.RoundRule):
  """Two-stage allocation (`rl.allocation.probe` > 0): after the probe round, asks once for the
  rest of the budget as extra rows of the probed prompts (the allocator sees the history with
  the probe's outcomes)."""

  def __init__(self, config, context):
    self.config = config
    self.step = context.get("step", 0)
    self.history = context.get("history")
    self.asked = False

  def after_round(self, pool, round_idx):
    if self.asked:
      return None
    self.asked = True
    if self.history is None:
      raise ValueError("allocation.probe needs the rollout history (collect(history=...))")
    ids = np.asarray(pool.slot_prompt, np.int64)
    extra = StepAllocator(self.config).second(self.step, ids, self.history,
                                              alloc_rng(self.config, self.step, 1000 + round_idx))
    keep = extra > 0
    if not keep.any():
      return None
    return planner.Requests(ids[keep], extra[keep], np.flatnonzero(keep))


def batch_metrics(batch, shaped: np.ndarray, config) -> dict:
  """`allocation_metrics` of an assembled batch: groups by `batch.group` over valid rows, the
  estimator's scalar input `Σ_k w_k r_k` (weights `rl.reward_weights`, () = all 1)."""
  rl = config.rl
  r = np.asarray(shaped, np.float64)
  w = np.ones(r.shape[1]) if not rl.reward_weights else np.asarray(rl.reward_weights, np.float64)
  scalar = r @ w
  group, valid = np.asarray(batch.group), np.asarray(batch.valid, bool)
  b = rl.prompts_per_step
  counts = np.bincount(group[valid], minlength=b)[:b]
  groups = [scalar[valid & (group == i)] for i in range(b)]
  return allocation_metrics(counts, groups)
