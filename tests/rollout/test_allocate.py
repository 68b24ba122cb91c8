"""Allocation glue: config checks, history -> statistics, per-step allocation metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.configs import ladder
from rl_jax import experiment, workdir
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.rollout import collect, planner, pool
from rl_jax.rollout.requests import StepContext
from rl_jax.train import config_check, phases
from rl_jax.value.history import RolloutHistory

# XLA optimizations off: the real-engine tests compile the smoke rollouts and RL phase, which is
# most of their time; they check counts, shapes and one run against another.
pytestmark = pytest.mark.usefixtures("fast_compiles")

def _config(**rl):
  """The ladder smoke config with `config.rl.<dotted key> = value` overrides."""
  c = ladder.get_config("smoke")
  for key, value in rl.items():
    *parents, leaf = key.split(".")
    node = c.rl
    for part in parents:
      node = node[part]
    node[leaf] = value
  return c


def test_default_is_uniform_and_checks():
  c = _config()
  config_check.check(c)
  assert c.rl.allocator == "uniform"
  budget = planner.budget_from_config(c)
  assert (budget.total, budget.num_prompts) == (16, 4)


@pytest.mark.parametrize("overrides,match", [
    ({"allocator": "bogus"}, r"config.rl.allocator='bogus': expected one of"),
    ({"allocator": "dars"}, r"set config.rl.max_group_size"),
    ({"allocator": "dars", "max_group_size": 8, "allocation.min_n": 5},
     r"rollout budget 16 is smaller than 4 prompts x min_n=5"),
    ({"allocator": "knapsack", "max_group_size": 8, "allocation.probe": 2,
      "allocation.min_n": 1}, r"probe=2 needs min_n == probe"),
    ({"allocator": "vade", "max_group_size": 8, "allocation.probe": 1, "allocation.min_n": 1},
     r"not supported with the data-selection allocator 'vade'"),
    ({"allocator": "knapsack", "max_group_size": 8, "allocation.probe": 2, "allocation.min_n": 2,
      "dynamic_sampling": True}, r"probe is not supported together with dynamic_sampling"),
    ({"allocator": "knapsack", "max_group_size": 8, "dynamic_sampling": True},
     r"up to B x max_group_size = 32 rows; config.rl.rows=16"),
    ({"allocator": "v0", "max_group_size": 8}, r"needs predictions p_hat"),
    ({"prompt_pool": 10**6}, r"config.rl.prompt_pool=1000000"),
    ({"allocator": "knapsack", "rollout": "echo"}, r"needs ragged groups"),
    ({"allocator": "xrpo", "allocation.xrpo.form": "nope"}, r"xrpo form='nope'"),
    ({"prompt_pool": -1}, r"config.rl.prompt_pool=-1"),
    ({"allocator_prior": "history"},
     r"allocator_prior='history': allocator 'uniform' does not read a prior; expected allocator "
     r"in \['knapsack', 'v0'\]"),
    ({"allocator": "dars", "max_group_size": 8, "allocator_prior": "oracle"},
     r"allocator 'dars' does not read a prior"),
])
def test_config_errors_name_the_field(overrides, match):
  with pytest.raises(config_check.ConfigError, match=match):
    config_check.check(_config(**overrides))


def test_prompt_stats_window():
  h = RolloutHistory()
  h.record(0, [1, 2], [4, 4], [1, 4])
  h.record(3, [1], [4], [3])
  s = planner.history_stats(h, [1, 2, 9], step=4, history_steps=2)  # steps 2 and 3 only
  assert s.attempts.tolist() == [4, 0, 0] and s.successes.tolist() == [3, 0, 0]
  assert s.p_hat is None and s.step == 4
  s = planner.history_stats(h, [1, 2], step=3)  # all earlier steps, not step 3 itself
  assert s.attempts.tolist() == [4, 4] and s.successes.tolist() == [1, 4]


def test_knapsack_from_eight_row_estimates_worked_numbers():
  """docs/algorithms.md §6.1's worked case through the planner, estimates from the history: p = 0.5
  and 0.25 (8 and 16 rows), a p = 0 and a p = 1 prompt (8 rows each), one prompt with 4 rows (no
  estimate: the budget's mean, 3). Budget 5 x 3 = 15 rows, min_n 2: 2 + 2 + 2 + 2 + 3 = 11, so
  R = 4 extra rows; the fallback's estimate (int(3.32) + int(8.00) = 11 >= 4) sends none to the
  p = 0 prompt; greedy gains 0.03125, 0.02637, 0.01648, 0.01563 give k = (2, 2)."""
  c = _config(**{"allocator": "knapsack", "prompts_per_step": 5, "group_size": 3,
                 "max_group_size": 32, "allocation.min_n": 2, "allocation.history_rollouts": 16})
  config_check.check(c)
  h = RolloutHistory()
  h.record(2, [10, 11, 12, 13, 14], [8, 16, 8, 8, 4], [4, 4, 0, 8, 1])
  counts = planner.StepAllocator(c).first(5, [10, 11, 12, 13, 14], h, np.random.default_rng(0))
  assert counts.tolist() == [4, 4, 2, 2, 3]


def test_knapsack_gives_a_hard_prompt_up_to_the_32_row_cap():
  """One hard-but-solvable prompt (1 right of its last 16 rows) among 15 solved ones (8 of 8
  right), 16 x 4 = 64 rows, min_n 2: every extra row goes to the hard prompt up to the 32-row cap
  (30 extra; its fallback cost log 0.1 / log(15/16) = 35.7 rows), the 2 left over to the first
  solved ones. With the whole history instead of the 16-row buffer, the hard prompt's older
  failures (16 of 16 wrong at step 0) make it p = 1/32. Unestimated prompts (< 8 rows) get the
  budget's mean."""
  ids = list(range(16))
  h = RolloutHistory()
  h.record(0, [0], [16], [0])
  h.record(7, ids, [16] + [8] * 15, [1] + [8] * 15)
  c = _config(**{"allocator": "knapsack", "prompts_per_step": 16, "group_size": 4,
                 "max_group_size": 32, "allocation.min_n": 2, "allocation.history_rollouts": 16})
  sa = planner.StepAllocator(c)
  counts = sa.first(9, ids, h, np.random.default_rng(0))
  assert counts[0] == 32 and counts.sum() == 64 and sorted(counts[1:].tolist()) == [2] * 13 + [3] * 2
  stats = planner.history_stats(h, [0], 9, history_rollouts=16)
  assert (stats.attempts[0], stats.successes[0]) == (16, 1)
  assert planner.history_stats(h, [0], 9).attempts[0] == 32
  h.record(8, [100], [4], [2])
  counts = sa.first(9, [100] + ids[1:], h, np.random.default_rng(0))
  assert counts[0] == 4  # 4 rows seen: no estimate (min_obs 8), the mean


def test_allocation_metrics():
  groups = [np.array([1.0, 0, 0, 1]), np.array([0.0, 0]), np.array([1.0] * 10),
            np.array([1.0, 0])]
  m = pool.allocation_metrics([4, 2, 10, 2], groups)
  assert (m["alloc/n_min"], m["alloc/n_max"]) == (2, 10)
  assert m["alloc/groups_n2"] == 2 and m["alloc/groups_n3_4"] == 1
  assert m["alloc/groups_n9_16"] == 1
  assert m["alloc/zero_var_share"] == pytest.approx(12 / 18)
  assert m["alloc/informative_groups"] == 2
  # squared-deviation masses 1.0 and 0.5: (1.5)^2 / (1 + 0.25) = 1.8
  assert m["alloc/effective_groups"] == pytest.approx(1.8)


def _fake_rewards(ids, counts, step):
  """Deterministic 'rollouts': prompt i succeeds with probability (i % 5) / 4."""
  rng = np.random.default_rng(1000 * step + 7)
  return [rng.random(n) < (i % 5) / 4 for i, n in zip(ids, counts)]


def _drive(config, steps, history=None):
  """Allocation of `steps` with a fake engine, recording every round in the history."""
  sa = planner.StepAllocator(config)
  history = history or RolloutHistory()
  trace = []
  for step in steps:
    rng = np.random.default_rng([0, step])
    cand = np.random.default_rng([1, step]).choice(40, sa.num_candidates, replace=False)
    counts = sa.first(step, cand, history, rng)
    ids, rows = cand[counts > 0], counts[counts > 0]
    r = _fake_rewards(ids, rows, step)
    history.record(step, ids, rows, [int(x.sum()) for x in r])
    if sa.probe:
      extra = sa.second(step, ids, history, rng)
      r2 = _fake_rewards(ids, extra, step + 500)
      history.record(step, ids, extra, [int(x.sum()) for x in r2])
      rows = rows + extra
    assert rows.sum() == sa.budget.total
    trace.append((ids.tolist(), rows.tolist()))
  return trace, history


@pytest.mark.parametrize("overrides", [
    {"allocator": "vade", "max_group_size": 4},
    {"allocator": "knapsack", "allocation.probe": 2, "allocation.min_n": 2,
     "max_group_size": 8, "allocation.knapsack.min_obs": 2},
    {"allocator": "xrpo", "group_size": 5, "max_group_size": 8},
])
def test_resumed_allocation_equals_uninterrupted(overrides):
  """The history checkpointed after step 3 (JSON) is all a resumed run needs: the resumed steps
  allocate exactly as the uninterrupted run (VADE's posteriors are replayed from it)."""
  c = _config(**overrides)
  config_check.check(c)
  full, _ = _drive(c, range(6))
  head, history = _drive(c, range(3))
  history = RolloutHistory.from_state(json.loads(json.dumps(history.state())))
  tail, _ = _drive(c, range(3, 6), history=history)
  assert head + tail == full
  assert len({tuple(r) for _, r in full}) > 1 or overrides["allocator"] == "vade"


def test_vade_replay_equals_online_updates():
  c = _config(allocator="vade")
  sa = planner.StepAllocator(c)
  h = RolloutHistory()
  h.record(0, [3, 4], [4, 4], [1, 4])
  h.record(1, [3], [2], [2])
  h.record(1, [3], [2], [1])  # a second round of step 1: summed with the first
  online = sa.allocator.observe(sa.allocator.init_state(), [3, 4], [4, 4], [1, 4], 0)
  online = sa.allocator.observe(online, [3], [4], [3], 1)
  assert planner.replay(sa.allocator, h, 2) == online
  assert planner.replay(sa.allocator, h, 1) == sa.allocator.observe(
      sa.allocator.init_state(), [3, 4], [4, 4], [1, 4], 0)


# ---------------------------------------------------------------- through the RL phase


def _ragged(config, **rl):
  config.rl.update(eval_every=0, **{k: v for k, v in rl.items() if "." not in k})
  for key, value in rl.items():
    if "." in key:
      *parents, leaf = key.split(".")
      node = config.rl
      for part in parents:
        node = node[part]
      node[leaf] = value
  config_check.check(config)
  return config


def test_probe_round_then_allocation(smoke_config, tmp_path):
  """Two-stage allocation with the real engine: 2 probe rows per prompt, then the rest of the
  budget (16 rows) by Knapsack; both rounds in the history; allocation metrics logged."""
  c = _ragged(smoke_config, allocator="knapsack", max_group_size=8,
              **{"allocation.probe": 2, "allocation.min_n": 2, "allocation.knapsack.min_obs": 2})
  exp = experiment.build(c, str(tmp_path))
  history = RolloutHistory()
  batch, _, metrics = collect.rollout(StepContext(exp, phases.init_params(exp), 0, history=history))
  valid, group = np.asarray(batch.valid), np.asarray(batch.group)
  counts = np.bincount(group[valid], minlength=4)
  assert counts.sum() == 16 and (counts >= 2).all() and (counts <= 8).all()
  assert metrics["gen_rounds"] == 2 and metrics["rollout_tokens"] == int(batch.mask.sum())
  rec = history.records()
  assert rec["attempts"][:4].tolist() == [2, 2, 2, 2] and rec["attempts"].sum() == 16
  assert metrics["alloc/n_min"] == counts.min() and metrics["alloc/n_max"] == counts.max()
  assert 0.0 <= metrics["alloc/zero_var_share"] <= 1.0


def test_dynamic_sampling_with_an_allocator(smoke_config, tmp_path):
  """DAPO's dynamic sampling keeps B groups of several allocator rounds (R_max = B x G_max)."""
  c = _ragged(smoke_config, allocator="xrpo", max_group_size=6, rows=24, dynamic_sampling=True,
              max_gen_rounds=2)
  exp = experiment.build(c, str(tmp_path))
  batch, _, metrics = collect.rollout(StepContext(exp, phases.init_params(exp), 0,
                                       history=RolloutHistory()))
  assert batch.tokens.shape[0] == 24 and metrics["gen_rounds"] in (1, 2)
  assert np.bincount(np.asarray(batch.group)[np.asarray(batch.valid)], minlength=4).max() <= 6


def test_rl_phase_resumed_allocates_as_uninterrupted(smoke_config_factory, tmp_path):
  """VADE on a 12-problem pool (prompts repeat): the RL phase interrupted after step 2 and
  resumed logs the same step 3 (allocation included) as the uninterrupted phase."""
  def run(workdir, interrupt=""):
    c = _ragged(smoke_config_factory(), allocator="vade", max_group_size=8, prompt_pool=12,
                steps=3, **{"allocation.candidates": 8})
    c.interrupt_at = interrupt
    exp = experiment.build(c, str(workdir))
    params = phases.init_params(exp)
    with MetricsWriter(workdir) as writer:
      phases.rl(exp, params, writer)

  run(tmp_path / "a")
  with pytest.raises(phases.Interrupted):
    run(tmp_path / "b", "rl:2")
  run(tmp_path / "b")
  timing = ("time", "step_seconds")
  recs = {d: {r["step"]: {k: v for k, v in r.items() if k not in timing}
              for r in read_metrics(tmp_path / d) if r["phase"] == "rl"} for d in "ab"}
  assert recs["a"][3] == recs["b"][3]
  assert "alloc/effective_groups" in recs["a"][3]
  h = [RolloutHistory.from_jsonl(tmp_path / d / workdir.HISTORY_FILE) for d in "ab"]
  assert h[0] == h[1] and len(set(h[0].records()["prompt_id"].tolist())) <= 12


def test_allocation_sweep_applies_to_the_ladder_config():
  from experiments.sweeps import allocation as sweep  # pylint: disable=import-outside-toplevel
  runs = sweep.get_sweep()
  assert len(runs) == len(sweep.VARIANTS) * 3
  for run in runs:
    c = ladder.get_config()
    c.update_from_flattened_dict({k: v for k, v in run.items() if k != "name"})
    config_check.check(c)  # A mistyped key raises above, a bad value here.
    budget = planner.budget_from_config(c)
    assert budget.total <= 32 * 8 and budget.total == 32 * c.rl.group_size


def test_v0_allocator_reads_the_prior_predictions(smoke_config, tmp_path):
  """allocator='v0' gets p_hat from config.rl.allocator_prior through PromptStats.predictions
  (without them it raises); equal predictions give equal rows."""
  c = _ragged(smoke_config, allocator="v0", max_group_size=8, allocator_prior="history",
              **{"allocation.min_n": 2})
  exp = experiment.build(c, str(tmp_path))
  history = RolloutHistory()
  history.record(0, np.arange(300), np.full(300, 4), np.full(300, 2))  # p_hat = 0.5 for all
  batch, _, metrics = collect.rollout(StepContext(exp, phases.init_params(exp), 1, history=history))
  counts = np.bincount(np.asarray(batch.group)[np.asarray(batch.valid)], minlength=4)
  assert counts.tolist() == [4, 4, 4, 4] and metrics["alloc/n_max"] == 4


def test_prompt_pool_is_a_fixed_random_subset(smoke_config_factory):
  """The pool is N distinct train indices from the task seed: the same for every training seed,
  spread over the list (not its first N, which the ladder fills with 2-term chains)."""
  c = smoke_config_factory()
  assert planner.prompt_pool(c, 5000) is None  # 0: every train problem.
  c.rl.prompt_pool, c.task.seed = 1000, 0
  ids = planner.prompt_pool(c, 30000)
  assert len(set(ids.tolist())) == 1000 and ids.min() >= 0 and ids.max() < 30000
  assert (np.diff(ids) > 0).all() and ids.max() > 25000 and ids.min() < 5000
  c.seed = 2
  np.testing.assert_array_equal(planner.prompt_pool(c, 30000), ids)
  c.task.seed = 1
  assert not np.array_equal(planner.prompt_pool(c, 30000), ids)
