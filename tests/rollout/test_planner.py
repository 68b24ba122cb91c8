"""The planner -> engine -> round rules loop: ragged rows in static shapes, history records,
extra rounds, and the ragged advantage path (equal to the dense one on the same groups)."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from rl_jax import experiment
from rl_jax.rollout import collect, engines, planner, rules
from rl_jax.rollout import requests as requests_lib
from rl_jax.rollout.requests import StepContext
from rl_jax.train import config_check, phases, rl_inputs
from rl_jax.train.steps import RLHyper
from rl_jax.types import Rollout
from rl_jax.value.history import RolloutHistory

T = 3


def test_layout_packs_requests_and_pads():
  group, valid = requests_lib.layout(np.array([2, 0, 3]), 8)
  np.testing.assert_array_equal(group, [0, 0, 2, 2, 2, 3, 3, 3])
  np.testing.assert_array_equal(valid, [1, 1, 1, 1, 1, 0, 0, 0])
  with pytest.raises(ValueError, match="ask for 5 rows but the batch holds 4"):
    requests_lib.layout(np.array([2, 3]), 4)
  with pytest.raises(ValueError, match="counts must be >= 0"):
    requests_lib.Requests([1, 2], [1, -1])
  with pytest.raises(ValueError, match="one length"):
    requests_lib.Requests([1, 2], [1])
  assert [requests_lib.engine_rows(n, 12) for n in (1, 2, 3, 5, 9, 12)] == [1, 2, 4, 8, 12, 12]


def _ctx(config, **kw) -> StepContext:
  """A step context for stubbed rounds: only the config (and step / history) are read."""
  return StepContext(types.SimpleNamespace(config=config), None, **kw)


def _rows(group, valid, first_token=0):
  n = len(group)
  tokens = np.tile((first_token + np.arange(n))[:, None], (1, T)).astype(np.int32)
  return Rollout(prompt_tokens=np.ones((n, 2), np.int32), prompt_mask=np.ones((n, 2), bool),
                 tokens=tokens, mask=np.ones((n, T), bool), logp=np.zeros((n, T), np.float32),
                 group=np.asarray(group, np.int32), valid=np.asarray(valid, bool))


@pytest.fixture
def ragged_config(smoke_config):
  smoke_config.rl.update(prompts_per_step=3, group_size=2, max_group_size=4, rows=10)
  return smoke_config


def test_ragged_collect_packs_rows_and_records_history(ragged_config):
  """Counts [3, 1, 2] in 8 engine rows -> a 10-row batch, padding invalid with reward 0."""
  group, valid = requests_lib.layout(np.array([3, 1, 2]), 8)
  r = np.array([1, 0, 1, 1, 0, 0, 9, 9], np.float32)[:, None]
  draw = lambda ctx, k: engines.Round(_rows(group, valid), r, {}, np.array([7, 8, 9]))
  history = RolloutHistory()
  batch, rewards, metrics = collect.rollout(_ctx(ragged_config, step=5, history=history), draw)
  np.testing.assert_array_equal(batch.group, [0, 0, 0, 1, 2, 2, 3, 3, 3, 3])
  np.testing.assert_array_equal(batch.valid, [1] * 6 + [0] * 4)
  assert not batch.mask[6:].any() and batch.mask[:6].all()
  np.testing.assert_array_equal(rewards[:, 0], [1, 0, 1, 1, 0, 0, 0, 0, 0, 0])
  assert metrics["gen_rounds"] == 1 and metrics["reward_task_score"] == 0.5
  rec = history.records()
  assert rec.tolist() == [(7, 5, 3, 2), (8, 5, 1, 1), (9, 5, 2, 0)]


class _TopUp(rules.RoundRule):
  """A test rule: once, asks 2 more rows for every slot with fewer than 3."""

  def __init__(self, ctx):
    del ctx
    self.asked = False

  def after_round(self, pool, round_idx):
    if self.asked:
      return None
    self.asked = True
    small = np.flatnonzero(pool.sizes() < 3)
    return requests_lib.Requests(np.asarray(pool.slot_prompt)[small], np.full(len(small), 2), small)


if "_test_top_up" not in rules.ROUND_RULES:
  rules.ROUND_RULES.register("_test_top_up")(_TopUp)


def test_extra_rows_join_their_slots(ragged_config):
  ragged_config.rl.round_rules = ("_test_top_up",)
  group, valid = requests_lib.layout(np.array([3, 1, 2]), 6)
  draw = lambda ctx, k: engines.Round(_rows(group, valid), np.arange(6, dtype=np.float32)[:, None],
                                      {}, np.array([7, 8, 9]))
  asked = []

  def extend(ctx, k, requests):
    del ctx
    asked.append((k, requests.prompt_ids.tolist(), requests.slots.tolist()))
    g, v = requests_lib.layout(requests.counts, 4)
    return engines.Round(_rows(g, v, 100), 100 + np.arange(4, dtype=np.float32)[:, None])

  history = RolloutHistory()
  batch, rewards, metrics = collect.rollout(_ctx(ragged_config, step=1, history=history), draw,
                                           extend)
  assert asked == [(1, [8, 9], [1, 2])]
  assert metrics["gen_rounds"] == 2
  # Slot 0: rows 0-2; slot 1: row 3 + extra rows 100, 101; slot 2: rows 4, 5 + 102, 103.
  np.testing.assert_array_equal(batch.tokens[:, 0], [0, 1, 2, 3, 100, 101, 4, 5, 102, 103])
  np.testing.assert_array_equal(batch.group, [0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
  np.testing.assert_array_equal(rewards[:, 0], [0, 1, 2, 3, 100, 101, 4, 5, 102, 103])
  assert history.stats([7, 8, 9])[0].tolist() == [3, 3, 4]


def test_ragged_advantages_equal_dense_groups():
  """Rows in any order with a group id == the dense [B, G_max] + valid estimator, row by row."""
  rng = np.random.default_rng(0)
  b, gm = 3, 4
  counts = np.array([4, 1, 3])
  r_dense = rng.normal(size=(b, gm)).astype(np.float32)
  v_dense = np.arange(gm)[None, :] < counts[:, None]
  rows = [(i, j) for i in range(b) for j in range(counts[i])]
  order = rng.permutation(len(rows))
  group = np.array([rows[o][0] for o in order] + [b, b], np.int32)
  rank = [rows[o][1] for o in order]
  rewards = np.array([r_dense[i, j] for i, j in (rows[o] for o in order)] + [5.0, 5.0],
                     np.float32)
  valid = np.arange(len(group)) < len(rows)
  t = 2
  ro = Rollout(prompt_tokens=np.zeros((10, 1), np.int32), prompt_mask=np.ones((10, 1), bool),
               tokens=np.zeros((10, t), np.int32), mask=np.ones((10, t), bool),
               logp=np.zeros((10, t), np.float32), group=group, valid=valid)
  for name in ("grpo", "rloo", "drgrpo"):
    ragged = RLHyper(group_size=2, advantage=name, num_groups=b, max_group_size=gm)
    adv, weight, _ = rl_inputs.advantages(rewards, ro, ragged)
    dense_ro = Rollout(prompt_tokens=np.zeros((b * gm, 1), np.int32),
                       prompt_mask=np.ones((b * gm, 1), bool),
                       tokens=np.zeros((b * gm, t), np.int32), mask=np.ones((b * gm, t), bool),
                       logp=np.zeros((b * gm, t), np.float32),
                       group=np.repeat(np.arange(b), gm).astype(np.int32),
                       valid=v_dense.reshape(-1))
    want, want_w, _ = rl_inputs.advantages(r_dense.reshape(-1), dense_ro,
                                           RLHyper(group_size=gm, advantage=name))
    want, want_w = np.asarray(want).reshape(b, gm), np.asarray(want_w).reshape(b, gm)
    for row, (o, k) in enumerate(zip(order, rank)):
      i = rows[o][0]
      assert adv[row] == want[i, k] and weight[row] == want_w[i, k], (name, row)
    assert (np.asarray(adv)[~valid] == 0).all() and (np.asarray(weight)[~valid] == 0).all()
  with pytest.raises(ValueError, match="needs a tree rollout"):
    rl_inputs.advantages(rewards, ro, RLHyper(group_size=2, advantage="treerl_code",
                                              num_groups=b, max_group_size=gm))


@pytest.mark.parametrize("kind", ["pav", "oracle"])
def test_ragged_process_rewards_equal_dense_groups(kind):
  """PAV (and the oracle, PAV's estimator) on a ragged batch, rows shuffled, padding rows with
  step rewards of 9 == the dense [B, G_max] batch with the same groups, token by token."""
  rng = np.random.default_rng(1)
  b, gm, t = 3, 4, 5
  counts = np.array([4, 1, 3])
  rows = [(i, j) for i in range(b) for j in range(counts[i])]
  order = rng.permutation(len(rows))
  n = len(rows) + 2
  r_dense = rng.normal(size=(b, gm)).astype(np.float32)
  sr_dense = rng.normal(size=(b, gm, t)).astype(np.float32)
  so_dense = np.tile(np.array([0, 0, 1, 1, 2], np.int32), (b, gm, 1))
  pick = lambda x, pad: np.concatenate([np.stack([x[rows[o]] for o in order]), pad])
  ro = Rollout(prompt_tokens=np.zeros((n, 1), np.int32), prompt_mask=np.ones((n, 1), bool),
               tokens=np.zeros((n, t), np.int32), mask=np.ones((n, t), bool),
               logp=np.zeros((n, t), np.float32),
               group=np.array([rows[o][0] for o in order] + [b, b], np.int32),
               valid=np.arange(n) < len(rows),
               step_rewards=pick(sr_dense, np.full((2, t), 9.0, np.float32)),
               step_of=pick(so_dense, np.zeros((2, t), np.int32)))
  rewards = pick(r_dense, np.full(2, 5.0, np.float32))
  opts = (("alpha", 0.5),)
  hyper = RLHyper(group_size=2, advantage="grpo", num_groups=b, max_group_size=gm,
                  process_reward=kind, process_options=opts)
  adv, weight, _ = rl_inputs.advantages(rewards, ro, hyper)
  dense_ro = Rollout(prompt_tokens=np.zeros((b * gm, 1), np.int32),
                     prompt_mask=np.ones((b * gm, 1), bool), tokens=np.zeros((b * gm, t), np.int32),
                     mask=np.ones((b * gm, t), bool), logp=np.zeros((b * gm, t), np.float32),
                     group=np.repeat(np.arange(b), gm).astype(np.int32),
                     valid=(np.arange(gm)[None, :] < counts[:, None]).reshape(-1),
                     step_rewards=sr_dense.reshape(-1, t), step_of=so_dense.reshape(-1, t))
  want, want_w, _ = rl_inputs.advantages(
      r_dense.reshape(-1), dense_ro,
      RLHyper(group_size=gm, advantage="grpo", process_reward=kind, process_options=opts))
  want, want_w = np.asarray(want).reshape(b, gm, t), np.asarray(want_w).reshape(b, gm)
  assert np.asarray(adv).shape == (n, t)
  for row, o in enumerate(order):
    np.testing.assert_allclose(np.asarray(adv)[row], want[rows[o]], rtol=1e-6, atol=1e-6)
    assert weight[row] == want_w[rows[o]]
  assert (np.asarray(adv)[len(rows):] == 0).all() and (np.asarray(weight)[len(rows):] == 0).all()
  # The step rewards acted: the token advantages differ within a row.
  assert np.ptp(np.asarray(adv)[0]) > 0


@pytest.mark.parametrize("field,value,match", [
    ("rows", 8, "rows=8 needs the ragged layout; expected"),
    ("allocator", "knapsack", "max_group_size"),
    ("max_group_size", 2, r"max_group_size=2: expected 0 \(dense groups\) or >= group_size=4"),
    ("round_rules", ("nope",), r"config.rl.round_rules\[0\]='nope': expected one of"),
    ("success_threshold", 1.0, "success_threshold"),
])
def test_planner_config_errors(smoke_config, field, value, match):
  smoke_config.rl[field] = value
  if field == "max_group_size":
    smoke_config.rl.group_size = 4
  with pytest.raises(ValueError, match=match):
    config_check.check(smoke_config)  # The one pass (the threshold's range is in its table).


def test_engine_round_on_ragged_rows(smoke_config, tmp_path):
  """The real engine, ragged layout (uniform counts, R_max = 20 > 16 rows requested): static
  shapes, padding rows unscored, the history recorded, and the dense round's samples exactly.
  (tests/rl/test_v05.py runs the RL phase on ragged batches with extra rounds.)"""
  smoke_config.rl.update(max_group_size=6, rows=20)
  exp = experiment.build(smoke_config, str(tmp_path))
  params = phases.init_params(exp)
  history = RolloutHistory()
  batch, rewards, metrics = collect.rollout(StepContext(exp, params, 0, history=history))
  assert batch.tokens.shape == (20, smoke_config.sampling.max_new_tokens)
  np.testing.assert_array_equal(batch.valid, np.arange(20) < 16)
  np.testing.assert_array_equal(batch.group[:16], np.repeat(np.arange(4), 4))
  assert (rewards[16:] == 0).all() and not batch.mask[16:].any()
  assert metrics["engine_rows"] == 16  # A power of two >= 16 rows requested, at most R_max.
  assert len(history) == 4 and (history.records()["attempts"] == 4).all()
  dense_config = smoke_config.copy_and_resolve_references()
  dense_config.rl.update(max_group_size=0, rows=0)
  dense, dense_rewards, _ = collect.rollout(StepContext(
      dataclasses.replace(exp, config=dense_config), params, 0))
  np.testing.assert_array_equal(batch.tokens[:16], dense.tokens)
  np.testing.assert_array_equal(rewards[:16], dense_rewards)


def test_ragged_batch_metrics_ignore_padding_rows():
  """Groups [1, 0] (informative) and [1, 1] (not) in 4 of 6 rows; 2 padding rows of length 3."""
  mask = np.zeros((6, 3), bool)
  mask[:4, :2] = True
  mask[4:] = True
  ro = Rollout(prompt_tokens=np.zeros((6, 1), np.int32), prompt_mask=np.ones((6, 1), bool),
               tokens=np.zeros((6, 3), np.int32), mask=mask, logp=np.zeros((6, 3), np.float32),
               group=np.array([0, 0, 1, 1, 2, 2], np.int32),
               valid=np.array([1, 1, 1, 1, 0, 0], bool))
  hyper = RLHyper(group_size=2, advantage="grpo", num_groups=2, max_group_size=4)
  r = np.array([1, 0, 1, 1, 0, 0], np.float32)
  adv, weight, scalar = rl_inputs.advantages(r, ro, hyper)
  m = rl_inputs.batch_metrics(scalar, ro, adv, weight, mask & ro.valid[:, None], 2, 2)
  assert float(m["completion_len"]) == 2.0 and float(m["informative_frac"]) == 0.5
  assert float(m["reward_mean"]) == 0.75


def test_uniform_prompt_order_is_what_the_rl_phase_draws(smoke_config, tmp_path):
  """planner.uniform_prompt_order (what benchmarks/learn_parity.py feeds TRL) == the prompts of
  each step's real dense round; a ragged config is refused."""
  exp = experiment.build(smoke_config, str(tmp_path))
  params = phases.init_params(exp)
  order = planner.uniform_prompt_order(exp, 3)
  g = smoke_config.rl.group_size
  for step in (0, 2):
    batch, _, _ = collect.rollout(StepContext(exp, params, step))
    np.testing.assert_array_equal(batch.prompt_tokens[::g],
                                  exp.train_prompts[order[step]][:, -batch.prompt_tokens.shape[1]:])
  assert not np.array_equal(order[0], order[1])
  ragged = smoke_config.copy_and_resolve_references()
  ragged.rl.update(max_group_size=6, rows=20)
  with pytest.raises(ValueError, match="dense groups"):
    planner.uniform_prompt_order(dataclasses.replace(exp, config=ragged), 1)
