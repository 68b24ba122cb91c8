"""V0.5 (docs/algorithms.md §4.2, reconstructed): the test, both fusion forms with §4.2's numbers,
the estimator, the simple priors, and the extra-round control flow on a fake engine."""

from __future__ import annotations

import types

import numpy as np
import pytest

from rl_jax import experiment, workdir
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.rl import advantages
from rl_jax.rl.advantages import v05
from rl_jax.rollout import checks, collect, engines
from rl_jax.rollout import requests as requests_lib
from rl_jax.rollout.requests import StepContext
from rl_jax.train import config_check, phases
from rl_jax.train import hyper as hyper_lib
from rl_jax.types import Rollout
from rl_jax.value import priors
from rl_jax.value.history import RolloutHistory


def test_reliability_test_worked_numbers():
  """p0=0.5, n=4: k=4 -> z=2.0 > 1.96, reject; k=3 -> z=1.0, accept."""
  np.testing.assert_allclose(v05.z_statistic([4, 3], 4, 0.5), [2.0, 1.0])
  np.testing.assert_array_equal(v05.reject([4, 3], 4, 0.5), [True, False])
  assert v05.critical_z(0.05) == pytest.approx(1.959964, abs=1e-6)
  # p0 = 0 is clipped to 0.02: z stays finite; 1 success of 4 rejects it.
  assert np.isfinite(v05.z_statistic(0, 4, 0.0)) and v05.reject(1, 4, 0.0)
  # Exact binomial tail: 4 of 4 at p0=0.5 has P(|K-2| >= 2) = 2/16 > 0.05 (accepted at n=4);
  # 16 of 16 has 2/2^16 (rejected).
  np.testing.assert_allclose(v05.binomial_tail([4, 16], [4, 16], 0.5), [0.125, 2 / 2 ** 16])
  np.testing.assert_array_equal(v05.reject([4, 16], [4, 16], 0.5, test="binomial"),
                                [False, True])
  with pytest.raises(ValueError, match="config.rl.v05.test='t'"):
    v05.reject(1, 4, 0.5, test="t")
  with pytest.raises(ValueError, match="config.rl.v05.alpha=0"):
    v05.critical_z(0.0)


def test_fusion_worked_numbers():
  """p0=0.5, n=4, k=3, sigma0^2=0.01: Var=0.0625, w=0.8621, b=0.5345; Beta: κ=24, w=0.8571,
  b=0.5357."""
  w = v05.fusion_weight(0.5, 0.01, 4, form="variance")
  assert w == pytest.approx(0.0625 / 0.0725) and round(float(w), 4) == 0.8621
  assert round(float(v05.fused_baseline(0.5, 0.75, w)), 4) == 0.5345
  wb = v05.fusion_weight(0.5, 0.01, 4, form="beta")
  assert wb == pytest.approx(24 / 28) and round(float(wb), 4) == 0.8571
  assert round(float(v05.fused_baseline(0.5, 0.75, wb)), 4) == 0.5357
  with pytest.raises(ValueError, match="config.rl.v05.fusion='mean'"):
    v05.fusion_weight(0.5, 0.01, 4, form="mean")
  assert [v05.next_size(n, 16) for n in (4, 8, 12, 16)] == [8, 16, 16, 16]


def test_v05_estimator():
  r = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], np.float32)
  valid = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
  w = float(v05.fusion_weight(0.5, 0.01, 4))
  prior = np.zeros((2, 4, 2), np.float32)
  prior[0, :] = (0.5, w)  # Group 0 accepted: b = 0.5345.
  prior[1, :] = (0.9, 0.0)  # Group 1 rejected: b = r̄ = 0.5 over its 2 valid rows.
  adv, weight = advantages.get("v05")(r, valid, prior=prior)
  np.testing.assert_allclose(adv[0], r[0] - 0.53448, atol=1e-4)
  np.testing.assert_allclose(adv[1], [0.5, -0.5, 0, 0], atol=1e-6)
  np.testing.assert_array_equal(weight, valid)
  scaled, _ = advantages.get("v05")(r, valid, prior=prior, scale_by_std=True)
  np.testing.assert_allclose(scaled[0], (r[0] - 0.53448) / (0.5 + 1e-6), atol=1e-4)
  # A group of equal rewards keeps A = r - b unscaled (std 0 would divide b - r̄ by eps).
  same, _ = advantages.get("v05")(np.zeros((1, 4), np.float32), np.ones((1, 4), bool),
                                  prior=prior[:1], scale_by_std=True)
  np.testing.assert_allclose(same, np.full((1, 4), -0.5 * w), atol=1e-6)


def test_simple_priors():
  h = RolloutHistory()
  h.record(0, [1, 2], [4, 4], [4, 0])
  h.record(1, [1, 3], [4, 4], [2, 2])
  # Global: 8 of 16 -> (8+1)/(16+2) = 0.5; per-prompt rates 6/8, 0/4, 2/4 -> var minus noise.
  m, v = priors.global_stats(h)
  rates = np.array([0.75, 0.0, 0.5])
  noise = np.mean(rates * (1 - rates) / np.array([7, 3, 3]))
  assert m == 0.5 and v == pytest.approx(np.var(rates) - noise)
  p0, s2 = priors.GlobalMean(h).predict(None, [1, 9])
  np.testing.assert_allclose(p0, [0.5, 0.5]) and np.testing.assert_allclose(s2, [v, v])
  p0, s2 = priors.PromptHistory(h, pseudo_count=2.0).predict(None, [1, 9])
  assert p0[0] == pytest.approx((6 + 2 * 0.5) / (8 + 2)) and p0[1] == 0.5
  assert s2[1] == pytest.approx(v) and 0 < s2[0] < v
  # window=1: only step 1 counts (prompt 1: 2 of 4).
  p0, _ = priors.PromptHistory(h, window=1).predict(None, [1])
  assert p0[0] == pytest.approx((2 + 2 * 0.5) / (4 + 2))
  with pytest.raises(ValueError, match="unknown prior 'nope'"):
    priors.make("nope", None, h)


class _FixedPrior:
  def __init__(self, p0, s2):
    self.p0, self.s2 = p0, s2

  def predict(self, params, ids):
    del params
    return np.full(len(ids), self.p0), np.full(len(ids), self.s2)


def _rows(group, valid, rewards, prompt_ids=None):
  """A stubbed round (`engines.Round`) of rows `group` / `valid` with scalar `rewards`."""
  n = len(group)
  return engines.Round(Rollout(
      prompt_tokens=np.ones((n, 2), np.int32), prompt_mask=np.ones((n, 2), bool),
      tokens=np.zeros((n, 3), np.int32), mask=np.ones((n, 3), bool),
      logp=np.zeros((n, 3), np.float32), group=np.asarray(group, np.int32),
      valid=np.asarray(valid, bool)), np.asarray(rewards, np.float32)[:, None], {}, prompt_ids)


def _fixed_prior(monkeypatch, p0, s2):
  """V0.5's prior (`priors.make`) replaced by `_FixedPrior(p0, s2)`."""
  monkeypatch.setattr(priors, "make", lambda *a, **k: _FixedPrior(p0, s2))


@pytest.fixture
def v05_config(smoke_config):
  smoke_config.rl.update(prompts_per_step=2, group_size=4, max_group_size=16, rows=24,
                         advantage="v05")
  smoke_config.rl.v05.sigma0_sq = 0.01
  return smoke_config


def test_extra_rounds_on_a_fake_engine(v05_config, monkeypatch):
  """Slot 0 always succeeds: it rejects p0=0.5 at n=4 and n=8 (4, then 8 more rows) and stops at
  n_max=16 with w=0; slot 1 has 3 of 4 (accepted: w=0.8621)."""
  g, v = requests_lib.layout(np.array([4, 4]), 8)
  draw = lambda ctx, k: _rows(g, v, [1, 1, 1, 1, 1, 1, 1, 0], np.array([10, 11]))
  asked = []

  def extend(ctx, k, req):
    asked.append((k, req.prompt_ids.tolist(), req.counts.tolist(), req.slots.tolist()))
    g2, v2 = requests_lib.layout(req.counts, req.total)
    return _rows(g2, v2, np.ones(req.total))

  history = RolloutHistory()
  _fixed_prior(monkeypatch, 0.5, 0.01)
  ctx = StepContext(types.SimpleNamespace(config=v05_config), None, 3, history=history)
  batch, rewards, metrics = collect.rollout(ctx, draw, extend)
  # Round 1: slot 0 doubled (4 rows); round 2: slot 0 at 8 of 8 still rejected -> 8 more (24
  # rows in all, the batch's R_max); then n = 16 = n_max.
  assert asked == [(1, [10], [4], [0]), (2, [10], [8], [0])]
  assert metrics["gen_rounds"] == 3 and metrics["v05/extra_rows"] == 12
  np.testing.assert_array_equal(batch.group, [0] * 16 + [1] * 4 + [2] * 4)
  assert batch.valid[:20].all() and not batch.valid[20:].any()
  np.testing.assert_allclose(batch.prior[:16], np.tile([[0.5, 0.0]], (16, 1)))
  np.testing.assert_allclose(batch.prior[16:20, 1], 0.0625 / 0.0725, rtol=1e-6)
  assert metrics["v05/rejected_frac"] == 0.5 and metrics["v05/rejected_final_frac"] == 0.5
  assert history.stats([10, 11])[0].tolist() == [16, 4]
  assert rewards.shape == (24, 1)


def test_extra_rounds_stop_when_the_batch_is_full(v05_config, monkeypatch):
  v05_config.rl.rows = 12  # Room for one doubling of slot 0 (4 rows), not the next (8 rows).
  g, v = requests_lib.layout(np.array([4, 4]), 8)
  draw = lambda ctx, k: _rows(g, v, [1, 1, 1, 1, 1, 1, 1, 0], np.array([10, 11]))
  extend = lambda ctx, k, req: _rows(*requests_lib.layout(req.counts, req.total),
                                     np.ones(req.total))
  _fixed_prior(monkeypatch, 0.5, 0.01)
  batch, _, metrics = collect.rollout(
      StepContext(types.SimpleNamespace(config=v05_config), None), draw, extend)
  assert metrics["gen_rounds"] == 2 and metrics["v05/short"] == 1
  assert metrics["v05/group_size_mean"] == 6.0 and batch.valid.all()


def test_v05_options_reach_the_estimator(smoke_config):
  smoke_config.rl.advantage = "v05"
  smoke_config.rl.v05.update(scale_by_std=True, std_eps=1e-4)
  opts = dict(hyper_lib.hyper_from_config(smoke_config).advantage_options)
  assert opts == {"scale_by_std": True, "eps": 1e-4}


def test_v05_config_errors(smoke_config):
  smoke_config.rl.advantage = "v05"
  with pytest.raises(ValueError, match="v05.n_max <= max_group_size"):
    checks.check_config(smoke_config)
  smoke_config.rl.update(max_group_size=16)
  smoke_config.rl.v05.prior = "bogus"
  with pytest.raises(ValueError, match="config.rl.v05.prior='bogus'"):
    config_check.check(smoke_config)


# XLA optimizations off: compiling the smoke RL phase is most of its time; the metrics' presence
# and finiteness checked here do not depend on it.
@pytest.mark.usefixtures("fast_compiles")
def test_rl_phase_with_v05(smoke_config, tmp_path):
  """`--config.rl.advantage=v05 --config.rl.group_size=4` through the real engine and RL phase."""
  smoke_config.rl.update(steps=2, eval_every=0, advantage="v05", group_size=4,
                         max_group_size=16, rows=32)
  smoke_config.rl.v05.prior = "history"
  exp = experiment.build(smoke_config, str(tmp_path))
  params = phases.init_params(exp)
  with MetricsWriter(tmp_path) as writer:
    phases.rl(exp, params, writer)
  records = [r for r in read_metrics(tmp_path) if r["phase"] == "rl"]
  assert [r["step"] for r in records] == [1, 2]
  for r in records:
    assert {"v05/rejected_frac", "v05/w_mean", "v05/extra_rows", "rollout_tokens"} <= set(r)
    assert all(np.isfinite(v) for v in r.values() if isinstance(v, float))
  saved = RolloutHistory.from_jsonl(tmp_path / workdir.HISTORY_FILE)
  assert saved.records()["attempts"].sum() >= 2 * 4 * 4
