"""The rollout history: per prompt and policy step, how many rollouts were drawn and how many succeeded.

V0 (`rl_jax.value`) learns a policy's success rate from it, across policy versions; the
allocators (`rl_jax.rl.allocation`) read per-prompt statistics from it. Every RL run keeps one;
it is checkpointed with the run (a resumed run has the same history) and exported as JSON lines
for offline training (`RolloutHistory.to_jsonl` / `from_jsonl`).

A record is `(prompt_id, step, attempts, successes)`: at policy step `step` (the RL step whose
parameters sampled the rollouts), `attempts` rollouts of prompt `prompt_id` (an index into the
task's train problems) were scored and `successes` of them were correct (reward above the
success threshold). Several records of one (prompt, step) pair are kept as they were recorded
(e.g. DAPO's or V0.5's extra rounds); `stats` sums them.

Example::

    h = RolloutHistory()
    h.record(step=3, prompt_ids=[5, 9], attempts=[8, 8], successes=[2, 8])
    attempts, successes = h.stats([5, 9, 11])          # [8, 8, 0], [2, 8, 0]
    h2 = RolloutHistory.from_state(h.state())          # the checkpointed form (JSON-ready)
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Optional, Sequence

import numpy as np

FIELDS = ("prompt_id", "step", "attempts", "successes")
_DTYPE = np.dtype([(f, np.int64) for f in FIELDS])


class HistoryError(ValueError):
  """A record or a saved history that does not fit the layout above."""


class RolloutHistory:
  """An append-only table of (prompt_id, step, attempts, successes) records."""

  def __init__(self, records: Optional[np.ndarray] = None):
    self._parts: list[np.ndarray] = []
    self._cache: Optional[np.ndarray] = None
    if records is not None and len(records):
      self._parts.append(np.asarray(records, _DTYPE))

  def __len__(self) -> int:
    return sum(len(p) for p in self._parts)

  def record(self, step: int, prompt_ids: Sequence[int], attempts: Sequence[int],
             successes: Sequence[int]) -> None:
    """Appends one record per prompt of a round; arrays of equal length, 0 <= successes <= attempts."""
    ids, att, suc = (np.asarray(x, np.int64).reshape(-1) for x in (prompt_ids, attempts, successes))
    if not len(ids) == len(att) == len(suc):
      raise HistoryError(f"prompt_ids, attempts and successes must have one length; got "
                         f"{len(ids)}, {len(att)}, {len(suc)}")
    if (ids < 0).any() or (att < 0).any() or (suc < 0).any() or (suc > att).any():
      bad = int(np.flatnonzero((ids < 0) | (att < 0) | (suc < 0) | (suc > att))[0])
      raise HistoryError(f"record {bad} (prompt_id={ids[bad]}, attempts={att[bad]}, "
                         f"successes={suc[bad]}) must have ids >= 0 and 0 <= successes <= attempts")
    if int(step) < 0:
      raise HistoryError(f"step must be >= 0, got {step}")
    rec = np.zeros(len(ids), _DTYPE)
    rec["prompt_id"], rec["step"], rec["attempts"], rec["successes"] = ids, int(step), att, suc
    self._parts.append(rec)
    self._cache = None

  def records(self) -> np.ndarray:
    """All records in the order recorded: a structured array with the fields of `FIELDS`."""
    if self._cache is None:
      self._cache = (np.concatenate(self._parts) if self._parts else np.zeros(0, _DTYPE))
      self._parts = [self._cache] if len(self._cache) else []
    return self._cache

  def stats(self, prompt_ids: Iterable[int], *, since_step: int = 0,
            before_step: Optional[int] = None,
            last_rollouts: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(attempts [B], successes [B]) summed over the records of each prompt with
    `since_step <= step < before_step` (all steps by default); 0, 0 for an unseen prompt.

    last_rollouts > 0: only each prompt's newest records (latest step first, later records of a
    step first) up to the one that brings its attempts to `last_rollouts` (Knapsack RL's reward
    buffer of the last 16 rollouts, docs/algorithms.md §6.1). A record enters whole: the rows of one
    step are not ordered, so the window may hold up to a record's attempts − 1 more."""
    if last_rollouts < 0:
      raise HistoryError(f"last_rollouts={last_rollouts}; expected >= 0 (0 = every record)")
    ids = np.asarray(list(prompt_ids) if not isinstance(prompt_ids, np.ndarray) else prompt_ids,
                     np.int64).reshape(-1)
    rec = self.records()
    keep = rec["step"] >= since_step
    if before_step is not None:
      keep &= rec["step"] < before_step
    rec = rec[keep]
    if last_rollouts and len(rec):
      order = np.arange(len(rec))
      newest = np.lexsort((-order, -rec["step"], rec["prompt_id"]))  # Per prompt, newest first.
      r = rec[newest]
      cum = np.cumsum(r["attempts"])
      first = np.r_[True, r["prompt_id"][1:] != r["prompt_id"][:-1]]
      start = np.maximum.accumulate(np.where(first, np.arange(len(r)), 0))
      before = cum - r["attempts"] - (cum[start] - r["attempts"][start])  # Attempts newer than it.
      rec = r[before < last_rollouts]
    att, suc = np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64)
    if len(rec) and len(ids):
      uniq, inv = np.unique(ids, return_inverse=True)
      pos = np.searchsorted(uniq, rec["prompt_id"])
      hit = (pos < len(uniq)) & (uniq[np.minimum(pos, len(uniq) - 1)] == rec["prompt_id"])
      a = np.bincount(pos[hit], rec["attempts"][hit], len(uniq)).astype(np.int64)
      s = np.bincount(pos[hit], rec["successes"][hit], len(uniq)).astype(np.int64)
      att, suc = a[inv], s[inv]
    return att, suc

  def last_step(self, prompt_ids: Iterable[int]) -> np.ndarray:
    """The latest step at which each prompt was sampled; -1 where it never was."""
    ids = np.asarray(list(prompt_ids), np.int64).reshape(-1)
    rec = self.records()
    out = np.full(len(ids), -1, np.int64)
    if len(rec):
      latest: dict[int, int] = {}
      for p, s in zip(rec["prompt_id"].tolist(), rec["step"].tolist()):
        if s > latest.get(p, -1):
          latest[p] = s
      out = np.asarray([latest.get(int(p), -1) for p in ids], np.int64)
    return out

  def truncate(self, before_step: int) -> "RolloutHistory":
    """A copy without the records of steps >= `before_step` (what a run resumed there had)."""
    rec = self.records()
    return RolloutHistory(rec[rec["step"] < before_step])

  # The checkpointed form: a JSON-ready dict of four int lists.
  def state(self) -> dict:
    rec = self.records()
    return {f: rec[f].tolist() for f in FIELDS}

  @classmethod
  def from_state(cls, state: dict) -> "RolloutHistory":
    missing = [f for f in FIELDS if f not in state]
    if missing:
      raise HistoryError(f"saved history lacks the fields {missing}; expected {list(FIELDS)}")
    lengths = {f: len(state[f]) for f in FIELDS}
    if len(set(lengths.values())) > 1:
      raise HistoryError(f"saved history fields differ in length: {lengths}")
    rec = np.zeros(lengths["step"], _DTYPE)
    for f in FIELDS:
      rec[f] = np.asarray(state[f], np.int64)
    if len(rec):  # Validate through record()'s checks.
      RolloutHistory().record(0, rec["prompt_id"], rec["attempts"], rec["successes"])
      if (rec["step"] < 0).any():
        raise HistoryError("saved history has a negative step")
    h = cls(rec)
    return h

  def to_jsonl(self, path: str | os.PathLike) -> None:
    """Writes one JSON object per record (atomically: a temporary file renamed into place)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
      for r in self.records().tolist():
        f.write(json.dumps(dict(zip(FIELDS, (int(v) for v in r)))) + "\n")
    os.replace(tmp, path)

  @classmethod
  def from_jsonl(cls, path: str | os.PathLike) -> "RolloutHistory":
    """Reads `to_jsonl`'s file; a line without the four integer fields raises naming the line."""
    rows = []
    with open(path) as f:
      for n, line in enumerate(f, 1):
        if not line.strip():
          continue
        try:
          obj = json.loads(line)
          rows.append(tuple(int(obj[k]) for k in FIELDS))
        except (ValueError, KeyError, TypeError) as e:
          raise HistoryError(f"{path}:{n}: expected a JSON object with integer fields "
                             f"{list(FIELDS)}: {e}") from None
    rec = np.array(rows, _DTYPE) if rows else np.zeros(0, _DTYPE)
    h = cls(rec)
    if len(rec):  # Validate through record()'s checks.
      RolloutHistory().record(0, rec["prompt_id"], rec["attempts"], rec["successes"])
    return h

  def __eq__(self, other) -> bool:
    return isinstance(other, RolloutHistory) and np.array_equal(self.records(), other.records())
