"""Support sets and training episodes for V0, built on the host from a `RolloutHistory`.

A *rate table* has one row per (prompt, policy step): attempts, successes, and the success rate
`successes / attempts` (records of one pair, e.g. extra rounds, are summed). V0 reads it two ways:

* `support_set(table, upto_step=t)`: the in-context set of the current policy: each prompt's
  newest row with `step <= t`, newest first, at most `size` prompts (ties: lower prompt id first).
* `sample_episodes`: training episodes. An episode picks a policy step s, takes up to Q of its
  rows as queries, and the support set at s without the query prompts, so V0 learns to read a
  policy's ability from the context across policy versions (§4.1).

Rows index into an `[U, ...]` array of per-prompt hidden states through `rows_of` (prompt id ->
row), so each prompt is encoded once per batch.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from rl_jax.value.history import RolloutHistory
from rl_jax.value.v0.loss import make_pairs


@dataclasses.dataclass(frozen=True)
class RateTable:
  prompt_id: np.ndarray  # [N] int64
  step: np.ndarray       # [N]
  attempts: np.ndarray   # [N]
  successes: np.ndarray  # [N]

  @property
  def rate(self) -> np.ndarray:
    return self.successes / np.maximum(self.attempts, 1)

  def __len__(self) -> int:
    return len(self.prompt_id)

  def take(self, keep) -> "RateTable":
    return RateTable(*(a[keep] for a in (self.prompt_id, self.step, self.attempts,
                                          self.successes)))


def rate_table(history: RolloutHistory, *, min_attempts: int = 1,
               since_step: int = 0, before_step: Optional[int] = None) -> RateTable:
  """One row per (prompt, step) with at least `min_attempts` attempts, sorted by (step, prompt)."""
  rec = history.records()
  keep = rec["step"] >= since_step
  if before_step is not None:
    keep &= rec["step"] < before_step
  rec = rec[keep]
  if not len(rec):
    z = np.zeros(0, np.int64)
    return RateTable(z, z, z, z)
  key = np.stack([rec["step"], rec["prompt_id"]], 1)
  uniq, inv = np.unique(key, axis=0, return_inverse=True)
  inv = inv.reshape(-1)
  att = np.bincount(inv, rec["attempts"], len(uniq)).astype(np.int64)
  suc = np.bincount(inv, rec["successes"], len(uniq)).astype(np.int64)
  t = RateTable(uniq[:, 1].astype(np.int64), uniq[:, 0].astype(np.int64), att, suc)
  return t.take(att >= max(min_attempts, 1))


def support_set(table: RateTable, *, upto_step: int, size: int,
                exclude=()) -> tuple[np.ndarray, np.ndarray]:
  """(prompt_ids [<= size], rates): each prompt's newest row with step <= upto_step, newest
  first, without the prompts in `exclude`."""
  keep = table.step <= upto_step
  if len(exclude):
    keep &= ~np.isin(table.prompt_id, np.asarray(exclude))
  t = table.take(keep)
  order = np.lexsort((t.prompt_id, -t.step))  # newest step first, then by prompt id
  ids, first = np.unique(t.prompt_id[order], return_index=True)
  pick = order[np.sort(first)][:size]  # each prompt's newest row, in newest-first order
  return t.prompt_id[pick], t.rate[pick]


@dataclasses.dataclass
class Episodes:
  """A padded batch of E episodes (prompt ids; `index` maps them to rows of the hidden states)."""

  support_ids: np.ndarray  # [E, S] (padding: -1)
  support_y: np.ndarray    # [E, S] float32
  support_mask: np.ndarray
  query_ids: np.ndarray    # [E, Q]
  query_y: np.ndarray
  query_mask: np.ndarray
  pos_idx: np.ndarray      # [E, P] query positions
  neg_idx: np.ndarray
  pair_mask: np.ndarray

  def prompt_ids(self) -> np.ndarray:
    ids = np.concatenate([self.support_ids[self.support_mask], self.query_ids[self.query_mask]])
    return np.unique(ids)

  def index(self, rows_of: dict) -> tuple[np.ndarray, np.ndarray]:
    """(support_idx [E, S], query_idx [E, Q]) rows of the hidden states (padding -> row 0)."""
    f = np.vectorize(lambda i: rows_of.get(int(i), 0), otypes=[np.int32])
    return f(self.support_ids), f(self.query_ids)


def one_episode(table: RateTable, step: int, query_ids, *, support_size: int,
                num_queries: int, rng=None) -> Episodes:
  """Queries = the rows of `step` for `query_ids` (at most `num_queries`), support = the support
  set at `step` without them. Query rates are the labels."""
  at = table.take(table.step == step)
  sel = np.isin(at.prompt_id, np.asarray(query_ids))
  at = at.take(sel)
  qn = min(len(at), num_queries)
  s_ids, s_y = support_set(table, upto_step=step, size=support_size, exclude=at.prompt_id[:qn])
  e = _empty(1, support_size, num_queries)
  e.support_ids[0, :len(s_ids)], e.support_y[0, :len(s_ids)] = s_ids, s_y
  e.support_mask[0, :len(s_ids)] = True
  e.query_ids[0, :qn], e.query_y[0, :qn] = at.prompt_id[:qn], at.rate[:qn]
  e.query_mask[0, :qn] = True
  e.pos_idx[0], e.neg_idx[0], e.pair_mask[0] = make_pairs(e.query_y[0], e.query_mask[0],
                                                          num_queries, rng)
  return e


def sample_episodes(table: RateTable, rng: np.random.Generator, *, steps, num_episodes: int,
                    support_size: int, num_queries: int) -> Episodes:
  """E episodes, each at a step drawn uniformly from `steps` with Q of its prompts (uniform,
  without replacement) as queries. Steps whose support set would be empty are skipped."""
  steps = [int(s) for s in steps if (table.step <= s).sum() > 1 and (table.step == s).any()]
  if not steps:
    raise ValueError("no policy step in the history has a row to query and another to support; "
                     "V0 needs at least two measured prompts")
  out = []
  for _ in range(num_episodes):
    s = int(rng.choice(steps))
    ids = table.prompt_id[table.step == s]
    n_q = min(num_queries, len(ids))
    if (table.step <= s).sum() - n_q < 1:  # keep one row for the support set
      n_q -= 1
    q = rng.choice(ids, n_q, replace=False)
    out.append(one_episode(table, s, q, support_size=support_size, num_queries=num_queries,
                           rng=rng))
  return concat(out)


def concat(episodes: list[Episodes]) -> Episodes:
  return Episodes(*(np.concatenate([getattr(e, f.name) for e in episodes])
                    for f in dataclasses.fields(Episodes)))


def _empty(e: int, s: int, q: int) -> Episodes:
  return Episodes(
      support_ids=np.full((e, s), -1, np.int64), support_y=np.zeros((e, s), np.float32),
      support_mask=np.zeros((e, s), bool), query_ids=np.full((e, q), -1, np.int64),
      query_y=np.zeros((e, q), np.float32), query_mask=np.zeros((e, q), bool),
      pos_idx=np.zeros((e, q), np.int32), neg_idx=np.zeros((e, q), np.int32),
      pair_mask=np.zeros((e, q), bool))
