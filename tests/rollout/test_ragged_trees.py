"""Tree rollouts with ragged groups (rl_jax/rollout/engines.py): equal to the dense tree path
when every n_b = G_max = G, invalid leaves out of every statistic (docs/algorithms.md §3.2's worked
tree), the RL phase with EPTree and Knapsack, and the named errors of what is not supported."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax
import pytest

from rl_jax import experiment
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.rollout import checks, collect, engines, pool
from rl_jax.rollout import requests as requests_lib
from rl_jax.rollout.requests import StepContext
from rl_jax.train import config_check, phases, rl_inputs
from rl_jax.train import hyper as hyper_lib
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState
from rl_jax.types import Rollout, Tree

pytestmark = pytest.mark.usefixtures("fast_compiles")  # Tests compare programs on tiny shapes.

MODES = {"eptree": "treerl_code", "treepo": "treepo", "latr": "grpo"}


def _tree_options(config):
  config.rl.eptree.update(num_chains=2, forks_per_round=1, branches=2)  # 6 leaves per prompt.
  config.rl.treepo.update(segment_len=2, first_width=2, branches=2)
  config.rl.latr.update(windows=(2,), mix_schedule=((0, 0.5),), tau_abs=0.0, tau_rel=1.0)


@pytest.mark.parametrize("mode", list(MODES))
def test_ragged_tree_path_equals_dense(smoke_config, tmp_path, mode):
  """n_b = G_max = G for every prompt (allocator 'uniform'): the ragged round, batch, tree and
  advantages are the dense tree path's exactly, and (eptree) so is the loss."""
  # shared_prompts (the dense trainer's prompt-once log-probs) off: the two losses then differ
  # only in the advantage path.
  smoke_config.rl.update(rollout=mode, advantage=MODES[mode], shared_prompts=False)
  _tree_options(smoke_config)
  exp = experiment.build(smoke_config, str(tmp_path))
  params = phases.init_params(exp)
  ragged_config = smoke_config.copy_and_resolve_references()
  ragged_config.rl.max_group_size = smoke_config.rl.group_size
  config_check.check(ragged_config)
  out = {}
  for name, config in (("dense", smoke_config), ("ragged", ragged_config)):
    e = dataclasses.replace(exp, config=config)
    batch, rewards, metrics = collect.rollout(StepContext(e, params, 0))
    hyper = hyper_lib.hyper_from_config(config)
    adv, weight, _ = rl_inputs.advantages(rewards, batch, hyper)
    step_metrics = {"loss": 0.0}
    if mode == "eptree":  # The loss once (a trainer compile per layout): a tree estimator.
      step = jax.jit(lambda s, b, r, h=hyper: steps_lib.rl_step(
          s, params, b, r, model_cfg=exp.model_cfg, hyper=h))
      _, step_metrics = step(TrainState.create(params, optax.sgd(1.0)), batch, rewards)
    out[name] = (batch, rewards, metrics, adv, weight, step_metrics)
  (d, dr, dm, da, dw, ds), (g, gr, gm, ga, gw, gs) = out["dense"], out["ragged"]
  for field in ("tokens", "mask", "logp", "group", "valid", "prompt_tokens"):
    np.testing.assert_array_equal(getattr(d, field), getattr(g, field), err_msg=field)
  np.testing.assert_array_equal(dr, gr)
  assert (d.tree is None) == (g.tree is None) == (mode == "latr")
  if d.tree is not None:
    for field in ("parent", "depth", "leaf_node", "node_of"):
      np.testing.assert_array_equal(getattr(d.tree, field), getattr(g.tree, field))
  np.testing.assert_array_equal(np.asarray(da), np.asarray(ga))
  np.testing.assert_array_equal(np.asarray(dw), np.asarray(gw))
  # One program scatters rows to groups, the other reshapes: the same values, maybe another
  # fusion of the loss' reductions.
  np.testing.assert_allclose(float(ds["loss"]), float(gs["loss"]), rtol=1e-6)
  assert np.isfinite(float(gs["loss"]))
  assert dm["rollout_tokens"] == gm["rollout_tokens"]


# docs/algorithms.md §3.2's worked tree: root -> A (leaves a1 = 1, a2 = 0), B (b1 = 0, b2 = 0).
# Nodes 0 root, 1 A, 2 B, 3 a1, 4 a2, 5 b1, 6 b2; each row: 2 tokens of A or B, 2 of its leaf.
PARENT = np.array([0, 0, 0, 1, 1, 2, 2], np.int32)
DEPTH = np.array([0, 1, 1, 2, 2, 2, 2], np.int32)
LEAF_NODES = np.array([[1, 1, 3, 3], [1, 1, 4, 4], [2, 2, 5, 5], [2, 2, 6, 6]], np.int32)
LEAF_REWARDS = np.array([1.0, 0.0, 0.0, 0.0], np.float32)


def _worked_batch(garbage_reward: float, garbage_tree: bool):
  """3 prompts of the worked tree with n = (4, 3, 2) of its 4 leaves kept, in R_max = 12 rows:
  prompt 1 drops b2, prompt 2 drops b1 and b2; the 3 dropped leaves sit in the padding rows
  (valid=False) with reward `garbage_reward` and, if `garbage_tree`, their real incidence."""
  counts = (4, 3, 2)
  rows = [(b, i) for b, n in enumerate(counts) for i in range(n)]
  dropped = [(1, 3), (2, 2), (2, 3)]
  node_of = np.stack([LEAF_NODES[i] for _, i in rows + dropped])
  leaf_node = np.zeros((12, 7), bool)
  for r, row in enumerate(node_of):
    if r < 9 or garbage_tree:
      leaf_node[r, 0] = True
      leaf_node[r, np.unique(row)] = True
  rewards = np.array([LEAF_REWARDS[i] for _, i in rows] + [garbage_reward] * 3, np.float32)
  group = np.array([b for b, _ in rows] + [3] * 3, np.int32)
  r = len(group)
  batch = Rollout(prompt_tokens=np.zeros((r, 1), np.int32), prompt_mask=np.ones((r, 1), bool),
                  tokens=np.zeros((r, 4), np.int32), mask=np.ones((r, 4), bool),
                  logp=np.zeros((r, 4), np.float32), group=group, valid=np.arange(r) < 9,
                  tree=Tree(parent=np.tile(PARENT, (3, 1)), depth=np.tile(DEPTH, (3, 1)),
                            leaf_node=leaf_node, node_of=node_of))
  return batch, rewards


def test_invalid_leaves_leave_the_worked_tree_advantages():
  """treerl_paper on the §3.2 worked tree: prompt 0 (all 4 leaves) gives the worked numbers
  A = 0.3536, a1 = 1.25, a2 = −0.75, B = −0.3536, b = −0.25. Prompt 1 (b2 invalid): V(root) =
  1/3, V(A) = 0.5, V(B) = 0 over b1 only -> A = (1/6 + 1/6)/√2 = 0.2357, a1 = 2/3 + 1/2 = 7/6,
  a2 = −1/3 − 1/2 = −5/6, B = (−1/3 − 1/3)/√1 = −2/3, b1 = −1/3 + 0 = −1/3. Prompt 2 (subtree B
  without a valid leaf): V(root) = V(A) = 0.5 -> A = 0, a1 = 1, a2 = −1. The invalid rows get
  weight 0 and advantage 0, and their rewards / incidence change nothing (every estimator)."""
  hyper = steps_lib.RLHyper(group_size=4, advantage="treerl_paper", num_groups=3,
                            max_group_size=4)
  advantages = jax.jit(rl_inputs.advantages, static_argnums=2)  # eager: ~10x the time
  batch, rewards = _worked_batch(7.0, True)
  adv, weight, _ = advantages(rewards, batch, hyper)
  s2 = np.sqrt(2.0)
  want = np.array([
      [0.5 / s2] * 2 + [1.25] * 2, [0.5 / s2] * 2 + [-0.75] * 2,
      [-0.5 / s2] * 2 + [-0.25] * 2, [-0.5 / s2] * 2 + [-0.25] * 2,
      [1 / 3 / s2] * 2 + [7 / 6] * 2, [1 / 3 / s2] * 2 + [-5 / 6] * 2,
      [-2 / 3] * 2 + [-1 / 3] * 2,
      [0.0] * 2 + [1.0] * 2, [0.0] * 2 + [-1.0] * 2,
  ] + [[0.0] * 4] * 3, np.float32)
  np.testing.assert_allclose(np.asarray(adv), want, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(weight), np.arange(12) < 9)
  for name in ("treerl_paper", "treerl_code", "treepo", "branchgrpo_depth"):
    h = dataclasses.replace(hyper, advantage=name)
    base = [np.asarray(x) for x in advantages(rewards, batch, h)[:2]]
    other = _worked_batch(-3.0, False)
    got = [np.asarray(x) for x in advantages(other[1], other[0], h)[:2]]
    np.testing.assert_array_equal(base[0], got[0], err_msg=name)
    np.testing.assert_array_equal(base[1], got[1], err_msg=name)
    assert not base[0][9:].any() and not base[1][9:].any(), name


def _tree_round(counts, offset):
  """A fake tree round: prompt b has counts[b] leaves of the worked tree; parent row b is
  marked `offset + b` in its depth column 6 to follow the slot."""
  n = sum(counts)
  node_of = np.concatenate([LEAF_NODES[:c] for c in counts])
  leaf_node = np.zeros((n, 7), bool)
  for r, row in enumerate(node_of):
    leaf_node[r, 0] = True
    leaf_node[r, np.unique(row)] = True
  depth = np.tile(DEPTH, (len(counts), 1))
  depth[:, 6] = offset + np.arange(len(counts))
  tree = Tree(parent=np.tile(PARENT, (len(counts), 1)), depth=depth, leaf_node=leaf_node,
              node_of=node_of)
  group = np.repeat(np.arange(len(counts)), counts).astype(np.int32)
  return Rollout(prompt_tokens=np.zeros((n, 1), np.int32), prompt_mask=np.ones((n, 1), bool),
                 tokens=np.zeros((n, 4), np.int32), mask=np.ones((n, 4), bool),
                 logp=np.zeros((n, 4), np.float32), group=group, valid=np.ones(n, bool),
                 tree=tree)


def test_assemble_packs_trees_of_several_rounds(smoke_config):
  """DAPO-like selection over two fresh rounds (slots 0-1, then 2-3): the batch's tree has the
  chosen slots' parent/depth per group and their rows' incidence; padding rows are no leaf."""
  smoke_config.rl.update(prompts_per_step=2, group_size=2, max_group_size=4, rows=6)
  rows = pool.Pool()
  rows.add(_tree_round((2, 1), 0), np.zeros((3, 1)), np.zeros((3, 1)), np.full(2, -1), None)
  rows.add(_tree_round((3, 2), 2), np.ones((5, 1)), np.ones((5, 1)), np.full(2, -1), None)
  batch, shaped, _ = pool.assemble(rows, smoke_config, (np.array([3, 0]), np.ones(2, bool)))
  np.testing.assert_array_equal(batch.group, [0, 0, 1, 1, 2, 2])
  np.testing.assert_array_equal(batch.valid, [1, 1, 1, 1, 0, 0])
  np.testing.assert_array_equal(batch.tree.depth[:, 6], [3, 0])  # slot 3, then slot 0
  np.testing.assert_array_equal(batch.tree.node_of[:4], LEAF_NODES[[0, 1, 0, 1]])
  assert not batch.tree.leaf_node[4:].any() and not batch.tree.node_of[4:].any()
  np.testing.assert_array_equal(shaped[:, 0], [1, 1, 0, 0, 0, 0])
  with pytest.raises(ValueError, match="mixes rounds with and without a tree"):
    rows.add(_tree_round((1,), 4).replace(tree=None), np.ones((1, 1)), np.ones((1, 1)),
             np.full(1, -1), None)
    pool.assemble(rows, smoke_config, (np.array([0, 4]), np.ones(2, bool)))


def test_rl_phase_with_eptree_and_knapsack(smoke_config, tmp_path):
  """EPTree leaves allocated by Knapsack (G_max = 6 > G = 4, min_n = 2, history of a 12-problem
  pool): two RL steps with ragged tree batches and finite losses."""
  smoke_config.rl.update(steps=2, eval_every=0, rollout="eptree", advantage="treerl_code",
                         allocator="knapsack", max_group_size=6, prompt_pool=12)
  smoke_config.rl.allocation.update(min_n=2)
  _tree_options(smoke_config)
  config_check.check(smoke_config)
  exp = experiment.build(smoke_config, str(tmp_path))
  with MetricsWriter(tmp_path) as writer:
    result = phases.rl(exp, phases.init_params(exp), writer)
  records = [r for r in read_metrics(tmp_path) if r["phase"] == "rl"]
  assert result.steps == 2 and [r["step"] for r in records] == [1, 2]
  for r in records:
    assert np.isfinite(r["loss"]) and r["nonfinite"] == 0
    assert r["alloc/n_min"] >= 2 and r["alloc/n_max"] <= 6
    assert r["tree_kept_tokens"] <= r["rollout_tokens"]


@pytest.mark.parametrize("rl,match", [
    ({"rollout": "echo"}, r"allocator='knapsack' needs ragged groups, which rollout='echo'"),
    ({"rollout": "arrol", "allocator": "uniform"},
     r"rollout='arrol' with the ragged layout .* is not supported"),
    ({"rollout": "eptree", "allocation.probe": 2, "allocation.min_n": 2},
     r"rollout='eptree' with extension rounds"),
    ({"rollout": "treepo", "advantage": "v05"}, r"rollout='treepo' with extension rounds"),
    ({"rollout": "eptree", "max_group_size": 7}, r"max_group_size=7 exceeds the 6 leaves"),
])
def test_unsupported_ragged_tree_configs(smoke_config, rl, match):
  _tree_options(smoke_config)
  smoke_config.rl.update(max_group_size=6, allocator="knapsack")
  for key, value in rl.items():
    section, _, leaf = key.rpartition(".")
    (smoke_config.rl[section] if section else smoke_config.rl)[leaf] = value
  with pytest.raises(ValueError, match=match):
    checks.check_config(smoke_config)


def test_block_rows_and_kept_tokens():
  np.testing.assert_array_equal(requests_lib.block_rows([2, 0, 1], 3), [0, 1, 6])
  tree = Tree(parent=np.tile(PARENT, (1, 1)), depth=np.tile(DEPTH, (1, 1)),
              leaf_node=np.ones((2, 7), bool), node_of=LEAF_NODES[:2])
  # a1 and a2 share A's 2 tokens: 2 + 2 + 2 distinct tokens.
  assert engines.kept_tokens(tree, np.ones((2, 4), bool), np.zeros(2)) == 6
