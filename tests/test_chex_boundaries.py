"""chex assertions at the public boundaries (model, sampler, advantages, train steps).

Everything here is traced with `jax.eval_shape` (nothing is compiled): the checks run at trace
time, so a bad shape or dtype fails before any compilation, and well-formed inputs pass.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import optax
import pytest

from rl_jax import models, sampling
from rl_jax.rl.advantages import group
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState
from rl_jax.types import Rollout, SFTBatch

CFG = models.ModelConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32,
                         max_seq_len=16)
R, P, T = 4, 3, 5


def _spec(shape, dtype):
  return jax.ShapeDtypeStruct(shape, dtype)


@functools.cache
def _params():
  return jax.eval_shape(functools.partial(models.init_params, CFG), jax.random.key(0))


def _state():
  return jax.eval_shape(lambda p: TrainState.create(p, optax.sgd(0.1)), _params())


def _rollout(**changes):
  fields = dict(prompt_tokens=_spec((R, P), np.int32), prompt_mask=_spec((R, P), bool),
                tokens=_spec((R, T), np.int32), mask=_spec((R, T), bool),
                logp=_spec((R, T), np.float32), group=_spec((R,), np.int32),
                valid=_spec((R,), bool))
  return Rollout(**{**fields, **changes})


def _rl_step(rollout, rewards):
  hyper = steps_lib.RLHyper(group_size=2, advantage="grpo", advantage_options=(), loss="ppo",
                            clip_low=0.2, clip_high=0.2, clip_ratio_c=3.0, kl_coef=0.0,
                            kl_kind="k3", kl_in_reward=False, aggregation="token-mean",
                            temperature=1.0, sft_coef=0.0, reward_weights=(),
                            num_minibatches=1, num_iterations=1, tis_cap=0.0,
                            shared_prompts=False)
  step = functools.partial(steps_lib.rl_step, model_cfg=CFG, hyper=hyper)
  return jax.eval_shape(step, _state(), _params(), rollout, rewards)


def test_rl_step_checks_the_rollout():
  _, metrics = _rl_step(_rollout(), _spec((R,), np.float32))
  assert metrics["loss"].shape == ()
  with pytest.raises(AssertionError, match=r"rank"):
    _rl_step(_rollout(group=_spec((R, 1), np.int32)), _spec((R,), np.float32))
  with pytest.raises(AssertionError, match=r"shapes"):
    _rl_step(_rollout(mask=_spec((R, T + 1), bool)), _spec((R,), np.float32))
  with pytest.raises(AssertionError, match=r"[Ee]rror in type"):
    _rl_step(_rollout(tokens=_spec((R, T), np.float32)), _spec((R,), np.float32))
  with pytest.raises(AssertionError, match=r"dimension"):
    _rl_step(_rollout(), _spec((R + 2,), np.float32))


def _sft_step(**changes):
  fields = dict(prompt_tokens=_spec((R, P), np.int32), prompt_mask=_spec((R, P), bool),
                tokens=_spec((R, T), np.int32), mask=_spec((R, T), bool))
  step = functools.partial(steps_lib.sft_step, model_cfg=CFG)
  return jax.eval_shape(step, _state(), SFTBatch(**{**fields, **changes}))


def test_sft_step_checks_the_batch():
  assert _sft_step()[1]["loss"].shape == ()
  with pytest.raises(AssertionError, match=r"shapes"):
    _sft_step(prompt_mask=_spec((R, P + 1), bool))
  with pytest.raises(AssertionError, match=r"different shape prefixes"):
    _sft_step(tokens=_spec((R + 1, T), np.int32), mask=_spec((R + 1, T), bool))
  with pytest.raises(AssertionError, match=r"[Ee]rror in type"):
    _sft_step(mask=_spec((R, T), np.float32))


def test_sampler_and_model_check_their_inputs():
  gen = functools.partial(sampling.generate, cfg=CFG, strategy=sampling.Sampling(temperature=1.0),
                          max_new_tokens=2, eos_id=1)
  out = jax.eval_shape(gen, _params(), _spec((R, P), np.int32), _spec((R, P), bool),
                       jax.random.key(0))
  assert out.tokens.shape == (R, 2)
  with pytest.raises(AssertionError, match=r"shapes"):
    jax.eval_shape(gen, _params(), _spec((R, P), np.int32), _spec((R, P + 1), bool),
                   jax.random.key(0))
  with pytest.raises(AssertionError, match=r"[Ee]rror in type"):
    jax.eval_shape(gen, _params(), _spec((R, P), np.float32), _spec((R, P), bool),
                   jax.random.key(0))
  forward = functools.partial(models.forward, CFG)
  assert jax.eval_shape(forward, _params(), _spec((R, P), np.int32)).shape == (R, P, 32)
  with pytest.raises(AssertionError, match=r"rank"):
    jax.eval_shape(forward, _params(), _spec((P,), np.int32))


def test_advantages_check_rewards_and_valid():
  adv, weight = group.grpo(np.zeros((2, 3), np.float32), np.ones((2, 3), bool))
  assert adv.shape == weight.shape == (2, 3)
  with pytest.raises(AssertionError, match=r"shape"):
    group.grpo(np.zeros((2, 3), np.float32), np.ones((3, 2), bool))
  with pytest.raises(AssertionError, match=r"rank"):
    group.rloo(np.zeros(6, np.float32), np.ones(6, bool))
