"""The 'oracle' prior (`value.priors.OracleMC`): Monte Carlo success rates of the current policy,
whose samples are reported apart from the rollouts (`oracle/mc_tokens`)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rl_jax import experiment, sampling, seeds
from rl_jax.data.batching import decode_completions
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.rewards.contained import ScoreStats
from rl_jax.rollout import collect
from rl_jax.rollout.requests import StepContext
from rl_jax.train import companions, config_check, phases
from rl_jax.value import priors
from rl_jax.value.history import RolloutHistory


class _OddLength:
  """A reward the random tiny policy earns at a rate in (0, 1) that differs per prompt: the
  completion's text has an odd number of characters."""

  def score_components(self, texts, examples, rewards):
    del examples
    r = np.array([[float(len(t) % 2)] for t in texts], np.float32)
    return np.repeat(r, len(rewards), 1), ScoreStats()

  def close(self):
    pass


def _exp(config, workdir):
  config_check.check(config)
  exp = experiment.build(config, str(workdir))
  exp.__dict__["reward_scorer"] = _OddLength()  # the cached property, replaced
  return exp


@pytest.fixture(scope="module")
def built(tmp_path_factory, smoke_config_factory):
  c = smoke_config_factory()
  c.sampling.max_new_tokens = 6
  c.value.oracle.mc_samples = 64
  c.rl.prompts_per_step = 8
  exp = _exp(c, tmp_path_factory.mktemp("oracle"))
  return exp, phases.init_params(exp)


def _direct(exp, params, ids, n, key):
  """Success rates of `n` samples per prompt, drawn directly with `sampling.generate`."""
  out = sampling.generate(params, exp.train_prompts[ids], exp.train_prompt_mask[ids], key,
                          num_samples=n, **exp.sampler_kwargs())
  texts = decode_completions(exp.tokenizer, out.tokens, out.mask)
  r, _ = exp.reward_scorer.score_components(texts, [None] * len(texts), ("task_score",))
  return (r[:, 0] > 0.5).reshape(len(ids), n).mean(1), int(np.asarray(out.mask).sum())


def test_estimate_is_the_monte_carlo_rate_of_the_policy(built):
  exp, params = built
  ids = np.arange(8)
  mc = priors.OracleMC(exp, step=3)
  p0, s2 = mc.predict(params, ids)
  # Exactly the documented draw: chunk 0 of call 0 of step 3.
  key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(
      exp.root_key(), seeds.ORACLE_MC), 3), 0), 0)
  same, tokens = _direct(exp, params, ids, 64, key)
  np.testing.assert_allclose(p0, same)
  smooth = (p0 * 64 + 1) / 66
  np.testing.assert_allclose(s2, smooth * (1 - smooth) / 64)
  assert mc.take_counts() == {"oracle/mc_tokens": tokens, "oracle/mc_rows": 8 * 64}
  assert mc.take_counts() == {"oracle/mc_tokens": 0, "oracle/mc_rows": 0}
  # Against an independent estimate from 512 other samples: within 4 standard errors.
  rate, _ = _direct(exp, params, ids, 512, jax.random.key(99))
  assert 0.1 < rate.mean() < 0.9 and np.ptp(rate) > 0.05  # rates that can be told apart
  se = np.sqrt(rate * (1 - rate) / 64 + rate * (1 - rate) / 512)
  assert (np.abs(p0 - rate) < 4 * se + 1e-9).all(), (p0, rate)
  # A second call of the step draws new samples; a new step restarts the call count.
  again, _ = mc.predict(params, ids)
  assert not np.array_equal(again, p0)
  mc.start_step(3)
  np.testing.assert_array_equal(mc.predict(params, ids)[0], p0)


def test_chunks_pad_to_one_shape(built):
  exp, params = built
  mc = priors.OracleMC(exp)
  p0, _ = mc.predict(params, np.arange(11))  # chunks of 8: 8 + 3 (padded)
  assert p0.shape == (11,) and mc.take_counts()["oracle/mc_rows"] == 11 * 64


def test_the_prior_needs_its_companion(built):
  exp, _ = built
  with pytest.raises(ValueError, match="the 'oracle' prior needs its run companion"):
    priors.make("oracle", exp, RolloutHistory(), {})
  mc = priors.OracleMC(exp)
  assert priors.make("oracle", exp, RolloutHistory(), {"oracle": mc}) is mc


def _ragged(config, **rl):
  config.rl.update(eval_every=0, max_group_size=8, allocator="knapsack", allocator_prior="oracle",
                   **rl)
  config.rl.allocation.min_n = 2
  config.value.oracle.mc_samples = 4
  return config


def test_oracle_samples_are_not_rollout_tokens(smoke_config, tmp_path):
  """Knapsack reads the oracle's p_hat; the batch's rollout_tokens are the engine's alone and
  the oracle's samples are counted apart."""
  exp = _exp(_ragged(smoke_config), tmp_path)
  mc = priors.OracleMC(exp)
  batch, _, metrics = collect.rollout(StepContext(exp, phases.init_params(exp), 0,
                                                  history=RolloutHistory(),
                                                  companions={"oracle": mc}))
  counts = mc.take_counts()
  assert counts["oracle/mc_rows"] == 4 * 4 and counts["oracle/mc_tokens"] > 0
  assert metrics["rollout_tokens"] == int(np.asarray(batch.mask).sum())
  assert "oracle/mc_tokens" not in metrics


def test_rl_phase_logs_oracle_tokens_and_resumes(smoke_config_factory, tmp_path):
  """Through the RL phase: the companion 'oracle' is built for the config, its samples logged
  per step as oracle/mc_tokens beside (not inside) rollout_tokens; an interrupted and resumed
  phase logs the same step 2 as the uninterrupted one."""
  def run(workdir, interrupt=""):
    c = _ragged(smoke_config_factory(), steps=2)
    c.interrupt_at = interrupt
    exp = _exp(c, workdir)
    with MetricsWriter(workdir) as writer:
      phases.rl(exp, phases.init_params(exp), writer)

  run(tmp_path / "a")
  with pytest.raises(phases.Interrupted):
    run(tmp_path / "b", "rl:1")
  run(tmp_path / "b")
  drop = ("time", "step_seconds")
  recs = {d: {r["step"]: {k: v for k, v in r.items() if k not in drop}
              for r in read_metrics(tmp_path / d) if r["phase"] == "rl"} for d in "ab"}
  assert recs["a"][2] == recs["b"][2]
  for r in recs["a"].values():
    assert r["oracle/mc_rows"] == 4 * 4 and r["oracle/mc_tokens"] > 0
    assert r["rollout_tokens"] == r["batch_tokens"]
  assert "oracle" not in companions.build(_exp(smoke_config_factory(), tmp_path / "c"), None,
                                          0, {})
