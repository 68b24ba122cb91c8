"""Tree advantage estimators: leaf rewards on a recorded tree -> token advantages.

docs/algorithms.md §3.0, §3.2-§3.4. Every estimator is registered in `base.ADVANTAGES` as

    fn(rewards, valid, *, tree, mask, **options) -> (adv, weight)

- `rewards` [B, G] leaf rewards; `valid` [B, G] bool (the leaf exists). Invalid leaves count
  in no statistic (node values, counts, depth statistics, the TreePO whitening).
- `tree`: a `types.Tree` laid out per prompt: `parent`, `depth` [B, N], `leaf_node` [B, G, N]
  (leaf i of prompt b passes through node n; the root, node 0, included) and `node_of`
  [B, G, T] (node id of each completion token). `rl_inputs.advantages` reshapes the rollout's
  [R, ...] fields to this layout.
- `mask` [B, G, T] completion mask; `adv` [B, G, T] float32 is 0 off the mask and on invalid
  rows, wrapped in `lax.stop_gradient`; `weight` [B, G] float32 is the validity.

Node statistics are incidence sums (`cnt = Σ_i Inc`, `V = Σ_i Inc·r / max(cnt, 1)`; the root
is its own parent) gathered back to tokens by `A[node_of]`. Shapes are static and everything
is jittable, with options bound by `functools.partial`. `tree=None` is the trivial tree of a
flat group (root, then one leaf node per row); with `mask=None` as well, `adv` is per sequence,
[B, G] (for direct calls and comparisons with the flat-group estimators).
"""

from __future__ import annotations

from typing import Optional, Tuple

import jax
import jax.numpy as jnp
from jax import lax

from rl_jax.rl.advantages.base import (ADVANTAGES, AdvOut, Array, masked_whiten, prep,
                                       token_advantages, token_mask)
from rl_jax.types import Tree


# ----------------------------------------------------------------------------
# Shared helpers.


def flat_tree(batch: int, group: int, t_max: int) -> Tree:
  """The trivial tree of a plain group: root 0 with leaves 1..G as its children.

  Returns a `Tree` in the per-prompt layout (`leaf_node` [B, G, G+1],
  `node_of` [B, G, T] = i+1 for every token of row i).
  """
  n = group + 1
  parent = jnp.zeros((batch, n), jnp.int32)
  depth = jnp.broadcast_to(jnp.minimum(jnp.arange(n, dtype=jnp.int32), 1), (batch, n))
  inc = jnp.concatenate([jnp.ones((group, 1), bool), jnp.eye(group, dtype=bool)], axis=1)
  node_of = jnp.broadcast_to(
      jnp.arange(1, n, dtype=jnp.int32)[None, :, None], (batch, group, t_max))
  return Tree(parent=parent, depth=depth, leaf_node=jnp.broadcast_to(inc, (batch, group, n)),
              node_of=node_of)


def _resolve(rewards: Array, tree: Optional[Tree],
             mask: Optional[Array]) -> Tuple[Tree, Array, bool]:
  """(tree, mask [B,G,T], per_sequence): fills in the flat-group fallback."""
  b, g = jnp.shape(rewards)[:2]
  per_sequence = False
  if mask is None:
    if tree is not None:
      raise ValueError('tree advantages need the token mask [B, G, T] together with the tree')
    mask = jnp.ones((b, g, 1), bool)
    per_sequence = True
  if tree is None:
    tree = flat_tree(b, g, jnp.shape(mask)[-1])
  return tree, mask, per_sequence


def node_values(rewards: Array, valid: Array, leaf_node: Array) -> Tuple[Array, Array]:
  """Monte-Carlo node values from the leaves below each node (§3.0).

  Args:
    rewards: [B, G] leaf rewards (anything where invalid).
    valid: [B, G] bool.
    leaf_node: [B, G, N] bool incidence.

  Returns:
    V [B, N] = mean of the valid leaf rewards below n (0 where none) and
    cnt [B, N] = number of valid leaves below n (float32).
  """
  r, v = prep(rewards, valid)
  inc = jnp.asarray(leaf_node, jnp.float32) * v[..., None]
  cnt = jnp.sum(inc, axis=1)
  val = jnp.sum(inc * r[..., None], axis=1) / jnp.maximum(cnt, 1.0)
  return val, cnt


def parent_values(values: Array, parent: Array) -> Array:
  """`values[b, parent[b, n]]` [B, N]; the root (its own parent) gets its own value."""
  return jnp.take_along_axis(values, jnp.asarray(parent, jnp.int32), axis=1)


def node_to_tokens(node_adv: Array, node_of: Array, mask: Array) -> Array:
  """Token advantages `node_adv[b, node_of[b, i, t]]·mask` [B, G, T]."""
  b = jnp.arange(node_adv.shape[0])[:, None, None]
  return node_adv[b, jnp.asarray(node_of, jnp.int32)] * jnp.asarray(mask, jnp.float32)


def _finish(adv: Array, v: Array, per_sequence: bool) -> AdvOut:
  adv = lax.stop_gradient(adv.astype(jnp.float32))
  return (adv[..., 0] if per_sequence else adv), v


# ----------------------------------------------------------------------------
# §3.2 TreeRL.


@ADVANTAGES.register('treerl_paper')
def treerl_paper(rewards: Array, valid: Array, *, tree: Optional[Tree] = None,
                 mask: Optional[Array] = None) -> AdvOut:
  """TreeRL, paper form (§3.2): `R(s) = (GA(s) + LA(s)) / sqrt(|L(s)|)`.

  `GA(s) = V(s) − V(root)`, `LA(s) = V(s) − V(pa(s))`, `|L(s)|` the number of
  valid leaves below s; every token of segment s gets R(s).

  Args:
    rewards: [B, G] leaf rewards.
    valid: [B, G] bool.
    tree: per-prompt `Tree` (see the module docstring).
    mask: [B, G, T] completion mask.

  Returns:
    (adv [B, G, T], weight [B, G]).
  """
  tree, mask, per_seq = _resolve(rewards, tree, mask)
  _, v = prep(rewards, valid)
  val, cnt = node_values(rewards, valid, tree.leaf_node)
  ga = val - val[:, :1]
  la = val - parent_values(val, tree.parent)
  node = jnp.where(cnt > 0, (ga + la) / jnp.sqrt(jnp.maximum(cnt, 1.0)), 0.0)
  return _finish(node_to_tokens(node, tree.node_of, token_mask(mask, v)),
                 v, per_seq)


def _leave_one_out_centred(rewards: Array, valid: Array) -> Array:
  """`r̃_ℓ = r_ℓ − mean_{ℓ'≠ℓ} r_ℓ'` over the valid leaves of each prompt.

  A prompt with a single valid leaf keeps `r̃ = r` (as `rloo`).
  """
  r, v = prep(rewards, valid)
  n = jnp.sum(v, axis=1, keepdims=True)
  s = jnp.sum(r * v, axis=1, keepdims=True)
  loo = (s - r) / jnp.maximum(n - 1.0, 1.0)
  return jnp.where(n > 1, r - loo, r) * v


def _segment_token_counts(node_of: Array, mask: Array, num_nodes: int) -> Array:
  """Trained tokens of each node over all rows through it, [B, N] float32.

  A shared segment of length ℓ below k valid leaves counts k·ℓ tokens.
  """
  b = node_of.shape[0]
  offset = (jnp.arange(b, dtype=jnp.int32) * num_nodes)[:, None, None]
  ids = jnp.asarray(node_of, jnp.int32) + offset
  tot = jax.ops.segment_sum(jnp.asarray(mask, jnp.float32).reshape(-1), ids.reshape(-1),
                            num_segments=b * num_nodes)
  return tot.reshape(b, num_nodes)


@ADVANTAGES.register('treerl_code')
def treerl_code(rewards: Array, valid: Array, *, tree: Optional[Tree] = None,
                mask: Optional[Array] = None,
                overall_norm: Optional[str] = None) -> AdvOut:
  """TreeRL, reference-code form (§3.2; `use_state_value_reward`, sqrt weighting).

  1. Leaf rewards are leave-one-out centred over the valid leaves of the prompt:
     `r̃_ℓ = r_ℓ − mean_{ℓ'≠ℓ} r_ℓ'` (a single valid leaf keeps r̃ = r).
  2. `V(s) = mean_{ℓ∈L(s)} r̃_ℓ`; optionally the overall norm subtracts a
     weighted mean of V over the used nodes of the prompt (root included):
     'step' weights node s by k(s), 'token' by k(s)·len(s) (its trained tokens).
  3. `V'(s) = V(s)/sqrt(k(s))`, k(s) = number of valid (selected) leaves below s.
  4. Tokens of segment s get `V'(s) − V'(pa(s)) + V'(s)`.

  Args:
    rewards: [B, G] leaf rewards.
    valid: [B, G] bool: the selected leaves.
    tree: per-prompt `Tree`.
    mask: [B, G, T] completion mask.
    overall_norm: None (default, off), 'step' or 'token'.

  Returns:
    (adv [B, G, T], weight [B, G]).
  """
  if overall_norm not in (None, 'none', 'step', 'token'):
    raise ValueError(f"overall_norm must be None, 'step' or 'token', got {overall_norm!r}")
  tree, mask, per_seq = _resolve(rewards, tree, mask)
  _, v = prep(rewards, valid)
  m = token_mask(mask, v)
  val, cnt = node_values(_leave_one_out_centred(rewards, valid), valid, tree.leaf_node)
  used = cnt > 0
  if overall_norm in ('step', 'token'):
    w = cnt if overall_norm == 'step' else _segment_token_counts(
        tree.node_of, m, val.shape[1])
    w = jnp.where(used, w, 0.0)
    mean = jnp.sum(w * val, axis=1, keepdims=True) / jnp.maximum(
        jnp.sum(w, axis=1, keepdims=True), 1e-12)
    val = val - mean
  vw = jnp.where(used, val / jnp.sqrt(jnp.maximum(cnt, 1.0)), 0.0)
  node = jnp.where(used, 2.0 * vw - parent_values(vw, tree.parent), 0.0)
  return _finish(node_to_tokens(node, tree.node_of, m), v, per_seq)


# ----------------------------------------------------------------------------
# §3.3 TreePO.


@ADVANTAGES.register('treepo')
def treepo(rewards: Array, valid: Array, *, tree: Optional[Tree] = None,
           mask: Optional[Array] = None, combine: str = 'average',
           whiten: bool = True) -> AdvOut:
  """TreePO subgroup advantages (§3.3, `tree_reinforce_plus_plus_baseline`).

  For every node s on leaf ℓ's path (one per depth d), the subgroup S_d(ℓ) is
  the set of valid leaves below s and `a_d(ℓ) = r_ℓ − V(s)`, recorded only if
  |S_d| > 1 (the root, depth 0, always). Combined per leaf:
  'average': `A_ℓ = mean_d a_d(ℓ)`; 'group_size': weights `|S_d| / Σ_d |S_d|`.
  Then `A_ℓ` is broadcast to the tokens and whitened over all valid tokens
  (`masked_whiten`, token-weighted, as REINFORCE++-baseline).

  Args:
    rewards: [B, G] leaf rewards.
    valid: [B, G] bool.
    tree: per-prompt `Tree`.
    mask: [B, G, T] completion mask.
    combine: 'average' (default) or 'group_size'.
    whiten: False skips the final whitening (returns `A_ℓ·m`).

  Returns:
    (adv [B, G, T], weight [B, G]).
  """
  if combine not in ('average', 'group_size'):
    raise ValueError(f"combine must be 'average' or 'group_size', got {combine!r}")
  tree, mask, per_seq = _resolve(rewards, tree, mask)
  r, v = prep(rewards, valid)
  m = token_mask(mask, v)
  val, cnt = node_values(rewards, valid, tree.leaf_node)
  record = (jnp.asarray(tree.depth) == 0) | (cnt > 1)                     # [B, N]
  w = record.astype(jnp.float32)
  if combine == 'group_size':
    w = w * cnt
  inc = jnp.asarray(tree.leaf_node, jnp.float32) * w[:, None, :]       # [B, G, N]
  a_d = r[..., None] - val[:, None, :]
  leaf = jnp.sum(inc * a_d, axis=-1) / jnp.maximum(jnp.sum(inc, axis=-1), 1e-12)
  leaf = leaf * v
  tok = token_advantages(leaf, m)
  if whiten:
    tok = masked_whiten(tok, m) * m
  return _finish(tok, v, per_seq)


# ----------------------------------------------------------------------------
# §3.4 BranchGRPO.


def depthwise_zscore(node_reward: Array, node_valid: Array, depth: Array, *,
                     eps: float = 1e-8, min_std: float = 1e-6) -> Array:
  """`(R(s) − mean_d R)/(std_d R + eps)` over the valid nodes of each depth, per prompt.

  std is unbiased (ddof=1; a single node has std 0); 0 where `std_d < min_std`
  and on invalid nodes. Inputs [B, N]; returns [B, N] float32.
  """
  ok = jnp.asarray(node_valid, jnp.float32)
  same = (depth[:, :, None] == depth[:, None, :]).astype(jnp.float32) * ok[:, None, :]
  n = jnp.sum(same, axis=-1)
  mu = jnp.sum(same * node_reward[:, None, :], axis=-1) / jnp.maximum(n, 1.0)
  dev = node_reward[:, None, :] - mu[:, :, None]
  sd = jnp.sqrt(jnp.sum(same * jnp.square(dev), axis=-1) / jnp.maximum(n - 1.0, 1.0))
  z = jnp.where(sd < min_std, 0.0, (node_reward - mu) / (sd + eps))
  return z * ok


@ADVANTAGES.register('branchgrpo_depth')
def branchgrpo_depth(rewards: Array, valid: Array, *, tree: Optional[Tree] = None,
                     mask: Optional[Array] = None, adv_clip: float = 5.0) -> AdvOut:
  """BranchGRPO depth-wise advantages (§3.4).

  Node reward R(s) = mean of the valid descendant leaf rewards; at each depth,
  `A(s) = (R(s) − mean_d R)/(std_d R + 1e-8)` over the nodes of that depth that
  have a valid leaf below them, 0 where `std_d < 1e-6`. Tokens of segment s
  (the transition into s) get `clip(A(s), −adv_clip, adv_clip)`.

  Args:
    rewards: [B, G] leaf rewards.
    valid: [B, G] bool.
    tree: per-prompt `Tree`.
    mask: [B, G, T] completion mask.
    adv_clip: symmetric clip of the advantage (`adv_clip_max`, default 5).

  Returns:
    (adv [B, G, T], weight [B, G]).
  """
  tree, mask, per_seq = _resolve(rewards, tree, mask)
  _, v = prep(rewards, valid)
  val, cnt = node_values(rewards, valid, tree.leaf_node)
  node = depthwise_zscore(val, cnt > 0, jnp.asarray(tree.depth, jnp.int32))
  node = jnp.clip(node, -adv_clip, adv_clip)
  return _finish(node_to_tokens(node, tree.node_of, token_mask(mask, v)),
                 v, per_seq)
