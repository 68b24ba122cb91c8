"""Tree rollouts with ragged groups (issue 17, item 2): an allocator's n_b rows per prompt from
the tree samplers, in static shapes.

With `config.rl.max_group_size` G_max > 0 (the ragged layout, `planner`) a round's requests ask
for n_b <= G_max rows of prompt b. The tree samplers keep their static per-prompt shape and
serve the counts as follows (`RAGGED_SAMPLERS`, by `config.rl.rollout`):

* 'eptree': the EPTree forest is fixed by its options (Lv = M·(1 + L·N·T) leaves per prompt,
  whatever n_b), and its leaves are chosen after scoring (`eptree.select_leaves`, one correct
  leaf kept when there is one), so the sampler grows Lv leaves and n_b of them are kept, exactly
  as the dense mode keeps G (requires G_max <= Lv). `rollout_tokens` counts the whole forest (an
  engine must decode it to choose); `tree_kept_tokens` the distinct tokens on the kept leaves'
  paths (what decoding only the kept subtree would cost).
* 'treepo': the tree of prompt b is grown with a budget of n_b leaves in its G_max slots
  (`treepo_rollout(budgets=n)`; slots past the budget stay unused), i.e. TreePO's own n_b-leaf
  tree; rows b·G_max … b·G_max + n_b − 1 are kept. `rollout_tokens` = the tokens decoded, each
  shared prefix once: what a variable-size engine decodes.
* 'latr': k_b = round(n_b·η(step)) rows from LATR trees with a per-root slot budget
  (`latr_generate(num_slots=round(G_max·η), budgets=k)`) and n_b − k_b independent rows (one
  grouped engine call when every prompt wants the same number, else one row-wise call in a
  power-of-two row count, `planner.engine_rows`). `rollout_tokens` = LATR's live-row tokens +
  the independent rows' tokens.

Invalid leaves never reach the estimators: a round's rollout holds the Σ n_b kept rows only; the
batch (`rounds.assemble`) packs them into R_max rows with padding rows valid=False, and
`assemble_tree` carries the tree with them: parent/depth [B, N] per batch group (slot), leaf_node
[R_max, N] / node_of [R_max, T] per row (False / 0 on padding rows). `rl_inputs` scatters the rows
to [B, G_max] + valid like the rewards; the tree estimators (`rl.advantages.tree`) then take node
values as means over valid leaves only, and a node with no valid leaf below it gets advantage 0.
With every n_b = G_max = G this is the dense tree batch exactly (a test).

Rollout modes not in `RAGGED_SAMPLERS` ('echo', 'arrol') raise a named error in
`planner.check_config`. The samplers run on the prompts with n_b > 0: all B of them unless
`allocation.min_n` = 0, when a step with fewer prompts compiles the sampler for that count.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np

from rl_jax import parallel
from rl_jax.registry import Registry
from rl_jax.sampling import engines, eptree, latr, treepo
from rl_jax.train import planner
from rl_jax.types import Rollout, Tree

RAGGED_SAMPLERS = Registry("ragged tree rollout")


def tree_round(exp, params, requests: planner.Requests, key, rng: np.random.Generator, step: int,
               score: Callable):
  """One fresh round of a tree rollout mode on ragged requests.

  Args:
    exp: the `rl_jax.experiment.Experiment`.
    params: sampler parameters.
    requests: prompt ids [B'] and rows n_b [B'] (all > 0).
    key, rng: the round's PRNG key and host generator (as the dense round's).
    step: the RL step (LATR's mix schedule).
    score: `score(tokens, mask, prompt_ids) -> (rewards [n, K], host counts)`.

  Returns:
    (Rollout of Σ n_b rows, prompt b's rows contiguous with group = b, all valid, `tree` with
    parent/depth [B', N] when the mode records one; rewards [Σ n_b, K]; host metrics).
  """
  ids, counts = requests.prompt_ids, requests.counts
  if (counts < 1).any():
    raise ValueError(f"tree_round: every request needs >= 1 row, got {counts.tolist()}")
  sampler = RAGGED_SAMPLERS.get(exp.config.rl.rollout)
  fields, rewards, extra = sampler(exp, params, ids, counts, key, rng, step, score)
  rows = np.repeat(ids, counts)
  batch = Rollout(prompt_tokens=exp.train_prompts[rows], prompt_mask=exp.train_prompt_mask[rows],
                  tokens=np.asarray(fields["tokens"]), mask=np.asarray(fields["mask"]),
                  logp=np.asarray(fields["logp"]),
                  group=np.repeat(np.arange(len(ids)), counts).astype(np.int32),
                  valid=np.ones(len(rows), bool), tree=fields.get("tree"))
  return batch, rewards, extra


def block_rows(counts, width: int) -> np.ndarray:
  """Rows b·width + [0, n_b) of every prompt b: the first n_b of each block of `width`."""
  counts = np.asarray(counts, np.int64)
  return np.concatenate([b * width + np.arange(n) for b, n in enumerate(counts)]
                        + [np.zeros(0, np.int64)])


def kept_tokens(tree: Tree, mask, group) -> int:
  """Distinct completion tokens on the paths of the rows of `tree` (per-row leaf_node/node_of,
  rows of prompt `group[r]`): each used node's segment once, its length read off a row through
  it. What decoding only those leaves' subtree costs."""
  node_of, mask, group = np.asarray(tree.node_of), np.asarray(mask, bool), np.asarray(group)
  n = np.asarray(tree.parent).shape[1]
  total = 0
  for b in np.unique(group):
    lens = np.zeros(n, np.int64)
    for r in np.flatnonzero(group == b):
      lens = np.maximum(lens, np.bincount(node_of[r][mask[r]], minlength=n)[:n])
    total += int(lens[1:].sum())
  return total


def assemble_tree(trees: Sequence, slots, index, pad, num_groups: int) -> Tree:
  """The batch's tree from the rounds' trees (`rounds.assemble`, ragged layout).

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
                     "rounds use the iid engine; config.rl.allocation.probe and "
                     "advantage='v05' are not supported with tree rollouts)")
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


# ---------------------------------------------------------------------------- the samplers
# sampler(exp, params, ids [B'], counts [B'], key, rng, step, score) ->
#   (fields {tokens, mask, logp [Σn, T], tree?}, rewards [Σn, K], host metrics).


def _sample_kwargs(exp) -> dict:
  return dict(cfg=exp.model_cfg, strategy=exp.rollout_strategy,
              max_new_tokens=exp.max_new_tokens, eos_id=exp.tokenizer.eos_id,
              pad_id=exp.tokenizer.pad_id)


@RAGGED_SAMPLERS.register("eptree")
def eptree_rows(exp, params, ids, counts, key, rng, step, score):
  """EPTree forests of Lv leaves per prompt; n_b of prompt b's leaves kept (`select_leaves`)."""
  del step
  from rl_jax.train import rollouts  # pylint: disable=import-outside-toplevel
  opts = eptree.EPTreeOptions.from_config(exp.config)
  out = parallel.to_host(eptree.eptree_rollout(
      params, exp.train_prompts[ids], exp.train_prompt_mask[ids], key, options=opts,
      **_sample_kwargs(exp)))
  all_rewards, host = score(out.tokens, out.mask, np.repeat(ids, opts.leaves))
  keep = eptree.select_leaves(all_rewards[:, 0], opts.leaves, counts, rng)
  tree = eptree.restrict(out.tree, keep)
  fields = dict(tokens=out.tokens[keep], mask=out.mask[keep], logp=out.logp[keep], tree=tree)
  return fields, all_rewards[keep], {
      "rollout_tokens": out.decode_tokens, "tree_leaves": opts.leaves,
      "tree_kept_tokens": kept_tokens(tree, fields["mask"], np.repeat(np.arange(len(ids)),
                                                                       counts)), **host}


@RAGGED_SAMPLERS.register("treepo")
def treepo_rows(exp, params, ids, counts, key, rng, step, score):
  """A TreePO tree with a budget of n_b leaves per prompt in G_max slots."""
  del rng, step
  from rl_jax.train import rollouts  # pylint: disable=import-outside-toplevel
  gm = planner.max_group_size(exp.config)
  out = treepo.treepo_rollout(params, exp.train_prompts[ids], exp.train_prompt_mask[ids], key,
                              options=treepo.TreePOOptions.from_config(exp.config), group=gm,
                              budgets=counts, **_sample_kwargs(exp))
  keep = block_rows(counts, gm)
  fields = dict(tokens=out.tokens[keep], mask=out.mask[keep], logp=out.logp[keep],
                tree=eptree.restrict(out.tree, keep))
  rewards, host = score(fields["tokens"], fields["mask"], np.repeat(ids, counts))
  return fields, rewards, {"rollout_tokens": out.decode_tokens,
                           "tree_filled_rows": int(out.filled[keep].sum()), **host}


def iid_rows(exp, params, ids, counts, key) -> dict:
  """counts[b] independent rows of prompt ids[b], in `np.repeat(ids, counts)` order: the grouped
  engine call when every count is equal (the dense round's call), else one row-wise call in a
  power-of-two row count (`planner.engine_rows`). Returns tokens/mask/logp [Σ counts, T]."""
  counts = np.asarray(counts, np.int64)
  n = int(counts.sum())
  generate = engines.from_config(exp.config)
  if (counts == counts[0]).all():
    sel, per, rows = ids, int(counts[0]), n
  else:
    rows = max(planner.engine_rows(n, planner.batch_rows(exp.config)), n)
    rep = np.repeat(ids, counts)
    sel, per = np.concatenate([rep, np.full(rows - n, rep[0], np.int64)]), 1
  out = parallel.to_host(generate(params, exp.train_prompts[sel], exp.train_prompt_mask[sel], key,
                                  num_samples=per, **_sample_kwargs(exp)))
  return {name: np.asarray(getattr(out, name))[:n] for name in ("tokens", "mask", "logp")}


@RAGGED_SAMPLERS.register("latr")
def latr_rows(exp, params, ids, counts, key, rng, step, score):
  """k_b = round(n_b·η) LATR tree rows (slot budget k_b of round(G_max·η)) + n_b − k_b
  independent rows per prompt (tree rows first, as the dense mode)."""
  del rng
  from rl_jax.train import rollouts  # pylint: disable=import-outside-toplevel
  rl = exp.config.rl
  eta = rollouts.mix_ratio(rl.latr.mix_schedule, step)
  slots = int(round(planner.max_group_size(exp.config) * eta))
  k = np.asarray([int(round(int(n) * eta)) for n in counts], np.int64)
  m = np.asarray(counts, np.int64) - k
  blocks, decoded = [], 0
  extra = {"tree_rows": float(k.mean())}
  if slots and k.any():
    tree = parallel.to_host(latr.latr_generate(
        params, exp.train_prompts[ids], exp.train_prompt_mask[ids], jax.random.fold_in(key, 1),
        options=latr.LatrOptions.from_config(exp.config), num_slots=slots,
        budgets=np.asarray(k, np.int32), **_sample_kwargs(exp)))
    keep = block_rows(k, slots)
    blocks.append({name: np.asarray(getattr(tree, name))[keep]
                   for name in ("tokens", "mask", "logp")})
    decoded += int(tree.decode_tokens)
    extra.update(tree_forks=int(tree.num_forks), tree_pruned=int(tree.num_pruned),
                 tree_steps=int(tree.tree_steps))
  else:
    k, m = np.zeros_like(k), np.asarray(counts, np.int64)
  if m.any():
    iid = iid_rows(exp, params, ids[m > 0], m[m > 0], key)
    blocks.append(iid)
    decoded += int(iid["mask"].sum())
  # Blocks: Σk tree rows then Σm independent rows, each in prompt order; per prompt its tree
  # rows come first, then its independent rows.
  tree_start = np.concatenate([[0], np.cumsum(k)[:-1]]).astype(np.int64)
  iid_start = int(k.sum()) + np.concatenate([[0], np.cumsum(m)[:-1]]).astype(np.int64)
  order = np.concatenate([np.concatenate([tree_start[b] + np.arange(k[b]),
                                          iid_start[b] + np.arange(m[b])])
                          for b in range(len(ids))]).astype(np.int64)
  fields = {name: np.concatenate([blk[name] for blk in blocks])[order]
            for name in ("tokens", "mask", "logp")}
  rewards, host = score(fields["tokens"], fields["mask"], np.repeat(ids, counts))
  extra.update(rollout_tokens=decoded, **host)
  return fields, rewards, extra
