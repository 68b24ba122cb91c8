"""DAPO host rollouts: overlong shaping numbers, dynamic sampling with static shapes.

Generation is stubbed (`collect.rollout` takes the fresh-round function, which returns a typed
`engines.Round`), so the group selection is checked exactly; one test runs the real sampler and
RL phase on the smoke config.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from rl_jax import experiment
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.rollout import collect, engines, pool, rules
from rl_jax.rollout.requests import Requests, StepContext
from rl_jax.train import config_check, phases
from rl_jax.types import Rollout

T = 5
# The real-sampler tests compile the smoke RL phase, which dominates their time; what they check
# (static shapes, counts, finite metrics) holds with or without XLA's optimizations.
pytestmark = pytest.mark.usefixtures("fast_compiles")


def test_overlong_shaping_matches_algorithms_md():
  """§2.2: L_max=20, L_cache=4: L=16 -> 0, L=18 -> -0.5, L=21 -> -1; only column 0 moves."""
  r = np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]], np.float32)
  out = pool.overlong_shaping(r, np.array([16, 18, 21]), max_len=20, buffer=4)
  np.testing.assert_allclose(out, [[1.0, 1.0], [0.5, 1.0], [-1.0, 1.0]])
  np.testing.assert_allclose(pool.overlong_shaping(r, np.array([16, 18, 21]), 20, 0), r)


def test_informative_groups():
  """§2.2: groups [1,1,1,1], [0,1,0,0], [0,0,0,0] -> only group 2 is kept."""
  r = np.array([1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0], np.float32)[:, None]
  valid = np.ones(12, bool)
  np.testing.assert_array_equal(pool.informative_groups(r, valid, 4, (), False),
                                [False, True, False])
  # Two components: a varying second component makes group 1 informative for GDPO...
  r2 = np.concatenate([r, np.array([1, 0, 1, 1] + [1] * 8, np.float32)[:, None]], 1)
  np.testing.assert_array_equal(pool.informative_groups(r2, valid, 4, (), True),
                                [True, True, False])
  # ... and for a scalar estimator only when the weighted sum varies.
  np.testing.assert_array_equal(pool.informative_groups(r2, valid, 4, (1.0, 0.0), False),
                                [False, True, False])


def _ctx(config, **kw) -> StepContext:
  """A step context for stubbed rounds: only the config is read."""
  return StepContext(types.SimpleNamespace(config=config), None, **kw)


def _stub(round_rewards, group_size):
  """fresh(ctx, k) -> a Round: a host Rollout whose tokens encode (round, row), [R, 1] rewards."""

  def draw(ctx, k):
    del ctx
    r = np.asarray(round_rewards[k], np.float32)
    n = len(r)
    tokens = np.tile((100 * k + np.arange(n))[:, None], (1, T)).astype(np.int32)
    mask = np.ones((n, T), bool)
    mask[:, -1] = np.arange(n) % 2 == 0  # Lengths 5 and 4.
    return engines.Round(Rollout(
        prompt_tokens=np.ones((n, 2), np.int32), prompt_mask=np.ones((n, 2), bool),
        tokens=tokens, mask=mask, logp=np.zeros((n, T), np.float32),
        group=np.repeat(np.arange(n // group_size), group_size).astype(np.int32),
        valid=np.ones(n, bool)), r[:, None])

  return draw


@pytest.fixture
def ds_config(smoke_config):
  smoke_config.rl.update(prompts_per_step=3, group_size=4, dynamic_sampling=True,
                         max_gen_rounds=3)
  return smoke_config


def test_dynamic_sampling_keeps_informative_groups_in_order(ds_config):
  rounds = [[1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0],   # Round 0: group 1 informative.
            [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],   # Round 1: groups 0 and 2.
            [0, 1, 0, 1] * 3]                        # Never drawn: 3 groups already.
  batch, rewards, metrics = collect.rollout(_ctx(ds_config), _stub(rounds, 4))
  assert metrics["gen_rounds"] == 2 and metrics["kept_groups"] == 3
  assert metrics["rollout_tokens"] == 2 * 12 * 4.5
  assert batch.tokens.shape == (12, T) and rewards.shape == (12, 1)
  np.testing.assert_array_equal(batch.tokens[::4, 0], [4, 100, 108])  # (round, first row).
  np.testing.assert_array_equal(rewards[:, 0], rounds[0][4:8] + rounds[1][0:4] + rounds[1][8:12])
  assert batch.valid.all()
  np.testing.assert_array_equal(batch.group, np.repeat(np.arange(3), 4))


def test_dynamic_sampling_fills_missing_groups_with_invalid_rows(ds_config):
  rounds = [[0] * 12, [1] * 4 + [0, 1, 1, 1] + [0] * 4, [1] * 12]
  batch, rewards, metrics = collect.rollout(_ctx(ds_config), _stub(rounds, 4))
  assert metrics["gen_rounds"] == 3 and metrics["kept_groups"] == 1
  assert batch.tokens.shape == (12, T) and rewards.shape == (12, 1)
  np.testing.assert_array_equal(batch.valid, np.repeat([True, False, False], 4))
  np.testing.assert_array_equal(rewards[:4, 0], [0, 1, 1, 1])
  assert metrics["reward_task_score"] == 0.75  # Over the valid rows only.


def test_without_dynamic_sampling_one_round_and_shaping(ds_config):
  ds_config.rl.update(dynamic_sampling=False, overlong_buffer=2)
  rounds = [[1] * 12]
  batch, rewards, metrics = collect.rollout(_ctx(ds_config), _stub(rounds, 4))
  assert metrics["gen_rounds"] == 1 and metrics["kept_groups"] == 3
  # L_max = 5, L_cache = 2: length 5 -> -1, length 4 -> -0.5.
  np.testing.assert_allclose(rewards[:4, 0], [0.0, 0.5, 0.0, 0.5])
  assert metrics["reward_task_score"] == 1.0  # Raw (unshaped) reward.


def test_rl_phase_with_dapo_options_keeps_static_shapes(smoke_config, tmp_path):
  """The real sampler -> dynamic sampling -> a step with micro-batches, 2 iterations and TIS."""
  smoke_config.rl.update(steps=2, eval_every=0, dynamic_sampling=True, max_gen_rounds=2,
                         overlong_buffer=2, num_minibatches=2, num_iterations=2, tis_cap=2.0,
                         rewards=("task_score", "format"), advantage="gdpo")
  exp = experiment.build(smoke_config, str(tmp_path))
  params = phases.init_params(exp)
  batch, rewards, metrics = collect.rollout(StepContext(exp, params, 0))
  rows = smoke_config.rl.prompts_per_step * smoke_config.rl.group_size
  assert batch.tokens.shape == (rows, smoke_config.sampling.max_new_tokens)
  assert rewards.shape == (rows, 2)
  assert 1 <= metrics["gen_rounds"] <= 2
  assert batch.valid.sum() == metrics["kept_groups"] * smoke_config.rl.group_size
  if metrics["kept_groups"] < smoke_config.rl.prompts_per_step:
    assert metrics["gen_rounds"] == 2
  with MetricsWriter(tmp_path) as writer:
    result = phases.rl(exp, params, writer)
  records = [r for r in read_metrics(tmp_path) if r["phase"] == "rl"]
  assert [r["step"] for r in records] == [1, 2]
  for r in records:
    assert {"gen_rounds", "kept_groups", "reward_task_score", "reward_format",
            "tis_weight_mean", "rollout_tokens"} <= set(r)
    assert all(np.isfinite(v) for v in r.values() if isinstance(v, float))
  assert result.steps == 2


def test_mix_ratio_schedule():
  schedule = ((0, 1.0), (100, 0.75), (200, 0.5), (300, 0.25))
  assert [engines.mix_ratio(schedule, s) for s in (0, 99, 100, 250, 1000)] == [
      1.0, 1.0, 0.75, 0.5, 0.25]


@pytest.mark.parametrize("field,value,match", [
    ("rollout", "beam", "config.rl.rollout"),
    ("latr.mix_schedule", ((10, 0.5), (0, 1.0)), "mix_schedule"),
    ("latr.windows", (), "windows"),
    ("latr.windows", (2, 50), r"config.rl.latr.windows=\(2, 50\): expected lookahead windows of "
                              r"at most sampling.max_new_tokens="),
    ("group_size", 99, "leaves per prompt"),
])
def test_tree_rollout_config_errors(smoke_config, field, value, match):
  smoke_config.rl.rollout = "eptree" if field == "group_size" else "latr"
  if field == "rollout":
    smoke_config.rl.rollout = value
  else:
    section, _, key = field.rpartition(".")
    (smoke_config.rl[section] if section else smoke_config.rl)[key] = value
  with pytest.raises(ValueError, match=match):
    config_check.check(smoke_config)  # The one pass: registry names, then the rollout checks.


@pytest.mark.parametrize("mode,advantage", [("latr", "grpo"), ("eptree", "treerl_code")])
def test_rl_phase_with_tree_rollouts(smoke_config, tmp_path, mode, advantage):
  """Tree rollouts through the real RL phase: static shapes, tree metrics, tree advantages."""
  smoke_config.rl.update(steps=2, eval_every=0, rollout=mode, advantage=advantage)
  smoke_config.rl.latr.update(windows=(2,), mix_schedule=((0, 0.5),), tau_abs=0.0, tau_rel=1.0)
  smoke_config.rl.eptree.update(num_chains=2, forks_per_round=1, branches=2)
  exp = experiment.build(smoke_config, str(tmp_path))
  params = phases.init_params(exp)
  batch, rewards, metrics = collect.rollout(StepContext(exp, params, 0))
  g, rows = smoke_config.rl.group_size, smoke_config.rl.prompts_per_step * smoke_config.rl.group_size
  assert batch.tokens.shape == (rows, smoke_config.sampling.max_new_tokens)
  assert rewards.shape == (rows, 1)
  if mode == "latr":
    assert metrics["tree_rows"] == g // 2 and metrics["tree_forks"] > 0
    # Each prompt's tree slots hold its root, the branches alive at the end, and copies of the
    # root's first row in the rest (`fill`).
    prompts = smoke_config.rl.prompts_per_step
    live = prompts + metrics["tree_forks"] - metrics["tree_pruned"]
    assert metrics["tree_filled"] == prompts * (g // 2) - live, metrics
    with exp.config.unlocked():  # A threshold no candidate passes: no forks, roots and copies.
      exp.config.rl.latr.tau_abs = 1.0
    no_fork = collect.rollout(StepContext(exp, params, 0))[2]
    assert no_fork["tree_forks"] == 0 and no_fork["tree_filled"] == prompts * (g // 2 - 1)
    assert batch.tree is None
  else:
    assert batch.tree.leaf_node.shape[0] == rows and batch.tree.leaf_node[:, 0].all()
    # Leaves share their prefix: fewer tokens decoded than the batch holds.
    assert metrics["rollout_tokens"] < 6 / 4 * metrics["batch_tokens"]
  with MetricsWriter(tmp_path) as writer:
    result = phases.rl(exp, params, writer)
  records = [r for r in read_metrics(tmp_path) if r["phase"] == "rl"]
  assert [r["step"] for r in records] == [1, 2] and result.steps == 2
  for r in records:
    assert {"rollout_tokens", "batch_tokens"} <= set(r)
    assert all(np.isfinite(v) for v in r.values() if isinstance(v, float))


def test_serve_scores_once_after_the_engine_then_calls_the_round_hooks(smoke_config, monkeypatch):
  """engine -> one scorer -> round hooks -> a typed Round; metrics in that order."""
  calls = []

  def fake_score(exp, tokens, mask, example_ids):
    del exp, tokens, mask
    calls.append(np.asarray(example_ids).tolist())
    return np.arange(len(example_ids), dtype=np.float32)[:, None], {"reward/errors": 0}

  def stub_engine(ctx, requests, keys):
    del ctx, keys
    n = requests.total
    return engines.Served(np.zeros((n, 3), np.int32), np.ones((n, 3), bool),
                          np.zeros((n, 3), np.float32), requests, metrics={"rollout_tokens": 3 * n})

  monkeypatch.setattr(engines, "score", fake_score)
  table = engines.ENGINES._table  # pylint: disable=protected-access
  monkeypatch.setitem(table, "_stub", engines.Engine(stub_engine))
  seen = []

  def hook(ctx, rnd):
    del ctx
    seen.append(rnd.rewards[:, 0].tolist())
    return {"hook/rows": len(rnd.rewards)}

  exp = types.SimpleNamespace(config=smoke_config, train_prompts=np.arange(20).reshape(10, 2),
                              train_prompt_mask=np.ones((10, 2), bool))
  rnd = engines.serve(StepContext(exp, None, on_round=(hook,)), "_stub",
                      Requests(np.array([3, 5]), np.array([2, 1])), engines.RoundKeys(None))
  assert calls == [[3, 3, 5]] and seen == [[0.0, 1.0, 2.0]]
  assert list(rnd.metrics.items()) == [("rollout_tokens", 9), ("hook/rows", 3),
                                       ("reward/errors", 0)]
  np.testing.assert_array_equal(rnd.rollout.group, [0, 0, 1])
  np.testing.assert_array_equal(rnd.rollout.prompt_tokens[:, 0], [6, 6, 10])
  np.testing.assert_array_equal(rnd.prompt_ids, [3, 5])
  assert rnd.rewards.dtype == np.float32 and rnd.rollout.valid.all()


def test_entries_declare_what_a_method_needs(smoke_config):
  """The engine, round-rule and advantage entries answer; no caller names the method."""
  assert "april" not in engines.rollout_modes()
  assert engines.fresh_engine(smoke_config, 0) == smoke_config.rl.rollout
  smoke_config.rl.partial.enabled = True
  assert engines.fresh_engine(smoke_config, 0) == "april"
  assert engines.fresh_engine(smoke_config, 1) == smoke_config.rl.rollout
  r, t = 8, 5
  zero = Rollout(prompt_tokens=np.zeros((r, 2), np.int32), prompt_mask=np.zeros((r, 2), bool),
                 tokens=np.zeros((r, t), np.int32), mask=np.zeros((r, t), bool),
                 logp=np.zeros((r, t), np.float32), group=np.zeros(r, np.int32),
                 valid=np.zeros(r, bool))
  assert engines.example(smoke_config, zero).policy_version.shape == (r, t)
  smoke_config.rl.partial.enabled = False
  smoke_config.rl.rollout = "eptree"
  assert engines.example(smoke_config, zero).tree.node_of.shape == (r, t)
  assert "v05_extra" not in rules.active_rules(smoke_config)
  assert rules.example(smoke_config, zero).prior is None
  smoke_config.rl.advantage = "v05"
  assert "v05_extra" in rules.active_rules(smoke_config)
  assert rules.example(smoke_config, zero).prior.shape == (r, 2)
  assert engines.tree_modes() == ("eptree", "treepo")
  assert set(engines.ragged_modes()) == {"iid", "latr", "eptree", "treepo"}
