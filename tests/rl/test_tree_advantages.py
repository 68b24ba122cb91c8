"""Tree advantage estimators vs the worked numbers of docs/algorithms.md §3.2-§3.4.

The worked tree of §3.2/§3.3: root -> A, B; A -> a1, a2; B -> b1, b2, leaf rewards
(a1, a2, b1, b2) = (1, 0, 0, 0). Each row's tokens are its path's segments (A or B,
then its own leaf segment), of different lengths, then padding.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax.rl import advantages as adv_lib
from rl_jax.rl.advantages import group as adv_group
from rl_jax.rl.advantages import tree as tree_lib
from rl_jax.train import rl_inputs
from rl_jax.train import steps as steps_lib
from rl_jax.types import Rollout, Tree

ATOL = 1e-4
TREE_NAMES = ('treerl_paper', 'treerl_code', 'treepo', 'branchgrpo_depth')

# Worked tree. Nodes: 0 root, 1 A, 2 B, 3 a1, 4 a2, 5 b1, 6 b2, 7 unused (padding).
ROOT, A, B_, A1, A2, B1, B2 = range(7)
PARENT = [0, 0, 0, A, A, B_, B_, 0]
SEG_LEN = [0, 2, 1, 3, 1, 2, 4, 0]
LEAVES = [A1, A2, B1, B2]
T_MAX = 7
REWARDS = [1.0, 0.0, 0.0, 0.0]


def _path(parent, node):
  """Nodes from the root's child down to `node`."""
  out = []
  while node != 0:
    out.append(node)
    node = parent[node]
  return out[::-1]


def _depths(parent, used):
  return [len(_path(parent, n)) if used[n] else 0 for n in range(len(parent))]


def make_tree(parents, seg_lens, leaves, t_max):
  """Per-prompt lists -> (Tree in the [B, G, ...] layout, mask [B, G, T]) as numpy."""
  n = len(parents[0])
  b, g = len(leaves), len(leaves[0])
  par = np.zeros((b, n), np.int32)
  dep = np.zeros((b, n), np.int32)
  inc = np.zeros((b, g, n), bool)
  node_of = np.zeros((b, g, t_max), np.int32)
  mask = np.zeros((b, g, t_max), bool)
  for p in range(b):
    par[p] = parents[p]
    used = np.zeros(n, bool)
    used[0] = True
    for i, leaf in enumerate(leaves[p]):
      path = _path(parents[p], leaf)
      used[path] = True
      inc[p, i, 0] = True
      inc[p, i, path] = True
      toks = [s for s in path for _ in range(seg_lens[p][s])]
      assert len(toks) <= t_max
      node_of[p, i, :len(toks)] = toks
      mask[p, i, :len(toks)] = True
    dep[p] = _depths(parents[p], used)
  return Tree(parent=par, depth=dep, leaf_node=inc, node_of=node_of), mask


def worked_tree():
  return make_tree([PARENT], [SEG_LEN], [LEAVES], T_MAX)


def _call(name, rewards, valid, tree, mask, use_jit=True, **options):
  fn = functools.partial(adv_lib.get(name), **options)
  args = (jnp.asarray(rewards, jnp.float32), jnp.asarray(valid), tree, jnp.asarray(mask))

  def run(r, v, t, m):
    return fn(r, v, tree=t, mask=m)

  return (jax.jit(run) if use_jit else run)(*args)


def _node_tokens(node_of, mask, node_adv):
  """Reference token advantages from a per-(prompt, node) table (numpy)."""
  b = np.arange(node_adv.shape[0])[:, None, None]
  return np.where(mask, node_adv[b, node_of], 0.0)


def _check_segments(adv, tree, mask, want):
  """Every masked token of node n has advantage want[n]; every other token 0."""
  adv = np.asarray(adv)[0]
  for n, value in want.items():
    sel = (tree.node_of[0] == n) & mask[0]
    assert sel.any(), n
    np.testing.assert_allclose(adv[sel], value, atol=ATOL)
  np.testing.assert_array_equal(adv[~mask[0]], 0.0)


# ------------------------------------------------------------ §3.2 TreeRL


def test_treerl_paper_worked_numbers():
  tree, mask = worked_tree()
  adv, w = _call('treerl_paper', [REWARDS], np.ones((1, 4), bool), tree, mask)
  assert adv.shape == (1, 4, T_MAX) and adv.dtype == jnp.float32
  s = 1 / math.sqrt(2)
  _check_segments(adv, tree, mask, {A: 0.5 * s, B_: -0.5 * s, A1: 1.25, A2: -0.75,
                                    B1: -0.25, B2: -0.25})
  np.testing.assert_allclose(0.5 * s, 0.3536, atol=1e-4)
  np.testing.assert_array_equal(w, 1.0)


def test_node_values_worked_numbers():
  tree, _ = worked_tree()
  val, cnt = tree_lib.node_values(jnp.asarray([REWARDS]), jnp.ones((1, 4), bool),
                                  tree.leaf_node)
  np.testing.assert_allclose(val[0, :7], [0.25, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0], atol=1e-6)
  np.testing.assert_allclose(cnt[0], [4, 2, 2, 1, 1, 1, 1, 0])


def test_treerl_code_hand_case():
  # LOO-centred leaves: a1 = 1 − 0 = 1; others 0 − 1/3. V(root) = 0, V(A) = 1/3, V(B) = −1/3.
  # V' = V/sqrt(k): A 1/(3√2), B −1/(3√2), leaves unchanged (k = 1).
  # Token advantage 2V'(s) − V'(pa(s)).
  tree, mask = worked_tree()
  adv, _ = _call('treerl_code', [REWARDS], np.ones((1, 4), bool), tree, mask)
  va = 1 / (3 * math.sqrt(2))
  _check_segments(adv, tree, mask, {A: 2 * va, B_: -2 * va, A1: 2 - va,
                                    A2: -2 / 3 - va, B1: -2 / 3 + va, B2: -2 / 3 + va})
  np.testing.assert_allclose(2 - va, 1.7643, atol=1e-4)


def test_treerl_code_overall_norm_token_hand_case():
  # Token weights k(s)·len(s): A 4, B 2, a1 3, a2 1, b1 2, b2 4 (root has no tokens).
  # Weighted mean of V = (4/3 − 2/3 + 3 − 1/3 − 2/3 − 4/3)/16 = 1/12, subtracted from every
  # used node (root included) before the sqrt weighting.
  tree, mask = worked_tree()
  adv, _ = _call('treerl_code', [REWARDS], np.ones((1, 4), bool), tree, mask,
                 overall_norm='token')
  mu = 1 / 12
  vp = {ROOT: -mu / 2, A: (1 / 3 - mu) / math.sqrt(2), B_: (-1 / 3 - mu) / math.sqrt(2),
        A1: 1 - mu, A2: -1 / 3 - mu, B1: -1 / 3 - mu, B2: -1 / 3 - mu}
  want = {n: 2 * vp[n] - vp[PARENT[n]] for n in (A, B_, A1, A2, B1, B2)}
  _check_segments(adv, tree, mask, want)
  np.testing.assert_allclose(want[A], 0.3952, atol=1e-4)


def test_treerl_code_overall_norm_step_differs_from_none():
  # 'step' weights V(s) by k(s); on the worked tree Σ k(s)V(s) = 0 for LOO-centred leaves at
  # equal depth, so use unequal rewards on a lopsided tree: root -> A -> a1, a2; root -> b.
  tree, mask = make_tree([[0, 0, 1, 1, 0]], [[0, 1, 1, 1, 2]], [[2, 3, 4]], 4)
  r = [[1.0, 0.0, 0.5]]
  # LOO: a1 1 − 0.25 = 0.75; a2 0 − 0.75 = −0.75; b 0.5 − 0.5 = 0. V: root 0, A 0, a1 .75,
  # a2 −.75, b 0. 'step' mean = Σ k V / Σ k = (0 + 0 + .75 − .75 + 0)/(3 + 2 + 3) = 0: equal.
  a_none, _ = _call('treerl_code', r, np.ones((1, 3), bool), tree, mask)
  a_step, _ = _call('treerl_code', r, np.ones((1, 3), bool), tree, mask, overall_norm='step')
  np.testing.assert_allclose(a_step, a_none, atol=1e-6)
  r = [[1.0, 1.0, 0.0]]
  # LOO: a1 1 − 0.5 = .5, a2 .5, b 0 − 1 = −1. V: root 0, A .5, a1 .5, a2 .5, b −1.
  # step mean = (3·0 + 2·.5 + .5 + .5 − 1)/8 = 1/8.
  a_step, _ = _call('treerl_code', r, np.ones((1, 3), bool), tree, mask, overall_norm='step')
  mu = 1 / 8
  vp = {0: -mu / math.sqrt(3), 1: (0.5 - mu) / math.sqrt(2), 2: 0.5 - mu, 3: 0.5 - mu,
        4: -1 - mu}
  par = [0, 0, 1, 1, 0]
  _check_segments(a_step, tree, mask, {n: 2 * vp[n] - vp[par[n]] for n in (1, 2, 3, 4)})


def test_treerl_code_rejects_unknown_norm():
  tree, mask = worked_tree()
  with pytest.raises(ValueError, match='overall_norm'):
    _call('treerl_code', [REWARDS], np.ones((1, 4), bool), tree, mask, use_jit=False,
          overall_norm='tokens')


# ------------------------------------------------------------ §3.3 TreePO


def test_treepo_worked_numbers_before_whitening():
  tree, mask = worked_tree()
  adv, _ = _call('treepo', [REWARDS], np.ones((1, 4), bool), tree, mask, whiten=False)
  want = np.array([0.625, -0.375, -0.125, -0.125])
  np.testing.assert_allclose(np.asarray(adv)[0], np.where(mask[0], want[:, None], 0.0),
                             atol=1e-6)


def test_treepo_group_size_combine():
  # a1: depth 0 (|S|=4) 0.75, depth 1 (|S|=2) 0.5 -> (4·.75 + 2·.5)/6 = 2/3.
  tree, mask = worked_tree()
  adv, _ = _call('treepo', [REWARDS], np.ones((1, 4), bool), tree, mask, whiten=False,
                 combine='group_size')
  want = np.array([(3 + 1) / 6, (-1 - 1) / 6, -1 / 6, -1 / 6])
  np.testing.assert_allclose(np.asarray(adv)[0], np.where(mask[0], want[:, None], 0.0),
                             atol=1e-6)


def test_treepo_whitening_zero_mean_unit_variance():
  tree, mask = worked_tree()
  adv = np.asarray(_call('treepo', [REWARDS], np.ones((1, 4), bool), tree, mask)[0])
  tok = adv[mask]
  assert abs(tok.mean()) < 1e-5
  np.testing.assert_allclose(tok.std(ddof=1), 1.0, atol=1e-3)
  np.testing.assert_array_equal(adv[~mask], 0.0)
  # Token-weighted: rows contribute one value per token (lengths 5, 3, 3, 5).
  pre = np.repeat([0.625, -0.375, -0.125, -0.125], mask[0].sum(-1))
  np.testing.assert_allclose(np.sort(tok), np.sort((pre - pre.mean()) / pre.std(ddof=1)),
                             atol=1e-4)


# ------------------------------------------------------------ §3.4 BranchGRPO


def test_branchgrpo_worked_numbers():
  # Node rewards: depth 1 [0.5, 0] -> ±0.7071; leaves [1, 0, 0, 0] -> [1.5, −.5, −.5, −.5].
  tree, mask = worked_tree()
  adv, _ = _call('branchgrpo_depth', [REWARDS], np.ones((1, 4), bool), tree, mask)
  _check_segments(adv, tree, mask, {A: 0.7071, B_: -0.7071, A1: 1.5, A2: -0.5, B1: -0.5,
                                    B2: -0.5})


def test_branchgrpo_clip_and_zero_std():
  tree, mask = worked_tree()
  adv, _ = _call('branchgrpo_depth', [REWARDS], np.ones((1, 4), bool), tree, mask,
                 adv_clip=1.0)
  _check_segments(adv, tree, mask, {A: 0.7071, B_: -0.7071, A1: 1.0, A2: -0.5})
  adv, _ = _call('branchgrpo_depth', [[0.3, 0.3, 0.3, 0.3]], np.ones((1, 4), bool), tree,
                 mask)
  np.testing.assert_array_equal(adv, 0.0)


def test_depthwise_zscore_ignores_invalid_nodes_and_other_depths():
  reward = jnp.asarray([[9.0, 0.5, 0.0, 100.0, 1.0, 0.0, 0.0, 0.0]])
  ok = jnp.asarray([[True, True, True, False, True, True, True, True]])
  depth = jnp.asarray([[0, 1, 1, 1, 2, 2, 2, 2]])
  z = tree_lib.depthwise_zscore(reward, ok, depth)
  np.testing.assert_allclose(z[0], [0, 0.7071, -0.7071, 0, 1.5, -0.5, -0.5, -0.5], atol=1e-4)


# ------------------------------------------------- reference on random trees


def _random_prompt(rng, g, n_max, t_max):
  """Leaf i's path = distinct prefixes of (d_1..d_D, i): a random tree with g leaves."""
  depth = int(rng.integers(1, 4))
  codes = [tuple(rng.integers(0, 2, depth)) + (i,) for i in range(g)]
  ids = {(): 0}
  parents = [0]
  for code in codes:
    for k in range(1, len(code) + 1):
      if code[:k] not in ids:
        ids[code[:k]] = len(parents)
        parents.append(ids[code[:k - 1]])
  assert len(parents) <= n_max
  parents += [0] * (n_max - len(parents))
  leaves = [ids[c] for c in codes]
  seg = [0] + [int(rng.integers(0, 2)) for _ in range(n_max - 1)]
  for leaf in leaves:  # every leaf has at least one token of its own
    seg[leaf] = 1
  assert max(sum(seg[s] for s in _path(parents, leaf)) for leaf in leaves) <= t_max
  return parents, seg, leaves


def _reference(name, parents, leaves, r, valid, **opts):
  """Per-node advantages of one prompt by plain loops over the §3 definitions."""
  n = len(parents)
  below = [[i for i, leaf in enumerate(leaves) if valid[i]
            and (m == 0 or m in _path(parents, leaf))] for m in range(n)]
  k = np.array([len(x) for x in below], float)

  def mean_of(x, sel):
    return float(np.mean([x[i] for i in sel])) if sel else 0.0

  used = [i for i in range(n) if k[i] > 0]
  val = np.array([mean_of(r, below[m]) for m in range(n)])
  if name == 'treerl_paper':
    out = ((val - val[0]) + (val - val[parents])) / np.sqrt(np.maximum(k, 1))
    return np.where(k > 0, out, 0.0), None
  if name == 'treerl_code':
    nv = int(sum(valid))
    tot = sum(r[i] for i in range(len(r)) if valid[i])
    rt = [r[i] - (tot - r[i]) / (nv - 1) if nv > 1 else r[i] for i in range(len(r))]
    v = np.array([mean_of(rt, below[m]) for m in range(n)])
    if opts.get('overall_norm') == 'step':
      w = k
      v = v - sum(w[m] * v[m] for m in used) / sum(w[m] for m in used)
    vp = np.where(k > 0, v / np.sqrt(np.maximum(k, 1)), 0.0)
    return np.where(k > 0, 2 * vp - vp[parents], 0.0), None
  if name == 'branchgrpo_depth':
    dep = _depths(parents, [True] * n)
    out = np.zeros(n)
    for m in used:
      same = [x for x in used if dep[x] == dep[m]]
      sd = np.std([val[x] for x in same], ddof=1) if len(same) > 1 else 0.0
      mu = np.mean([val[x] for x in same])
      out[m] = 0.0 if sd < 1e-6 else (val[m] - mu) / (sd + 1e-8)
    return np.clip(out, -5, 5), None
  if name == 'treepo':
    leaf_adv = np.zeros(len(leaves))
    for i, leaf in enumerate(leaves):
      a = [r[i] - val[s] for s in [0] + _path(parents, leaf) if s == 0 or k[s] > 1]
      leaf_adv[i] = np.mean(a) if valid[i] else 0.0
    return None, leaf_adv
  raise AssertionError(name)


@pytest.mark.parametrize('name', TREE_NAMES)
def test_matches_loop_reference_on_random_trees(name):
  rng = np.random.default_rng(7)
  g, n_max, t_max, b = 5, 24, 10, 3
  prompts = [_random_prompt(rng, g, n_max, t_max) for _ in range(b)]
  tree, mask = make_tree([p[0] for p in prompts], [p[1] for p in prompts],
                         [p[2] for p in prompts], t_max)
  r = rng.random((b, g)).round(1)
  valid = rng.random((b, g)) > 0.25
  valid[:, :2] = True
  opts = {'whiten': False} if name == 'treepo' else {}
  adv, w = _call(name, np.where(valid, r, np.nan), valid, tree, mask, **opts)
  want = np.zeros((b, g, t_max))
  for p, (parents, _, leaves) in enumerate(prompts):
    node, leaf = _reference(name, parents, leaves, r[p], valid[p])
    if node is not None:
      want[p] = _node_tokens(tree.node_of[p:p + 1], mask[p:p + 1], node[None])[0]
    else:
      want[p] = np.where(mask[p], leaf[:, None], 0.0)
  want = want * valid[..., None]
  np.testing.assert_allclose(adv, want, atol=1e-5)
  np.testing.assert_array_equal(w, valid.astype(np.float32))
  assert np.abs(want).max() > 0.1


def test_treerl_code_step_norm_matches_reference():
  rng = np.random.default_rng(3)
  parents, seg, leaves = _random_prompt(rng, 6, 30, 12)
  tree, mask = make_tree([parents], [seg], [leaves], 12)
  r = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.5])
  valid = np.ones(6, bool)
  adv, _ = _call('treerl_code', r[None], valid[None], tree, mask, overall_norm='step')
  node, _ = _reference('treerl_code', parents, leaves, r, valid, overall_norm='step')
  np.testing.assert_allclose(adv, _node_tokens(tree.node_of, mask, node[None]), atol=1e-5)


# ------------------------------------------------------ generic properties


@pytest.mark.parametrize('name', TREE_NAMES)
def test_invalid_leaves_count_nowhere(name):
  # The worked tree plus a fifth leaf a3 under A that is invalid (reward NaN) == the worked
  # tree without it; a3's own node then has no valid leaf and its row is all zero.
  parents = PARENT[:7] + [A]
  seg = SEG_LEN[:7] + [2]
  tree5, mask5 = make_tree([parents], [seg], [LEAVES + [7]], T_MAX)
  tree4, mask4 = make_tree([parents], [seg], [LEAVES], T_MAX)
  valid = np.array([[True, True, True, True, False]])
  a5, w5 = _call(name, [REWARDS + [np.nan]], valid, tree5, mask5)
  a4, _ = _call(name, [REWARDS], np.ones((1, 4), bool), tree4, mask4)
  np.testing.assert_allclose(np.asarray(a5)[:, :4], a4, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(a5)[:, 4], 0.0)
  np.testing.assert_array_equal(w5, [[1, 1, 1, 1, 0]])
  assert np.abs(np.asarray(a4)).max() > 0.1


@pytest.mark.parametrize('name', TREE_NAMES)
def test_jit_matches_eager_and_stops_gradient(name):
  tree, mask = worked_tree()
  r = jnp.asarray([[0.9, 0.2, 0.4, 0.0]])
  valid = np.ones((1, 4), bool)
  eager, _ = _call(name, r, valid, tree, mask, use_jit=False)
  jitted, _ = _call(name, r, valid, tree, mask)
  np.testing.assert_allclose(eager, jitted, atol=1e-6)
  assert np.abs(np.asarray(eager)).max() > 0.1
  grad = jax.grad(lambda x: jnp.sum(adv_lib.get(name)(x, valid, tree=tree, mask=mask)[0]))(r)
  np.testing.assert_array_equal(grad, 0.0)


def test_registered_names():
  assert set(TREE_NAMES) <= set(adv_lib.ADVANTAGES.names())


def test_flat_fallback_matches_group_estimators():
  # Without a tree a group is root -> G leaves: TreePO reduces to REINFORCE++-baseline and
  # BranchGRPO to a GRPO z-score (ε 1e-8 instead of 1e-6).
  r = jnp.asarray([[1.0, 0.0, 0.5, 0.2], [0.3, 0.9, 0.1, 0.0]])
  valid = np.array([[True, True, True, False], [True, True, True, True]])
  mask = np.arange(5) < np.array([[2, 5, 3, 4], [1, 2, 3, 4]])[..., None]
  got, _ = tree_lib.treepo(r, valid, mask=mask)
  want, _ = adv_group.reinforce_pp_baseline(r, valid, mask=mask)
  np.testing.assert_allclose(got, want, atol=1e-5)
  got, _ = tree_lib.branchgrpo_depth(r, valid)
  want, _ = adv_group.grpo(r, valid)
  assert got.shape == (2, 4)
  np.testing.assert_allclose(got, want, atol=1e-4)
  # Paper form on a flat tree: GA = LA = r − mean, |L| = 1.
  got, _ = tree_lib.treerl_paper(r, valid)
  mu = np.array([0.5, 0.325])[:, None]
  np.testing.assert_allclose(got, 2 * (np.asarray(r) - mu) * valid, atol=1e-6)


def test_tree_without_mask_is_an_error():
  tree, _ = worked_tree()
  with pytest.raises(ValueError, match='mask'):
    tree_lib.treerl_paper(jnp.asarray([REWARDS]), np.ones((1, 4), bool), tree=tree)


# ------------------------------------------------------ rl_inputs plumbing


def _rollout(tree, mask, g, with_tree=True):
  b, _, t = mask.shape
  rows = b * g
  flat = Tree(parent=jnp.asarray(tree.parent), depth=jnp.asarray(tree.depth),
              leaf_node=jnp.asarray(tree.leaf_node.reshape(rows, -1)),
              node_of=jnp.asarray(tree.node_of.reshape(rows, t)))
  z = jnp.zeros((rows, 2), jnp.int32)
  return Rollout(prompt_tokens=z, prompt_mask=z > -1, tokens=jnp.ones((rows, t), jnp.int32),
                 mask=jnp.asarray(mask.reshape(rows, t)), logp=jnp.zeros((rows, t)),
                 group=jnp.repeat(jnp.arange(b), g), valid=jnp.ones((rows,), bool),
                 tree=flat if with_tree else None)


@pytest.mark.parametrize('name', ['treerl_paper', 'treepo'])
def test_rl_inputs_passes_the_tree(name):
  rng = np.random.default_rng(1)
  prompts = [_random_prompt(rng, 4, 20, 8) for _ in range(2)]
  tree, mask = make_tree([p[0] for p in prompts], [p[1] for p in prompts],
                         [p[2] for p in prompts], 8)
  rewards = rng.random(8).astype(np.float32)
  hyper = steps_lib.RLHyper(group_size=4, advantage=name)
  adv, weight, scalar = rl_inputs.advantages(jnp.asarray(rewards), _rollout(tree, mask, 4),
                                             hyper)
  want, _ = adv_lib.get(name)(jnp.asarray(rewards.reshape(2, 4)), np.ones((2, 4), bool),
                              tree=tree, mask=mask)
  assert adv.shape == (8, 8)
  np.testing.assert_allclose(adv, np.asarray(want).reshape(8, 8), atol=1e-6)
  np.testing.assert_allclose(scalar, rewards, atol=1e-6)
  np.testing.assert_array_equal(weight, 1.0)
  assert np.abs(np.asarray(adv)).max() > 0.1


def test_rl_inputs_without_tree_is_a_clear_error():
  tree, mask = worked_tree()
  hyper = steps_lib.RLHyper(group_size=4, advantage='branchgrpo_depth')
  with pytest.raises(ValueError, match=r"'branchgrpo_depth' needs a tree rollout .*"
                     r"config\.rl\.rollout='eptree'.*without a tree"):
    rl_inputs.advantages(jnp.asarray(REWARDS), _rollout(tree, mask, 4, with_tree=False), hyper)


def test_rl_inputs_tree_shape_mismatch_is_an_error():
  tree, mask = worked_tree()
  roll = _rollout(tree, mask, 4)
  roll = roll.replace(tree=roll.tree.replace(node_of=roll.tree.node_of[:, :3]))
  with pytest.raises(ValueError, match='do not match'):
    rl_inputs.advantages(jnp.asarray(REWARDS), roll,
                         steps_lib.RLHyper(group_size=4, advantage='treepo'))


def test_rl_inputs_flat_estimator_ignores_tree():
  tree, mask = worked_tree()
  hyper = steps_lib.RLHyper(group_size=4, advantage='grpo')
  adv, _, _ = rl_inputs.advantages(jnp.asarray(REWARDS), _rollout(tree, mask, 4), hyper)
  want, _ = adv_group.grpo(jnp.asarray([REWARDS]), np.ones((1, 4), bool))
  np.testing.assert_allclose(adv, np.asarray(want)[0], atol=1e-6)
