"""What a generation round asks for, the batch layout it lands in, and what a step reads
(docs/design.md §7).

`Requests`: prompt ids [B] and the rows wanted of each, counts n_b [B] (and, for extra rows of
prompts already drawn, their batch slots). Invariant of every engine: prompt b's rows are
contiguous, in request order; row r carries `group[r]` = its request index and `valid[r]`;
padding rows (valid=False, group = B, docs/algorithms.md §0 pattern 2) are never scored (reward
0) and their masks are cleared.

Layouts of the RL batch: dense (`rl.max_group_size = 0`): exactly G = `group_size` rows per
prompt, R = B·G, prompt b at rows b·G..b·G+G-1; ragged (`max_group_size = G_max > 0`): R_max =
`rl.rows` (0 = B·G) rows, n_b <= G_max per prompt. R_max and G_max come from the config, never
from the data.

`StepContext` (one RL step's input to `rollout.collect.rollout`, shared by the planner, the
engines and the round rules, so it sits here, below all of them): the run, the sampler's
parameters, the step, the prompt stream, the rollout history (default: the companion
'history'), the run companions' state by name and their round hooks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np


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

  @property
  def uniform(self) -> bool:
    """Every prompt asks for the same number of rows (a dense round's requests)."""
    return bool(len(self.counts)) and bool((self.counts == self.counts[0]).all())

  @property
  def row_prompts(self) -> np.ndarray:
    """int64 [Σ n_b]: the prompt id of every row, prompt b's rows contiguous."""
    return np.repeat(self.prompt_ids, self.counts)

  @classmethod
  def of_group_size(cls, prompt_ids, group_size: int) -> "Requests":
    return cls(prompt_ids, np.full(len(np.asarray(prompt_ids).reshape(-1)), group_size))


@dataclasses.dataclass
class StepContext:
  """What one RL step's collection reads.

  exp: the run (`experiment.Experiment`; `config` is `exp.config`); params: the sampler's
  parameters; step: the RL step; stream: the grain prompt stream or None; history: the rollout
  history (None: the companion 'history', if any); companions: the run companions' state by name
  (`train.companions.rollout_state`); on_round: the companions' round hooks
  `hook(ctx, round: engines.Round) -> host metrics`, called after every round is scored
  (`train.companions.round_hooks`; e.g. ARRoL's head trains on the survivors)."""

  exp: Any
  params: Any
  step: int = 0
  stream: Any = None
  history: Any = None
  companions: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  on_round: Sequence[Callable] = ()

  def __post_init__(self):
    if self.history is None:  # The run's history is the companion 'history'.
      self.history = self.companions.get("history")

  @property
  def config(self):
    return self.exp.config

  def companion(self, name: str, needed_by: str):
    """The companion state `name`; ValueError naming `needed_by` when the run has none."""
    if name not in self.companions:
      raise ValueError(f"{needed_by} needs the run companion {name!r}, which this step was not "
                       f"given (companions: {sorted(self.companions)})")
    return self.companions[name]


def is_ragged(config) -> bool:
  return config.rl.max_group_size > 0


def batch_rows(config) -> int:
  """R (dense: B·G) or R_max (ragged: `config.rl.rows`, 0 = B·G): the RL batch's rows."""
  rl = config.rl
  return (rl.rows or rl.prompts_per_step * rl.group_size) if is_ragged(config) else (
      rl.prompts_per_step * rl.group_size)


def max_group_size(config) -> int:
  """G_max: rows a prompt may hold in the batch (`rl.max_group_size`; dense: G)."""
  return config.rl.max_group_size or config.rl.group_size


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


def block_rows(counts, width: int) -> np.ndarray:
  """Rows b·width + [0, n_b) of every prompt b: the first n_b of each block of `width`."""
  counts = np.asarray(counts, np.int64)
  return np.concatenate([b * width + np.arange(n) for b, n in enumerate(counts)]
                        + [np.zeros(0, np.int64)])
