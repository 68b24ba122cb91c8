"""The planner and the iid engine of a rollout round (DESIGN.md §7): requests -> packed rows.

A round's work is a `Requests`: prompt ids [B] and the rows wanted of each, counts n_b [B]. The
engine serves it in one call whose row count is static: the sum(n_b) rows are packed into R rows
(prompt b's rows contiguous, in request order), row r carries `group[r]` = its request slot and
`valid[r]`; padding rows (valid=False, group = B, the dump segment of ALGORITHMS.md §0 pattern 2)
are decoded but never scored (reward 0) and their masks are cleared.

Layouts of the RL batch (`batch_layout`):

* dense (`config.rl.max_group_size = 0`, the default): every prompt has exactly G =
  `group_size` rows, R = B·G, rows of prompt b at b·G..b·G+G-1. Uniform requests use the grouped
  sampler call (`generate(num_samples=G)`), so the batches are the pre-planner batches exactly.
* ragged (`max_group_size = G_max > 0`): R_max = `config.rl.rows` (0 = B·G) rows, prompt b has
  n_b <= G_max of them; the advantage path scatters rows into [B, G_max] + valid
  (`rl_inputs.advantages`). R_max and G_max come from the config, never from the data.

Counts come from an allocator (`config.rl.allocator`, registry `rl_jax.rl.allocation.ALLOCATORS`
when that module exists; 'uniform' = G rows each is built in) given `PromptStats`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import numpy as np

from rl_jax import parallel
from rl_jax.sampling import engines


@dataclasses.dataclass(frozen=True)
class Requests:
  """One round's requests: `counts[b]` rows of prompt `prompt_ids[b]` (indices into
  `exp.task.train`). `slots[b]`: the batch slot the rows join (an earlier round's slot, for extra
  rows of a prompt already sampled), or -1 for a new slot."""

  prompt_ids: np.ndarray
  counts: np.ndarray
  slots: Optional[np.ndarray] = None

  def __post_init__(self):
    ids = np.asarray(self.prompt_ids, np.int64).reshape(-1)
    counts = np.asarray(self.counts, np.int64).reshape(-1)
    slots = (np.full(len(ids), -1, np.int64) if self.slots is None
             else np.asarray(self.slots, np.int64).reshape(-1))
    if not len(ids) == len(counts) == len(slots):
      raise ValueError(f"Requests: prompt_ids, counts and slots must have one length; got "
                       f"{len(ids)}, {len(counts)}, {len(slots)}")
    if (counts < 0).any():
      raise ValueError(f"Requests.counts must be >= 0, got {counts.tolist()}")
    object.__setattr__(self, "prompt_ids", ids)
    object.__setattr__(self, "counts", counts)
    object.__setattr__(self, "slots", slots)

  @property
  def total(self) -> int:
    return int(self.counts.sum())

  @classmethod
  def uniform(cls, prompt_ids, group_size: int) -> "Requests":
    return cls(prompt_ids, np.full(len(np.asarray(prompt_ids).reshape(-1)), group_size))


@dataclasses.dataclass(frozen=True)
class PromptStats:
  """What an allocator sees of the step's prompts.

  prompt_ids [B]; attempts / successes [B] summed over the rollout history (all earlier steps);
  predictions: optional named arrays [B] (e.g. {'p_hat': ..., 'sigma0_sq': ...} from a prior,
  `config.rl.allocator_prior`); history: the `value.history.RolloutHistory` itself (read-only:
  allocators that keep state derive it from the history, so a resumed run allocates exactly as
  an uninterrupted one); step: the RL step about to be sampled.
  """

  prompt_ids: np.ndarray
  attempts: np.ndarray
  successes: np.ndarray
  predictions: dict = dataclasses.field(default_factory=dict)
  history: object = None
  step: int = 0


# Rollout modes that serve ragged requests (`train.ragged_trees` for the tree modes); 'echo' and
# 'arrol' have a fixed number of rows per prompt in their sampler and raise a named error.
RAGGED_ROLLOUTS = ("iid", "latr", "eptree", "treepo")
# Ragged modes whose rollout records a tree (no extension rounds: those use the iid engine).
RAGGED_TREES = ("eptree", "treepo")


def is_ragged(config) -> bool:
  return config.rl.max_group_size > 0


def batch_rows(config) -> int:
  """R (dense: B·G) or R_max (ragged: `config.rl.rows`, 0 = B·G): the RL batch's rows."""
  rl = config.rl
  return (rl.rows or rl.prompts_per_step * rl.group_size) if is_ragged(config) else (
      rl.prompts_per_step * rl.group_size)


def max_group_size(config) -> int:
  """G_max: rows a prompt may hold in the batch (dense: G)."""
  return config.rl.max_group_size or config.rl.group_size


def check_config(config) -> None:
  """Raises ValueError for inconsistent planner settings (`config.rl.rows`, `max_group_size`,
  `allocator`, `success_threshold`)."""
  rl = config.rl
  if rl.max_group_size < 0 or rl.rows < 0:
    raise ValueError(f"config.rl.max_group_size and config.rl.rows must be >= 0 (0 = off / B·G); "
                     f"got {rl.max_group_size} and {rl.rows}")
  if not is_ragged(config):
    if rl.rows:
      raise ValueError(f"config.rl.rows={rl.rows} needs the ragged layout; expected "
                       "config.rl.rows=0 or config.rl.max_group_size > 0")
    if rl.allocator != "uniform":
      raise ValueError(f"config.rl.allocator={rl.allocator!r} gives prompts different row counts; "
                       "expected config.rl.max_group_size (G_max) > 0 (the ragged layout)")
    return
  if rl.rollout not in RAGGED_ROLLOUTS:
    raise ValueError(f"config.rl.rollout={rl.rollout!r} with the ragged layout "
                     f"(config.rl.max_group_size > 0) is not supported; expected rollout in "
                     f"{RAGGED_ROLLOUTS}")
  if rl.rollout in RAGGED_TREES and (rl.advantage == "v05" or (
      "allocation" in rl and rl.allocation.probe)):
    raise ValueError(f"config.rl.rollout={rl.rollout!r} with extension rounds (advantage='v05' "
                     "or config.rl.allocation.probe > 0) is not supported: extra rows of a "
                     "prompt come from the iid engine and have no place in its tree; use "
                     "rollout in ('iid', 'latr') or probe=0")
  if rl.max_group_size < rl.group_size:
    raise ValueError(f"config.rl.max_group_size={rl.max_group_size} is below "
                     f"config.rl.group_size={rl.group_size}; expected 0 or >= group_size")
  r = batch_rows(config)
  if r < rl.prompts_per_step:
    raise ValueError(f"config.rl.rows={r} is below prompts_per_step={rl.prompts_per_step}; "
                     "expected at least one row per prompt")
  if r % rl.num_minibatches:
    raise ValueError(f"config.rl.rows={r} is not a multiple of num_minibatches="
                     f"{rl.num_minibatches}; expected a multiple")


def layout(counts: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
  """(group int32 [rows], valid bool [rows]) of requests packed into `rows` rows.

  Prompt b's n_b rows are contiguous, in request order; padding rows get group = B and
  valid = False. Raises ValueError when sum(n_b) > rows.
  """
  counts = np.asarray(counts, np.int64)
  n = int(counts.sum())
  if n > rows:
    raise ValueError(f"the requests ask for {n} rows but the batch holds {rows} "
                     f"(config.rl.rows); counts={counts.tolist()}")
  group = np.full(rows, len(counts), np.int32)
  group[:n] = np.repeat(np.arange(len(counts)), counts)
  return group, np.arange(rows) < n


def engine_rows(n: int, cap: int) -> int:
  """Static row count of an engine call for n rows: the next power of two (>= 1), at most `cap`
  (so a run compiles the sampler for a few shapes only)."""
  return min(cap, 1 << max(0, int(n - 1).bit_length())) if n > 1 else 1


def sample_requests(exp, params, requests: Requests, key, *, rows: int, score):
  """The iid engine: `requests` -> rows packed into `rows` rows, scored.

  Args:
    exp: the `rl_jax.experiment.Experiment`.
    params: sampler parameters.
    requests: what to sample.
    key: the round's PRNG key.
    rows: static row count (>= requests.total).
    score: `score(tokens, mask, prompt_ids) -> (rewards [n, K], host counts)` for the valid rows.

  Returns:
    (fields dict of tokens/mask/logp [rows, T], group [rows], valid [rows], rewards [rows, K],
    host metrics with `rollout_tokens` = completion tokens of the valid rows). Uniform requests
    filling all rows use the engine with `num_samples=n` on the B prompts (today's grouped call);
    otherwise `num_samples=1` on the row-wise repeated prompts.
  """
  counts, ids = requests.counts, requests.prompt_ids
  group, valid = layout(counts, rows)
  n = requests.total
  row_ids = np.repeat(ids, counts)
  generate = engines.from_config(exp.config)  # config.sampling.engine: scan | stop | refill.
  if n == rows and len(counts) and (counts == counts[0]).all():
    out = parallel.to_host(generate(
        params, exp.train_prompts[ids], exp.train_prompt_mask[ids], key, cfg=exp.model_cfg,
        strategy=exp.rollout_strategy, max_new_tokens=exp.max_new_tokens,
        eos_id=exp.tokenizer.eos_id, pad_id=exp.tokenizer.pad_id, num_samples=int(counts[0])))
  else:
    padded = np.concatenate([row_ids, np.full(rows - n, row_ids[0] if n else 0, np.int64)])
    out = parallel.to_host(generate(
        params, exp.train_prompts[padded], exp.train_prompt_mask[padded], key, cfg=exp.model_cfg,
        strategy=exp.rollout_strategy, max_new_tokens=exp.max_new_tokens,
        eos_id=exp.tokenizer.eos_id, pad_id=exp.tokenizer.pad_id, num_samples=1))
  mask = np.asarray(out.mask) & valid[:, None]
  fields = dict(tokens=np.asarray(out.tokens), mask=mask, logp=np.asarray(out.logp))
  k = len(exp.config.rl.rewards)
  rewards = np.zeros((rows, k), np.float32)
  counts_metrics = {}
  if n:
    rewards[:n], counts_metrics = score(fields["tokens"][:n], mask[:n], row_ids)
  return fields, group, valid, rewards, {"rollout_tokens": int(mask.sum()), **counts_metrics}


def round_key(exp, tag: int, step: int, round_idx: int):
  """The PRNG key of (tag, step[, round]); round 0 omits the round (the RL phase's own stream)."""
  key = jax.random.fold_in(jax.random.fold_in(exp.root_key(), tag), step)
  return key if round_idx == 0 else jax.random.fold_in(key, round_idx)


def allocate(config, stats: PromptStats, round_idx: int = 0) -> np.ndarray:
  """Rows per candidate prompt [C] (0 = not in the batch) from `config.rl.allocator` with the
  budget B·G (the uniform batch's rows) and the options `config.rl.allocation.<name>`.

  'uniform' is G each; any other name goes through `rl_jax.train.allocate.round_counts`
  (history statistics, `p_hat` from `stats.predictions`, a two-stage probe when
  `allocation.probe` > 0). The counts are checked against the batch: n_b <= G_max and
  sum <= R_max.
  """
  rl = config.rl
  b = len(stats.prompt_ids)
  if rl.allocator == "uniform":
    return np.full(b, rl.group_size, np.int64)
  from rl_jax.train import allocate as allocate_lib  # pylint: disable=import-outside-toplevel
  counts = np.asarray(allocate_lib.round_counts(config, stats, round_idx), np.int64)
  g_max, r_max = max_group_size(config), batch_rows(config)
  if counts.shape != (b,) or (counts < 0).any() or (counts > g_max).any() or counts.sum() > r_max:
    raise ValueError(f"allocator {rl.allocator!r} returned counts {counts.tolist()}; expected "
                     f"{b} counts in [0, G_max={g_max}] summing to at most R_max={r_max}")
  return counts
