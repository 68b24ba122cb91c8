"""The RL update: micro-batching, several iterations per rollout, TIS, multi-reward, KL in reward.

Updates use plain SGD so `(params_before - params_after) / LR` *is* the gradient, and two
updates compare without Adam's normalization amplifying float noise. Every test shares one
learning rate (the optimizer is a static part of the jitted step) and XLA optimizations are off
here: these tests compare programs, and compilation dominates their time.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_jax import models
from rl_jax.rl import logprobs, losses
from rl_jax.rl.advantages import group
from rl_jax.train import config_check, rl_inputs
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState
from rl_jax.types import Rollout
from padded_tokens import padded_tokens  # tests/padded_tokens.py

CFG = models.ModelConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32,
                         max_seq_len=16)
B, G, P, T = 4, 4, 4, 4
R = B * G
REWARDS = np.array([1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0], np.float32)
ATOL = 1e-5
LR = 20.0  # Large enough that a second update on the same rollout gets clipped.


pytestmark = pytest.mark.usefixtures("fast_compiles")  # These tests compare programs.


def _padded(rng, length, left):
  return padded_tokens(rng, R, length, CFG.vocab_size, left)


@functools.cache
def _inputs(noise: float = 0.0):
  """params, a reference that differs from them, and a rollout whose behaviour log-probs are the
  policy's own plus `noise` (so with noise=0 the first update has ratio 1)."""
  rng = np.random.default_rng(0)
  params = jax.device_get(jax.jit(models.init_params, static_argnums=0)(CFG, jax.random.key(0)))
  policy_logp = jax.jit(functools.partial(logprobs.completion_logprobs, CFG))
  ref = jax.tree_util.tree_map(
      lambda x: x + 0.05 * rng.standard_normal(x.shape).astype(x.dtype), params)
  prompt, prompt_mask = _padded(rng, P, left=True)
  tokens, mask = _padded(rng, T, left=False)
  logp = np.asarray(policy_logp(params, prompt, prompt_mask, tokens, mask))
  logp = np.where(mask, logp + noise * rng.standard_normal(logp.shape), 0.0).astype(np.float32)
  batch = Rollout(prompt_tokens=prompt, prompt_mask=prompt_mask, tokens=tokens, mask=mask,
                  logp=logp, group=np.repeat(np.arange(B), G).astype(np.int32),
                  valid=np.ones(R, bool))
  return params, ref, batch


@functools.cache
def _step_fn(hyper: steps_lib.RLHyper):
  return jax.jit(functools.partial(steps_lib.rl_step, model_cfg=CFG, hyper=hyper))


_SGD = optax.sgd(LR)


def _step(hyper, params, ref, batch, rewards=REWARDS):
  return _step_fn(hyper)(TrainState.create(params, _SGD), ref, batch, rewards)


def _assert_trees_close(a, b, atol=ATOL):
  chex.assert_trees_all_close(a, b, atol=atol, rtol=1e-7)  # Same structure, every leaf close.


@pytest.mark.parametrize("num_micro, options", [
    pytest.param(2, dict(kl_coef=0.1, kl_kind="k3", sft_coef=0.5, tis_cap=1.5),
                 id="grpo-kl-sft-tis-2"),
    pytest.param(4, dict(advantage="reinforce_pp", aggregation="seq-mean-token-mean",
                         kl_coef=0.1, kl_in_reward=True), id="reinforce_pp-seqmean-klreward-4"),
])
def test_micro_batches_give_the_full_batch_update(num_micro, options):
  params, ref, batch = _inputs(noise=0.3)
  batch = batch.replace(valid=np.arange(R) // G != 1)  # An invalid group leaves every normalizer.
  state1, metrics1 = _step(steps_lib.RLHyper(group_size=G, **options), params, ref, batch)
  state_m, metrics_m = _step(steps_lib.RLHyper(group_size=G, num_minibatches=num_micro,
                                               **options), params, ref, batch)
  assert float(metrics1["grad_norm"]) > 0
  _assert_trees_close(jax.tree_util.tree_map(lambda x: x / LR, state_m.params),
                      jax.tree_util.tree_map(lambda x: x / LR, state1.params))
  assert set(metrics_m) == set(metrics1)
  for k in metrics1:
    np.testing.assert_allclose(metrics_m[k], metrics1[k], atol=ATOL, err_msg=k)


def test_one_iteration_is_the_plain_policy_gradient():
  """num_iterations=1: one update with the gradient of token-mean(PPO(logp, logp_behav, A))."""
  params, ref, batch = _inputs(noise=0.3)
  state, metrics = _step(steps_lib.RLHyper(group_size=G), params, ref, batch)

  adv, _ = group.grpo(REWARDS.reshape(B, G), np.ones((B, G), bool))

  def loss(p):
    logp = logprobs.completion_logprobs(CFG, p, batch.prompt_tokens, batch.prompt_mask,
                                        batch.tokens, batch.mask)
    tok, _ = losses.policy_loss(logp, batch.logp, adv.reshape(-1), batch.mask)
    return losses.aggregate(tok, batch.mask, "token-mean")

  want_loss, grads = jax.jit(jax.value_and_grad(loss))(params)
  assert int(state.step) == 1
  np.testing.assert_allclose(metrics["loss"], want_loss, atol=ATOL)
  _assert_trees_close(jax.tree_util.tree_map(lambda a, b: (a - b) / LR, params, state.params),
                      grads)


def test_iterations_reuse_the_behaviour_logprobs_and_clip():
  """Two iterations == two single-iteration steps on the same rollout (old_logp is not
  refreshed), and the second update sees ratios != 1 that get clipped."""
  params, ref, batch = _inputs(noise=0.0)
  one = steps_lib.RLHyper(group_size=G)
  state_a, metrics_a = _step(one, params, ref, batch)
  state_b, metrics_b = _step(one, state_a.params, ref, batch)
  state_2, metrics_2 = _step(steps_lib.RLHyper(group_size=G, num_iterations=2), params, ref,
                             batch)
  assert int(state_2.step) == 2
  _assert_trees_close(state_2.params, state_b.params, atol=1e-4)
  np.testing.assert_allclose(float(metrics_a["clipfrac"]), 0.0)  # Ratio 1: nothing clipped.
  assert float(metrics_b["clipfrac"]) > 0
  np.testing.assert_allclose(metrics_2["clipfrac"],
                             (metrics_a["clipfrac"] + metrics_b["clipfrac"]) / 2, atol=ATOL)
  assert abs(float(metrics_2["ppo_kl"])) > 0


def test_scalar_estimator_sums_weighted_reward_components():
  params, ref, batch = _inputs(noise=0.3)
  fmt = np.tile(np.array([1, 1, 0, 1], np.float32), B)
  weights = (1.0, 0.5)
  state_k, metrics_k = _step(steps_lib.RLHyper(group_size=G, reward_weights=weights), params,
                             ref, batch, np.stack([REWARDS, fmt], 1))
  state_1, metrics_1 = _step(steps_lib.RLHyper(group_size=G), params, ref, batch,
                             REWARDS + 0.5 * fmt)
  _assert_trees_close(state_k.params, state_1.params)
  np.testing.assert_allclose(metrics_k["reward_mean"], metrics_1["reward_mean"], atol=ATOL)


def test_gdpo_gets_the_reward_components():
  params, ref, batch = _inputs(noise=0.3)
  fmt = np.tile(np.array([1, 1, 0, 1], np.float32), B)
  rewards = np.stack([REWARDS, fmt], 1)
  hyper = steps_lib.RLHyper(group_size=G, advantage="gdpo", reward_weights=(1.0, 0.5))
  state, metrics = _step(hyper, params, ref, batch, rewards)
  want, _ = group.gdpo(rewards.reshape(B, G, 2), np.ones((B, G), bool), weights=(1.0, 0.5))
  np.testing.assert_allclose(metrics["adv_abs_mean"], np.abs(want).mean(), atol=ATOL)
  assert float(metrics["grad_norm"]) > 0
  assert all(np.isfinite(float(v)) for v in metrics.values())
  with pytest.raises(ValueError, match="kl_in_reward is not defined"):
    rl_inputs.advantages(rewards, batch, steps_lib.RLHyper(
        group_size=G, advantage="gdpo", kl_coef=0.1, kl_in_reward=True), jnp.zeros((R, T)))


def test_kl_in_reward():
  """Sequence estimators: r − β Σ_t k1_t; REINFORCE++: the token reward r_t − β k1_t."""
  _, _, batch = _inputs()
  k1 = np.where(batch.mask, np.random.default_rng(3).standard_normal((R, T)), 0.0)
  k1 = jnp.asarray(k1, jnp.float32)
  beta = 0.1
  hyper = steps_lib.RLHyper(group_size=G, kl_coef=beta, kl_in_reward=True)
  adv, _, scalar = rl_inputs.advantages(REWARDS, batch, hyper, k1)
  want, _ = group.grpo((REWARDS - beta * np.asarray(k1).sum(-1)).reshape(B, G),
                            np.ones((B, G), bool))
  np.testing.assert_allclose(adv, np.asarray(want).reshape(-1), atol=1e-6)
  np.testing.assert_allclose(scalar, REWARDS)  # Metrics keep the task reward.

  pp = steps_lib.RLHyper(group_size=G, advantage="reinforce_pp", kl_coef=beta, kl_in_reward=True)
  adv, _, _ = rl_inputs.advantages(REWARDS, batch, pp, k1)
  want, _ = group.reinforce_pp(REWARDS.reshape(B, G), np.ones((B, G), bool),
                                    mask=batch.mask.reshape(B, G, T),
                                    token_kl=k1.reshape(B, G, T), kl_coef=beta)
  assert adv.shape == (R, T)
  np.testing.assert_allclose(adv, np.asarray(want).reshape(R, T), atol=1e-6)


def test_tis_weights_are_capped_ratios():
  w = rl_inputs.tis_weights(jnp.array([[-1.0, -2.0, -1.0]]), jnp.array([[-1.5, -1.0, -1.0]]),
                            jnp.array([[True, True, False]]), cap=1.2)
  np.testing.assert_allclose(w, [[1.2, np.exp(-1.0), 0.0]], rtol=1e-6)


def test_tis_weight_metric_and_bad_hyper(smoke_config):
  params, ref, batch = _inputs(noise=0.3)
  # The hyper-parameters of the first micro-batch test (its compiled step is reused).
  _, metrics = _step(steps_lib.RLHyper(group_size=G, kl_coef=0.1, kl_kind="k3", sft_coef=0.5,
                                       tis_cap=1.5, num_minibatches=2), params, ref, batch)
  assert 0 < float(metrics["tis_weight_mean"]) <= 1.5
  # Ranges are checked once, in the config check; RLHyper refuses only an incoherent layout.
  smoke_config.rl.num_minibatches = 0
  with pytest.raises(config_check.ConfigError,
                     match=r"config.rl.num_minibatches=0: expected an integer >= 1"):
    config_check.check(smoke_config)
  with pytest.raises(ValueError, match="needs num_groups >= 1"):
    steps_lib.RLHyper(group_size=G, max_group_size=8)
  with pytest.raises(ValueError, match="do not split into 3 micro-batches"):
    rl_inputs.split_rows(jnp.zeros((R, T)), 3)
  x = jnp.arange(R * 2).reshape(R, 2)
  np.testing.assert_array_equal(rl_inputs.merge_rows(rl_inputs.split_rows(x, 4)), x)
