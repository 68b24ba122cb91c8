"""MinPRO's options through the config (config -> RLHyper -> loss), and its weight against the
rollout's log-probs where rows are off policy (APRIL); docs/algorithms.md §2.4."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from rl_jax.rl import logprobs, losses
from rl_jax.train import config_check
from rl_jax.train import hyper as hyper_lib
from test_steps import CFG, REWARDS, _inputs, _step  # tests/train/test_steps.py

pytestmark = pytest.mark.usefixtures("fast_compiles")

# §2.4's worked ratios ρ = [1, 0.5, 2, 1] (exclusive prefix minima w = [1, 1, 0.5, 0.5]), and a
# second row ρ = [2, 3, 0.5, 1] whose prefix minima exceed 1, so that `cap` matters.
RHO = np.array([[1.0, 0.5, 2.0, 1.0], [2.0, 3.0, 0.5, 1.0]], np.float32)
# PPO's token loss for A = +1, clip 0.2: -min(ρ, clip(ρ, 0.8, 1.2)).
PPO = np.array([[-1.0, -0.5, -1.2, -1.0], [-1.2, -1.2, -0.5, -1.0]], np.float32)
WEIGHTS = {  # (inclusive, cap) -> w by hand.
    (False, True): [[1, 1, 0.5, 0.5], [1, 1, 1, 0.5]],
    (True, True): [[1, 0.5, 0.5, 0.5], [1, 1, 0.5, 0.5]],
    (False, False): [[1, 1, 0.5, 0.5], [1, 2, 2, 0.5]],
    (True, False): [[1, 0.5, 0.5, 0.5], [2, 2, 0.5, 0.5]],
}


def _config(smoke_config_factory, **minpro):
  config = smoke_config_factory()
  config.rl.loss = "minpro_reconstructed"
  config.rl.minpro.update(minpro)
  config_check.check(config)
  return config


@pytest.mark.parametrize("inclusive, cap", list(WEIGHTS))
def test_worked_numbers_through_the_config(smoke_config_factory, inclusive, cap):
  hyper = hyper_lib.hyper_from_config(_config(smoke_config_factory, inclusive=inclusive, cap=cap))
  assert dict(hyper.loss_options) == {"inclusive": inclusive, "cap": cap}
  assert not hyper.loss_behav_logp  # On-policy rows: the PPO ratio's old log-probs.
  mask = np.ones(RHO.shape, bool)
  loss, metrics = losses.policy_loss(
      np.log(RHO), np.zeros_like(RHO), np.ones(2, np.float32), mask, kind=hyper.loss,
      clip_low=hyper.clip_low, clip_high=hyper.clip_high, clip_ratio_c=hyper.clip_ratio_c,
      **dict(hyper.loss_options))
  w = np.asarray(WEIGHTS[(inclusive, cap)], np.float32)
  np.testing.assert_allclose(loss, w * PPO, rtol=1e-5)
  np.testing.assert_allclose(metrics["minpro_weight"], w.mean(), rtol=1e-5)


def test_other_losses_take_no_options(smoke_config_factory):
  hyper = hyper_lib.hyper_from_config(smoke_config_factory())
  assert (hyper.loss, hyper.loss_options, hyper.loss_behav_logp) == ("ppo", (), False)


def test_a_bad_option_is_one_error_naming_the_field(smoke_config_factory):
  config = smoke_config_factory()
  config.rl.minpro.behav_logp = "sampler"
  with pytest.raises(config_check.ConfigError) as e:
    config_check.check(config)
  assert str(e.value) == ("config.rl.minpro.behav_logp='sampler': expected one of "
                          "['auto', 'rollout', 'old']")


def _april_hyper(smoke_config_factory, behav_logp):
  config = _config(smoke_config_factory, behav_logp=behav_logp)
  # test_steps' rows each have their own prompt: no shared-prompt passes.
  config.rl.update(tis_cap=2.0, kl_coef=0.0, sft_coef=0.0, shared_prompts=False)
  config.rl.partial.enabled = True
  config_check.check(config)
  return hyper_lib.hyper_from_config(config)


def test_april_rows_weight_against_the_rollout_logprobs(smoke_config_factory):
  """APRIL: the PPO ratio is taken against the trainer's recomputed log-probs (tis_cap > 0), the
  MinPRO weight against the sampler's (`Rollout.logp`). Where the two differ (noise 0.3 stands
  for tokens an earlier policy generated) the update differs from weighting against old_logp;
  where they are equal (noise 0) it is the same update."""
  auto = _april_hyper(smoke_config_factory, "auto")
  old = _april_hyper(smoke_config_factory, "old")
  assert auto.loss_behav_logp and not old.loss_behav_logp
  assert auto.loss_options == old.loss_options
  assert _april_hyper(smoke_config_factory, "rollout") == auto
  params, ref, stale = _inputs(noise=0.3)
  state_a, metrics_a = _step(auto, params, ref, stale)
  state_o, metrics_o = _step(old, params, ref, stale)
  policy = jax.jit(functools.partial(logprobs.completion_logprobs, CFG))(
      params, stale.prompt_tokens, stale.prompt_mask, stale.tokens, stale.mask)
  w = losses.minpro_weight(policy, stale.logp, stale.mask)
  np.testing.assert_allclose(metrics_a["minpro_weight"], np.mean(w[stale.mask]), rtol=1e-5)
  assert float(metrics_a["minpro_weight"]) < 0.95
  # Against old_logp the ratio is 1 on the first update: w = 1.
  np.testing.assert_allclose(metrics_o["minpro_weight"], 1.0, rtol=1e-6)
  assert not np.allclose(metrics_a["loss"], metrics_o["loss"], atol=1e-4)

  _, ref, fresh = _inputs(noise=0.0)
  state_a, metrics_a = _step(auto, params, ref, fresh, REWARDS)
  state_o, metrics_o = _step(old, params, ref, fresh, REWARDS)
  np.testing.assert_allclose(metrics_a["minpro_weight"], 1.0, rtol=1e-5)
  np.testing.assert_allclose(metrics_a["loss"], metrics_o["loss"], atol=1e-5)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                         state_a.params, state_o.params)
