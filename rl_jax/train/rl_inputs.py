"""What `steps.rl_step` computes from a rollout before the gradient: rewards -> advantages,
truncated importance weights, whole-batch loss normalizers, micro-batch splits, batch metrics.

All functions are pure and jittable (shapes static); `hyper` is a `hyper.RLHyper`.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional

import jax
import jax.numpy as jnp

from rl_jax.rl import advantages as advantages_lib
from rl_jax.rl import process_rewards
from rl_jax.types import Rollout, Tree

# Estimators that take the K reward components [B, G, K] (and `weights`) instead of one scalar.
# Estimators that take every reward component (their entries declare `multi_reward`).
MULTI_REWARD = tuple(n for n in advantages_lib.ADVANTAGES.names()
                     if advantages_lib.declares(n, "multi_reward"))


def as_components(rewards: jax.Array) -> jax.Array:
  """Rewards [R] or [R, K] -> float32 [R, K]."""
  r = jnp.asarray(rewards, jnp.float32)
  return r[:, None] if r.ndim == 1 else r


def reward_weights(hyper, num_components: int) -> jax.Array:
  """w [K]: `hyper.reward_weights`, or all ones when it is empty."""
  if not hyper.reward_weights:
    return jnp.ones((num_components,), jnp.float32)
  if len(hyper.reward_weights) != num_components:
    raise ValueError(f"reward_weights has {len(hyper.reward_weights)} entries but the rewards "
                     f"have {num_components} components")
  return jnp.asarray(hyper.reward_weights, jnp.float32)


def advantages(rewards: jax.Array, rollout: Rollout, hyper,
               token_kl: Optional[jax.Array] = None):
  """Runs the registered estimator on the rollout's groups.

  Scalar estimators see `r = Σ_k w_k r_k` as [B, G]; `MULTI_REWARD` estimators see the
  components [B, G, K] with `weights=w` (unless `advantage_options` sets them). Estimators that
  take `mask` (token-level ones), `lengths` (OPO) or `token_kl` get them from the rollout; tree
  estimators (a `tree` argument) get `rollout.tree` with its row fields reshaped per prompt
  (`leaf_node` [B, G, N], `node_of` [B, G, T]) and raise a ValueError for a rollout without one.

  KL in the reward (`hyper.kl_in_reward`, coefficient β = `hyper.kl_coef`, k1_t = logp_old_t −
  logp_ref_t given as `token_kl`): an estimator with a `token_kl` argument (REINFORCE++) uses the
  token reward `r_t − β·k1_t`; for every other estimator the sequence reward becomes
  `r − β·Σ_t k1_t`. It is not defined for the multi-reward estimators (ValueError).

  Returns:
    adv [R] or [R, T] (token-level estimators), weight [R], and the scalar reward [R] (before
    the KL term) for metrics.
  """
  if hyper.max_group_size:
    return _ragged_advantages(rewards, rollout, hyper, token_kl)
  fn = advantages_lib.get(hyper.advantage)
  accepts = inspect.signature(fn).parameters
  r_rk = as_components(rewards)
  n_rows, k = r_rk.shape
  g = hyper.group_size
  if n_rows % g:
    raise ValueError(f"{n_rows} rollout rows are not a whole number of groups of {g}")
  w = reward_weights(hyper, k)
  scalar = r_rk @ w
  grouped = lambda x, fill=0: x.reshape((-1, g) + x.shape[1:])
  r, opts = _estimator_inputs(r_rk, scalar, rollout, hyper, accepts, token_kl, grouped)
  if "tree" in accepts:
    opts["tree"] = _tree_per_prompt(rollout, hyper.advantage, g)
  valid = rollout.valid.reshape(-1, g)
  adv, weight = fn(r, valid, **opts)
  if getattr(hyper, "process_reward", "none") != "none":
    adv, weight = _process_advantages(adv, weight, scalar, rollout, hyper, grouped, valid)
  adv = adv.reshape((n_rows,) + adv.shape[2:])
  return adv, weight.reshape(-1), scalar


def group_slots(group: jax.Array, valid: jax.Array, num_groups: int) -> tuple[jax.Array, jax.Array]:
  """(seg [R], rank [R]) of ragged rows (docs/algorithms.md §0 pattern 2): seg = the row's group, or
  the dump segment B for invalid rows; rank = how many earlier rows share its segment."""
  seg = jnp.where(valid, group, num_groups).astype(jnp.int32)
  onehot = (seg[:, None] == jnp.arange(num_groups + 1)[None, :]).astype(jnp.int32)
  rank = jnp.take_along_axis(jnp.cumsum(onehot, axis=0) - 1, seg[:, None], axis=1)[:, 0]
  return seg, rank


def to_groups(x: jax.Array, seg: jax.Array, rank: jax.Array, num_groups: int,
              max_group_size: int, fill=0) -> jax.Array:
  """Rows [R, ...] -> [B, G_max, ...]: row r at (seg[r], rank[r]); invalid rows and rows past
  G_max are dropped, empty places hold `fill`."""
  out = jnp.full((num_groups, max_group_size) + x.shape[1:], fill, x.dtype)
  return out.at[seg, rank].set(x, mode="drop")


def from_groups(y: jax.Array, seg: jax.Array, rank: jax.Array) -> jax.Array:
  """[B, G_max, ...] -> rows [R, ...] (`to_groups`' inverse; dropped rows read 0)."""
  b, gm = y.shape[:2]
  inside = (seg < b) & (rank < gm)
  got = y[jnp.minimum(seg, b - 1), jnp.minimum(rank, gm - 1)]
  return jnp.where(inside.reshape(inside.shape + (1,) * (got.ndim - 1)), got, 0)


def _ragged_advantages(rewards, rollout: Rollout, hyper, token_kl):
  """`advantages` for a ragged batch (`hyper.max_group_size` G_max > 0, `hyper.num_groups` B):
  rows are scattered to [B, G_max] + valid by their `group` (the estimators take ragged groups
  through `valid`), and the advantages gathered back to rows. Rows past G_max get weight 0.
  Tree estimators get the tree with its row fields scattered the same way (`_ragged_tree`)."""
  fn = advantages_lib.get(hyper.advantage)
  accepts = inspect.signature(fn).parameters
  b, gm = hyper.num_groups, hyper.max_group_size
  r_rk = as_components(rewards)
  k = r_rk.shape[1]
  w = reward_weights(hyper, k)
  scalar = r_rk @ w
  seg, rank = group_slots(rollout.group, rollout.valid, b)
  grouped = lambda x, fill=0: to_groups(x, seg, rank, b, gm, fill)
  r, opts = _estimator_inputs(r_rk, scalar, rollout, hyper, accepts, token_kl, grouped)
  valid = grouped(jnp.ones_like(rollout.valid), False)
  if "tree" in accepts:
    opts["tree"] = _ragged_tree(rollout, hyper.advantage, b, grouped)
  adv, weight = fn(r, valid, **opts)
  if getattr(hyper, "process_reward", "none") != "none":
    adv, weight = _process_advantages(adv, weight, scalar, rollout, hyper, grouped, valid)
  return from_groups(adv, seg, rank), from_groups(weight, seg, rank), scalar


def _estimator_inputs(r_rk, scalar, rollout: Rollout, hyper, accepts, token_kl, grouped):
  """The estimator's reward [B, G(, K)] and keyword options, with `grouped(x, fill)` mapping
  rows [R, ...] to groups [B, G, ...] (a reshape for dense batches, a scatter for ragged ones).
  Tree estimators' `tree` is added by the caller (dense: reshaped; ragged: `_ragged_tree`)."""
  opts = dict(hyper.advantage_options)
  if hyper.advantage in MULTI_REWARD:
    if token_kl is not None:
      raise ValueError(f"kl_in_reward is not defined for the multi-reward estimator "
                       f"{hyper.advantage!r}; use the KL loss term (kl_in_reward=False)")
    if hyper.reward_weights:
      opts.setdefault("weights", tuple(hyper.reward_weights))
    r = grouped(r_rk)
  else:
    r = scalar
    if token_kl is not None and "token_kl" not in accepts:
      r = r - hyper.kl_coef * jnp.sum(token_kl, axis=-1)
    r = grouped(r)
  if "mask" in accepts:
    opts["mask"] = grouped(rollout.mask, False)
  if "lengths" in accepts:
    opts["lengths"] = grouped(jnp.sum(rollout.mask, -1))
  if "prior" in accepts:
    opts["prior"] = grouped(_prior(rollout, hyper.advantage))
  if token_kl is not None and "token_kl" in accepts:
    opts.update(token_kl=grouped(token_kl), kl_coef=hyper.kl_coef)
  return r, opts


def _prior(rollout: Rollout, name: str) -> jax.Array:
  if rollout.prior is None:
    raise ValueError(f"estimator {name!r} needs the per-row prior (p0, w) in rollout.prior "
                     "(set by the round rule its entry turns on); got a rollout without one")
  return jnp.asarray(rollout.prior, jnp.float32)

def _process_advantages(adv, weight, scalar, rollout: Rollout, hyper, grouped, valid):
  """The registered process estimator (`rl.process_rewards`) on the outcome advantage [B, G] and
  the rollout's step rewards -> token advantages [B, G, T] (rows keep the outcome's weight).
  `grouped` maps rows [R, ...] to groups [B, G, ...] (a reshape, or the ragged scatter with
  G = G_max), `valid` [B, G] the group slots that hold a row."""
  if rollout.step_rewards is None:
    raise ValueError(f"process_reward={hyper.process_reward!r} needs a rollout with "
                     "step_rewards and step_of (value.prm.process.ProcessScorer fills them)")
  if adv.ndim != 2:
    raise ValueError(f"process_reward={hyper.process_reward!r} adds to a per-row outcome "
                     f"advantage; estimator {hyper.advantage!r} gives token advantages")
  fn = process_rewards.PROCESS_ADVANTAGES.get(hyper.process_reward)
  tok_adv, w = fn(grouped(scalar), valid, outcome_adv=adv,
                  step_rewards=grouped(jnp.asarray(rollout.step_rewards)),
                  step_of=grouped(jnp.asarray(rollout.step_of)),
                  mask=grouped(jnp.asarray(rollout.mask), False), **dict(hyper.process_options))
  return tok_adv, weight * w


def _checked_tree(rollout: Rollout, name: str, num_groups: int) -> Tree:
  """`rollout.tree`, checked: parent/depth [num_groups, N], leaf_node [R, N], node_of [R, T]."""
  tree = rollout.tree
  if tree is None:
    raise ValueError(f"estimator {name!r} needs a tree rollout (config.rl.rollout='eptree', "
                     "'treepo', 'latr' or 'echo'); got a rollout without a tree")
  n_rows, t = rollout.mask.shape
  n = tree.parent.shape[-1]
  if (tree.parent.shape != (num_groups, n) or tree.depth.shape != tree.parent.shape
      or tree.leaf_node.shape != (n_rows, n) or tree.node_of.shape != (n_rows, t)):
    raise ValueError(f"rollout.tree shapes parent {tree.parent.shape}, depth "
                     f"{tree.depth.shape}, leaf_node {tree.leaf_node.shape}, node_of "
                     f"{tree.node_of.shape} do not match {num_groups} groups x {n_rows} rows x "
                     f"{t} tokens")
  return tree


def _tree_per_prompt(rollout: Rollout, name: str, g: int) -> Tree:
  """`rollout.tree` with `leaf_node` [R, N] -> [B, G, N] and `node_of` [R, T] -> [B, G, T]."""
  tree = _checked_tree(rollout, name, rollout.mask.shape[0] // g)
  n, t = tree.parent.shape[-1], rollout.mask.shape[1]
  return Tree(parent=tree.parent, depth=tree.depth, leaf_node=tree.leaf_node.reshape(-1, g, n),
              node_of=tree.node_of.reshape(-1, g, t))


def _ragged_tree(rollout: Rollout, name: str, num_groups: int, grouped) -> Tree:
  """`rollout.tree` of a ragged batch (`rollout.engines`): parent/depth [B, N] per group as
  they are; leaf_node [R, N] and node_of [R, T] scattered to [B, G_max, ...] like the rewards,
  so padding rows (and rows past G_max) are no leaf of any node."""
  tree = _checked_tree(rollout, name, num_groups)
  return Tree(parent=tree.parent, depth=tree.depth, leaf_node=grouped(tree.leaf_node, False),
              node_of=grouped(tree.node_of))


def tis_weights(trainer_logp: jax.Array, sampler_logp: jax.Array, mask: jax.Array,
                cap: float) -> jax.Array:
  """Truncated importance weights `w_t = min(exp(logp_trainer_t − logp_sampler_t), C)`.

  The sampler (inference engine) and the trainer compute slightly different probabilities for
  the same parameters. The PPO ratio is then taken against the trainer's own log-probs of the
  pre-update parameters, and each token's loss is multiplied by how much more likely the trainer
  finds the token than the sampler did, capped at C so rare tokens cannot blow up the gradient
  (a per-token weight, as in verl's `tis_imp_ratio_cap`). The log-ratio is clamped to [−20, 20];
  w is a constant (no gradient) and 0 off the mask.
  """
  delta = jnp.clip(trainer_logp - sampler_logp, -20.0, 20.0)
  w = jnp.minimum(jnp.exp(delta), cap)
  return jax.lax.stop_gradient(jnp.where(mask, w, 0.0))


def normalizers(loss_mask: jax.Array, good: jax.Array) -> dict:
  """Whole-batch counts for `losses.aggregate`, taken before splitting into micro-batches."""
  return {"num_tokens": jnp.sum(loss_mask), "num_seqs": jnp.sum(jnp.any(loss_mask, -1)),
          "num_good": jnp.sum(good)}


def split_rows(tree: Any, num: int, group: int = 1) -> Any:
  """Leaves [R, ...] -> [num, R/num, ...]; micro-batch j takes rows j, j+num, j+2·num, ...

  The strided split keeps each micro-batch spread over every data shard of the row axis. With
  `group` > 1, groups of `group` contiguous rows move together (micro-batch j takes groups j,
  j+num, ...), so a micro-batch holds whole groups.
  """
  def split(x):
    if x.shape[0] % (num * group):
      raise ValueError(f"{x.shape[0]} rows do not split into {num} micro-batches of whole groups "
                       f"of {group} rows (num_minibatches * group_size must divide "
                       f"prompts_per_step * group_size)")
    y = x.reshape((x.shape[0] // (num * group), num, group) + x.shape[1:])
    return jnp.swapaxes(y, 0, 1).reshape((num, -1) + x.shape[1:])

  return jax.tree_util.tree_map(split, tree)


def merge_rows(x: jax.Array, group: int = 1) -> jax.Array:
  """Inverse of `split_rows` for one array: [num, R/num, ...] -> [R, ...]."""
  num = x.shape[0]
  y = x.reshape((num, -1, group) + x.shape[2:])
  return jnp.swapaxes(y, 0, 1).reshape((-1,) + x.shape[2:])


def batch_metrics(scalar_r: jax.Array, rollout: Rollout, adv: jax.Array, weight: jax.Array,
                  loss_mask: jax.Array, group_size: int, num_groups: int = 0) -> dict:
  """Reward, advantage and length statistics of the batch (valid rows only).

  `num_groups` B > 0: a ragged batch (groups by `rollout.group`); else groups of `group_size`
  contiguous rows."""
  valid = rollout.valid.astype(jnp.float32)
  lm = loss_mask.astype(jnp.float32)
  if adv.ndim == 1:
    adv_abs = jnp.sum(jnp.abs(adv) * weight) / jnp.maximum(jnp.sum(weight), 1.0)
    row_signal = jnp.abs(adv) > 0
  else:
    adv_abs = jnp.sum(jnp.abs(adv) * lm) / jnp.maximum(jnp.sum(lm), 1.0)
    row_signal = jnp.any(jnp.abs(adv) > 0, axis=-1)
  m = rollout.mask.astype(jnp.float32)
  if num_groups:  # Ragged: padding rows count in neither the groups nor the lengths.
    seg, _ = group_slots(rollout.group, rollout.valid, num_groups)
    hit = jax.ops.segment_max(row_signal.astype(jnp.int32), seg, num_segments=num_groups + 1)
    informative = jnp.mean(hit[:num_groups] > 0)
    completion_len = jnp.sum(m * valid[:, None]) / jnp.maximum(jnp.sum(valid), 1.0)
  else:
    informative = jnp.mean(jnp.any(row_signal.reshape(-1, group_size), axis=-1))
    completion_len = jnp.sum(m) / m.shape[0]
  return {
      "reward_mean": jnp.sum(scalar_r * valid) / jnp.maximum(jnp.sum(valid), 1),
      "adv_abs_mean": adv_abs,
      "completion_len": completion_len,
      "informative_frac": informative,
  }
