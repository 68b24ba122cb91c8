"""The planner (docs/design.md §7): which prompts a fresh round samples, and how many rows each.

In: a `StepContext`, the round index and its host generator. Out (`plan`): the round's
`Requests`: prompts drawn with the generator (from every train problem, or the `rl.prompt_pool`,
or the next batch of the grain stream), G rows each in the dense layout, the allocator's counts
(`config.rl.allocator`, registry `rl_jax.rl.allocation.ALLOCATORS`) in the ragged one.

Invariants: every random stream is a function of (seed, step, round) only and a stateful
allocator's state is replayed from the checkpointed history, so a resumed run plans exactly as
an uninterrupted one. `rl.allocation.probe = m` gives every prompt m rows first and lets the
allocator split the rest with their outcomes (round rule 'allocation_probe'); `rl.prompt_pool =
N` makes prompts repeat so history-based allocators see their past (docs/methods.md).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from rl_jax import experiment as experiment_lib
from rl_jax import seeds
from rl_jax.rl import allocation as alloc_lib
from rl_jax.rollout import requests as requests_lib
from rl_jax.value.history import RolloutHistory


@dataclasses.dataclass(frozen=True)
class Candidates:
  """What the allocator is asked about: the round's candidate prompts [C], the run's rollout
  history (read-only; None = empty), the predictions of `config.rl.allocator_prior` (named
  arrays [C], e.g. {'p_hat': ...}), and the RL step about to be sampled."""

  prompt_ids: np.ndarray
  history: object = None
  predictions: dict = dataclasses.field(default_factory=dict)
  step: int = 0


def allocator_from_config(config) -> alloc_lib.Allocator:
  """`config.rl.allocator` with its options `config.rl.allocation.<name>`."""
  name = config.rl.allocator
  opts = config.rl.allocation[name].to_dict() if name in config.rl.allocation else {}
  return alloc_lib.make(name, **opts)


def budget_from_config(config) -> alloc_lib.Budget:
  """B = prompts_per_step prompts, B x group_size rows (group_size = the mean rows per prompt),
  `allocation.min_n` <= n_b <= G_max (`requests.max_group_size`)."""
  rl = config.rl
  return alloc_lib.Budget(total=rl.prompts_per_step * rl.group_size,
                          num_prompts=rl.prompts_per_step, min_n=rl.allocation.min_n,
                          max_n=requests_lib.max_group_size(config))


def num_candidates(config, allocator: alloc_lib.Allocator) -> int:
  """Prompts drawn per step: prompts_per_step, or `allocation.candidates` (0 = 4 x that) for
  data-selection allocators."""
  b = config.rl.prompts_per_step
  if not allocator.selects:
    return b
  return config.rl.allocation.candidates or 4 * b


def candidate_count(config) -> int:
  """Prompts round 0 draws: prompts_per_step, or more for data-selection allocators."""
  return num_candidates(config, allocator_from_config(config))


def history_stats(history: RolloutHistory, prompt_ids, step: int, history_steps: int = 0,
                  history_rollouts: int = 0) -> alloc_lib.PromptStats:
  """Per-prompt statistics for step `step` (no p_hat): the history of steps
  [step − history_steps, step) (all earlier steps when 0), of those each prompt's newest records
  up to `history_rollouts` rollouts (0: all; `RolloutHistory.stats`' last_rollouts). A probe
  round enters as history recorded at the step (`StepAllocator.second`)."""
  since = max(step - history_steps, 0) if history_steps else 0
  att, suc = history.stats(prompt_ids, since_step=since, before_step=step,
                           last_rollouts=history_rollouts)
  return alloc_lib.PromptStats(np.asarray(prompt_ids), att, suc, None, step)


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

  `first(step, candidates, history, rng)` -> rows [C] of round 0; with `probe` > 0 these are
  `probe` rows for each of the first B candidates, and `second(step, ids, history, rng)` -> extra
  rows [B] (Σ = budget − B·probe) from the allocator run on the history including the probe round
  (recorded at `step`). The allocator's state (VADE's posteriors) is `replay`ed from the history.
  """

  def __init__(self, config):
    self.allocator = allocator_from_config(config)
    self.budget = budget_from_config(config)
    self.probe = config.rl.allocation.probe
    self.history_steps = config.rl.allocation.history_steps
    self.history_rollouts = config.rl.allocation.history_rollouts
    self.num_candidates = num_candidates(config, self.allocator)

  def _run(self, history, ids, step, upto, p_hat):
    history = RolloutHistory() if history is None else history
    stats = history_stats(history, ids, upto, self.history_steps,
                          history_rollouts=self.history_rollouts)
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


def round_key(exp, tag: int, step: int, round_idx: int):
  """The PRNG key of (tag, step[, round]); round 0 omits the round (the RL phase's own stream)."""
  key = jax.random.fold_in(jax.random.fold_in(exp.root_key(), tag), step)
  return key if round_idx == 0 else jax.random.fold_in(key, round_idx)


def candidates(ctx: requests_lib.StepContext, idx) -> Candidates:
  """The allocator's view of prompts `idx`: the history and the predictions of
  `config.rl.allocator_prior` (p_hat, sigma0_sq) when one is set."""
  ids = np.asarray(idx, np.int64)
  predictions = {}
  name = ctx.config.rl.allocator_prior
  if name:
    from rl_jax.value import priors  # pylint: disable=import-outside-toplevel
    p0, s2 = priors.make(name, ctx.exp, ctx.history, ctx.companions).predict(ctx.params, ids)
    predictions = {"p_hat": np.asarray(p0), "sigma0_sq": np.asarray(s2)}
  return Candidates(ids, ctx.history, predictions, ctx.step)


def allocate(config, cand: Candidates, round_idx: int = 0) -> np.ndarray:
  """Rows per candidate prompt [C] (0 = not in the batch) from `config.rl.allocator` with the
  budget B·G (the uniform batch's rows) and the options `config.rl.allocation.<name>`.

  An allocator that declares `reads_history = False` (uniform: G each) runs on the budget
  alone; any other runs through `StepAllocator.first` (history statistics, `p_hat` from the
  predictions, a two-stage probe when `allocation.probe` > 0). The counts are checked against
  the batch: n_b <= G_max and sum <= R_max.
  """
  rl = config.rl
  c = len(cand.prompt_ids)
  rng = alloc_rng(config, cand.step, round_idx)
  allocator = allocator_from_config(config)
  if not allocator.reads_history:
    none = np.zeros(c, np.int64)
    stats = alloc_lib.PromptStats(cand.prompt_ids, none, none, None, cand.step)
    counts = alloc_lib.run(allocator, stats, budget_from_config(config),
                           allocator.init_state(), rng).counts
  else:
    counts = StepAllocator(config).first(cand.step, cand.prompt_ids, cand.history, rng,
                                         cand.predictions.get("p_hat"))
  counts = np.asarray(counts, np.int64)
  g_max, r_max = requests_lib.max_group_size(config), requests_lib.batch_rows(config)
  if counts.shape != (c,) or (counts < 0).any() or (counts > g_max).any() or counts.sum() > r_max:
    raise ValueError(f"allocator {rl.allocator!r} returned counts {counts.tolist()}; expected "
                     f"{c} counts in [0, G_max={g_max}] summing to at most R_max={r_max}")
  return counts


def plan(ctx: requests_lib.StepContext, round_idx: int,
         rng: np.random.Generator) -> requests_lib.Requests:
  """A fresh round's requests: the prompts (grain stream, or drawn with `rng` from the train set
  or the prompt pool; data-selection allocators draw more candidates and keep B), G rows each
  in the dense layout, the allocator's counts (zero counts dropped) in the ragged one."""
  exp, config = ctx.exp, ctx.config
  idx = (ctx.stream.next_indices() if ctx.stream is not None else draw_prompts(
      config, len(exp.train_prompts), candidate_count(config), rng))
  if not requests_lib.is_ragged(config):
    return requests_lib.Requests.of_group_size(idx, config.rl.group_size)
  counts = allocate(config, candidates(ctx, idx), round_idx)
  return requests_lib.Requests(idx[counts > 0], counts[counts > 0])


def uniform_prompt_order(exp, num_steps: int) -> list[np.ndarray]:
  """The train indices that steps 0 .. num_steps-1 of a dense, uniform, in-memory RL phase draw
  (round 0's `plan`): what another system must be fed to train on the same prompts in the same
  order (benchmarks/learn_parity.py)."""
  config = exp.config
  if (allocator_from_config(config).reads_history or requests_lib.is_ragged(config)
      or exp.train_source):
    raise ValueError("uniform_prompt_order needs rl.allocator='uniform', dense groups and "
                     "data.source='memory'")
  return [draw_prompts(config, len(exp.train_prompts), config.rl.prompts_per_step,
                       exp.host_rng(seeds.RL, step)) for step in range(num_steps)]
