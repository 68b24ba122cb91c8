"""The collection loop of one RL step: planner -> engine -> round rules -> batch (DESIGN.md §7).

`collect(draw, config, ...)` runs generation rounds into a `round_rules.Pool`:

* round 0 is `draw(0)`: the planner's prompts for the step, sampled by the engine;
* after each round the active rules (`round_rules.active_rules`) may ask for a fresh round
  (`draw(k)`) or for extra rows of prompts already in the pool (`extend(k, requests)`), up to
  `config.rl.max_gen_rounds` rounds;
* the batch is assembled from the selected slots in the config's layout (`planner`): dense (B
  groups of G rows, today's batches exactly) or ragged (R_max rows, segment id + valid).

`draw(k)` and `extend(k, requests)` return `(rollout, raw rewards [R, K])`, optionally with host
metrics and the prompt ids of the round's requests: `(rollout, rewards, extra, prompt_ids)`.
`rollout.group` is the row's request index within the round; rows with valid=False are padding.

Every round's valid rows are recorded in `history` (when given): per slot, attempts and successes
(first raw reward component > `config.rl.success_threshold`), at policy step `step`.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import numpy as np

from rl_jax.rl import losses
from rl_jax.train import planner, ragged_trees, round_rules
from rl_jax.types import Rollout

# Host counts that `collect` sums over generation rounds (rl_jax.rewards.contained).
COUNTS = ("reward/errors", "reward/timeouts", "reward/calls")


def overlong_shaping(rewards: np.ndarray, lengths: np.ndarray, max_len: int, buffer: int,
                     factor: float = 1.0) -> np.ndarray:
  """rewards [R, K] with the DAPO soft overlong penalty of `lengths` [R] added to column 0."""
  out = np.array(rewards, np.float32, copy=True)
  if buffer > 0:
    out[:, 0] += np.asarray(losses.dapo_overlong_penalty(lengths, max_len, buffer, factor))
  return out


def _unpack(out):
  out = tuple(out)
  batch, r = out[0], out[1]
  extra = out[2] if len(out) > 2 else {}
  ids = out[3] if len(out) > 3 else None
  return batch, np.asarray(r, np.float32), dict(extra), ids


def collect(draw: Callable, config, *, extend: Optional[Callable] = None, history=None,
            step: int = 0, context: Optional[dict] = None):
  """Runs the rounds of one step; returns (rollout, shaped rewards [R, K], host metrics)."""
  rl = config.rl
  context = dict(context or {}, step=step, history=history)
  rules = round_rules.make_rules(config, context)
  pool = round_rules.Pool()
  counts = dict.fromkeys(COUNTS, 0)
  tokens, extra, saw_counts = 0, {}, False
  action = round_rules.FRESH
  k = 0
  while True:
    if action is round_rules.FRESH:
      batch, r, extra, ids = _unpack(draw(k))
      slots = np.full(_num_requests(batch) if ids is None else len(ids), -1)
    else:
      if extend is None:
        raise ValueError("a round rule asked for extra rows but collect() got no extend()")
      batch, r, extra, ids = _unpack(extend(k, action))
      ids, slots = action.prompt_ids, action.slots
    saw_counts |= any(name in extra for name in COUNTS)
    for name in COUNTS:  # Summed over the generation rounds.
      counts[name] += int(extra.get(name, 0))
    lengths = np.asarray(batch.mask).sum(-1)
    tokens += int(extra.get("rollout_tokens", lengths.sum()))
    shaped = overlong_shaping(r, lengths, config.sampling.max_new_tokens, rl.overlong_buffer,
                              rl.overlong_penalty_factor)
    targets = pool.add(batch, shaped, r, slots, ids)
    if history is not None and ids is not None:
      _record(history, step, pool, len(pool.rollouts) - 1, targets, rl.success_threshold)
    k += 1
    if k >= rl.max_gen_rounds:
      break
    action = None
    for rule in rules:
      action = rule.after_round(pool, k)
      if action is not None:
        break
    if action is None:
      break
  metrics = {n: v for n, v in extra.items() if n != "rollout_tokens"}
  metrics.update(gen_rounds=k, rollout_tokens=tokens, kept_groups=rl.prompts_per_step)
  if saw_counts:
    metrics.update(counts)
  choice = None
  for rule in rules:
    choice = rule.select(pool, rl.prompts_per_step)
    if choice is not None:
      break
  if choice is None:
    first = min(rl.prompts_per_step, pool.num_slots)
    choice = (np.arange(first), np.ones(first, bool))
  batch, shaped, raw = assemble(pool, config, choice)
  for rule in rules:
    batch = rule.finish(pool, batch, np.asarray(choice[0]))
    metrics.update(rule.metrics())
  valid = np.asarray(batch.valid)
  metrics["batch_tokens"] = int(np.asarray(batch.mask).sum())
  for name, col in zip(rl.rewards, raw.T):
    metrics[f"reward_{name}"] = float(col[valid].mean()) if valid.any() else 0.0
  return batch, shaped, metrics


def _num_requests(batch) -> int:
  """Requests of a round that did not name its prompts: 1 + the largest valid row's group."""
  group, valid = np.asarray(batch.group), np.asarray(batch.valid)
  return int(group[valid].max()) + 1 if valid.any() else 0


def _record(history, step, pool, round_idx, targets, threshold):
  """Appends the round's attempts and successes per slot to the history."""
  raw = pool.raw[round_idx]
  rollout = pool.rollouts[round_idx]
  group, valid = np.asarray(rollout.group), np.asarray(rollout.valid)
  ids, att, suc = [], [], []
  for b, s in enumerate(targets):
    rows = (group == b) & valid
    if rows.any():
      ids.append(pool.slot_prompt[s])
      att.append(int(rows.sum()))
      suc.append(int((raw[rows, 0] > threshold).sum()))
  if ids:
    history.record(step, ids, att, suc)


def assemble(pool: round_rules.Pool, config, choice=None):
  """(Rollout, shaped [R, K], raw [R, K]) of the chosen slots in the config's layout.

  choice: (slots [B], keep [B]) or None for the first B slots, all kept. Dense: every chosen
  slot must hold G rows; one round whose B slots are the batch in order is returned as drawn
  (tree rollouts keep their tree). Ragged: rows packed into R_max rows (`planner.layout`); a
  tree rollout's tree is packed with them (`ragged_trees.assemble_tree`: parent/depth per
  group, leaf_node/node_of per row).
  """
  rl = config.rl
  b, g = rl.prompts_per_step, rl.group_size
  if choice is None:
    choice = (np.arange(min(b, pool.num_slots)), np.ones(min(b, pool.num_slots), bool))
  slots, keep = (np.asarray(x) for x in choice)
  ragged = planner.is_ragged(config)
  if (not ragged and len(pool.rollouts) == 1 and keep.all() and len(slots) == b
      and (slots == np.arange(b)).all()):
    return pool.rollouts[0], pool.shaped[0], pool.raw[0]
  sizes = pool.sizes()[slots]
  if not ragged and (sizes != g).any():
    raise ValueError(f"the dense layout needs {g} rows per group; slots {slots.tolist()} hold "
                     f"{sizes.tolist()} (set config.rl.max_group_size for ragged groups)")
  rows = planner.batch_rows(config)
  group, valid = planner.layout(sizes, rows)
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
    batch = batch.replace(tree=ragged_trees.assemble_tree(trees, slots, index, zero, b))
  shaped = np.where(zero[:, None], 0.0, pool.all_shaped()[index]).astype(np.float32)
  raw = np.where(zero[:, None], 0.0, pool.all_raw()[index]).astype(np.float32)
  return batch, shaped, raw
