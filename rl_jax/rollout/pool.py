"""The pool of a step's rows (docs/design.md §7) and the batch assembled from it.

In: every round's host `Rollout` with its shaped and raw rewards (`Pool.add`), rows joining
slots (a slot = one prompt's group: a fresh request's rows plus any extra rows asked later).
Out (`assemble`): the chosen slots in the config's layout: dense (B groups of G rows; one round
whose B slots are the batch in order is returned as drawn, tree and all) or ragged (R_max rows,
group id + valid; a tree rollout's tree packed with its rows by `assemble_tree`). Invariants:
padding rows are invalid, masked out and carry reward 0; the batch's shapes come from the
config only. Also here: the DAPO overlong shaping (docs/algorithms.md §2.2), the informative
test of a group and the allocation metrics of an assembled batch.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import jax
import numpy as np

from rl_jax.rl import losses
from rl_jax.rollout import requests as requests_lib
from rl_jax.types import Tree


@dataclasses.dataclass
class Pool:
  """The rows of a step's generation rounds so far.

  rollouts / shaped / raw: per round, the host `Rollout` and its shaped and raw rewards [R_k, K].
  slot_rows: per slot, indices into the rounds' rows concatenated (valid rows only).
  slot_prompt: per slot, the prompt id (-1 when the engine did not say).
  """

  rollouts: list = dataclasses.field(default_factory=list)
  shaped: list = dataclasses.field(default_factory=list)
  raw: list = dataclasses.field(default_factory=list)
  slot_rows: list = dataclasses.field(default_factory=list)
  slot_prompt: list = dataclasses.field(default_factory=list)
  _offset: int = 0

  def add(self, rollout, shaped, raw, slots: np.ndarray, prompt_ids: Optional[np.ndarray]):
    """Adds a round. Row r joins slot `slots[rollout.group[r]]` (-1 = a new slot); rows with
    valid=False join no slot. Returns the slot of each request of the round."""
    group, valid = np.asarray(rollout.group), np.asarray(rollout.valid)
    targets = []
    for b, s in enumerate(np.asarray(slots, np.int64)):
      if s < 0:
        s = len(self.slot_rows)
        self.slot_rows.append(np.zeros(0, np.int64))
        self.slot_prompt.append(-1 if prompt_ids is None else int(prompt_ids[b]))
      rows = np.flatnonzero((group == b) & valid) + self._offset
      self.slot_rows[s] = np.concatenate([self.slot_rows[s], rows])
      targets.append(s)
    self.rollouts.append(rollout)
    self.shaped.append(np.asarray(shaped, np.float32))
    self.raw.append(np.asarray(raw, np.float32))
    self._offset += len(group)
    return np.asarray(targets, np.int64)

  @property
  def num_slots(self) -> int:
    return len(self.slot_rows)

  def all_shaped(self) -> np.ndarray:
    return np.concatenate(self.shaped)

  def all_raw(self) -> np.ndarray:
    return np.concatenate(self.raw)

  def sizes(self) -> np.ndarray:
    return np.asarray([len(r) for r in self.slot_rows], np.int64)

  def informative(self, weights, multi_reward: bool) -> np.ndarray:
    """bool [slots]: the slot's estimator input is not constant over its rows (scalar estimators
    see `Σ_k w_k r_k`, multi-reward ones each component)."""
    r = self.all_shaped()
    w = np.ones(r.shape[1], np.float32) if not weights else np.asarray(weights, np.float32)
    cols = r if multi_reward else (r @ w)[:, None]
    out = np.zeros(self.num_slots, bool)
    for s, rows in enumerate(self.slot_rows):
      if len(rows):
        x = cols[rows].T[None]  # [1, K', n]
        out[s] = bool(np.asarray(losses.dapo_informative_groups(x, np.ones(x.shape, bool))).any())
    return out


def assemble(pool: Pool, config, choice=None):
  """(Rollout, shaped [R, K], raw [R, K]) of the chosen slots in the config's layout.

  choice: (slots [B], keep [B]) or None for the first B slots, all kept. Dense: every chosen
  slot must hold G rows; one round whose B slots are the batch in order is returned as drawn
  (tree rollouts keep their tree). Ragged: rows packed into R_max rows (`requests_lib.layout`); a
  tree rollout's tree is packed with them (`assemble_tree`: parent/depth per
  group, leaf_node/node_of per row).
  """
  rl = config.rl
  b, g = rl.prompts_per_step, rl.group_size
  if choice is None:
    choice = (np.arange(min(b, pool.num_slots)), np.ones(min(b, pool.num_slots), bool))
  slots, keep = (np.asarray(x) for x in choice)
  ragged = requests_lib.is_ragged(config)
  if (not ragged and len(pool.rollouts) == 1 and keep.all() and len(slots) == b
      and (slots == np.arange(b)).all()):
    return pool.rollouts[0], pool.shaped[0], pool.raw[0]
  sizes = pool.sizes()[slots]
  if not ragged and (sizes != g).any():
    raise ValueError(f"the dense layout needs {g} rows per group; slots {slots.tolist()} hold "
                     f"{sizes.tolist()} (set config.rl.max_group_size for ragged groups)")
  rows = requests_lib.batch_rows(config)
  group, valid = requests_lib.layout(sizes, rows)
  take = np.concatenate([pool.slot_rows[s] for s in slots] + [np.zeros(0, np.int64)])
  pad = rows - len(take)
  index = np.concatenate([take, np.zeros(pad, np.int64)]).astype(np.int64)
  trees = [r.tree for r in pool.rollouts]
  cat = jax.tree_util.tree_map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]),
                               *[r.replace(tree=None) for r in pool.rollouts])
  batch = jax.tree_util.tree_map(lambda x: x[index], cat)
  kept = valid & np.concatenate([np.repeat(keep, sizes), np.zeros(pad, bool)])
  batch = batch.replace(group=group, valid=np.asarray(batch.valid) & kept,
                        mask=np.asarray(batch.mask) & valid[:, None])
  zero = np.arange(rows) >= len(take)
  if any(t is not None for t in trees):  # Per-slot parent/depth, per-row leaves.
    batch = batch.replace(tree=assemble_tree(trees, slots, index, zero, b))
  shaped = np.where(zero[:, None], 0.0, pool.all_shaped()[index]).astype(np.float32)
  raw = np.where(zero[:, None], 0.0, pool.all_raw()[index]).astype(np.float32)
  return batch, shaped, raw


def assemble_tree(trees: Sequence, slots, index, pad, num_groups: int) -> Tree:
  """The batch's tree from the rounds' trees (`assemble`, ragged layout).

  Args:
    trees: per round, its `Tree` (parent/depth [B_k, N], one row per request = new slot, in slot
      order; leaf_node [R_k, N], node_of [R_k, T] per row).
    slots: the pool slots of the batch's groups [<= B].
    index: [R_max] row of the rounds' rows concatenated that fills each batch row.
    pad: [R_max] bool, padding rows (no row of any slot).
    num_groups: B.

  Returns:
    Tree with parent/depth [B, N] (group b = slot slots[b]; zeros past the chosen slots) and
    leaf_node [R_max, N], node_of [R_max, T] gathered by `index` (False / 0 on padding rows).
  """
  if any(t is None for t in trees):
    raise ValueError("a ragged tree batch mixes rounds with and without a tree (extension "
                     "rounds use the iid engine; config.rl.allocation.probe and an advantage "
                     "that draws extra rounds are not supported with tree rollouts)")
  widths = {np.asarray(t.parent).shape[1] for t in trees}
  if len(widths) != 1:
    raise ValueError(f"the rounds' trees have different node capacities {sorted(widths)}")
  cat = lambda name: np.concatenate([np.asarray(getattr(t, name)) for t in trees])
  parent, depth = cat("parent"), cat("depth")
  slots = np.asarray(slots, np.int64)
  if len(slots) > num_groups or (slots >= len(parent)).any():
    raise ValueError(f"slots {slots.tolist()} do not index the {len(parent)} tree slots "
                     f"(at most {num_groups} groups)")
  out_parent = np.zeros((num_groups, parent.shape[1]), np.int32)
  out_depth = np.zeros_like(out_parent)
  out_parent[:len(slots)], out_depth[:len(slots)] = parent[slots], depth[slots]
  pad = np.asarray(pad, bool)[:, None]
  leaf_node = cat("leaf_node")[index] & ~pad
  node_of = np.where(pad, 0, cat("node_of")[index]).astype(np.int32)
  return Tree(parent=out_parent, depth=out_depth, leaf_node=leaf_node, node_of=node_of)


def overlong_shaping(rewards: np.ndarray, lengths: np.ndarray, max_len: int, buffer: int,
                     factor: float = 1.0) -> np.ndarray:
  """rewards [R, K] with the DAPO soft overlong penalty of `lengths` [R] added to column 0."""
  out = np.array(rewards, np.float32, copy=True)
  if buffer > 0:
    out[:, 0] += np.asarray(losses.dapo_overlong_penalty(lengths, max_len, buffer, factor))
  return out


def informative_groups(rewards: np.ndarray, valid: np.ndarray, group_size: int,
                       weights, multi_reward: bool) -> np.ndarray:
  """bool [B]: the group's estimator input is not constant.

  Scalar estimators see `Σ_k w_k r_k`; multi-reward ones each component (a group is informative
  if any component varies).
  """
  r = np.asarray(rewards, np.float32)
  k = r.shape[1]
  w = np.ones(k, np.float32) if not weights else np.asarray(weights, np.float32)
  cols = r if multi_reward else (r @ w)[:, None]
  by_col = cols.reshape(-1, group_size, cols.shape[1]).transpose(0, 2, 1)  # [B, K', G]
  v = np.broadcast_to(np.asarray(valid).reshape(-1, 1, group_size), by_col.shape)
  return np.asarray(losses.dapo_informative_groups(by_col, v)).any(axis=-1)


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
