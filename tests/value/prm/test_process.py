"""config.rl.process_reward: named config errors, the step-reward seam of the RL update, and
PRIME's online PRM update on a fixed batch."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments.configs import ladder
from rl_jax import models
from rl_jax.train import config_check, rl_inputs
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState
from rl_jax.types import Rollout
from rl_jax.value.prm import process

B, G, T = 2, 4, 5


def _rollout(step_rewards=None, step_of=None):
  rng = np.random.default_rng(0)
  mask = np.arange(T)[None] < rng.integers(2, T + 1, (B * G, 1))
  z = np.zeros((B * G, T))
  return Rollout(prompt_tokens=np.ones((B * G, 2), np.int32), prompt_mask=np.ones((B * G, 2), bool),
                 tokens=np.ones((B * G, T), np.int32), mask=mask, logp=z.astype(np.float32),
                 group=np.repeat(np.arange(B), G).astype(np.int32), valid=np.ones(B * G, bool),
                 step_of=step_of, step_rewards=step_rewards)


def test_pav_alpha_zero_is_the_outcome_advantage_on_every_token():
  rng = np.random.default_rng(1)
  r = np.array([1, 0, 0, 1, 1, 1, 0, 0], np.float32)
  step_of = np.sort(rng.integers(0, 3, (B * G, T)), axis=1).astype(np.int32)
  sr = rng.normal(size=(B * G, T)).astype(np.float32)
  base = rl_inputs.advantages(r, _rollout(), steps_lib.RLHyper(group_size=G))[0]
  for alpha, want_equal in ((0.0, True), (2.0, False)):
    hyper = steps_lib.RLHyper(group_size=G, process_reward="pav",
                              process_options=(("alpha", alpha),))
    adv, w, _ = rl_inputs.advantages(r, _rollout(sr, step_of), hyper)
    roll = _rollout()
    same = np.allclose(np.asarray(adv), np.where(roll.mask, np.asarray(base)[:, None], 0.0),
                       atol=1e-6)
    assert same == want_equal
    assert np.asarray(w).tolist() == [1.0] * (B * G)
  with pytest.raises(ValueError, match="step_rewards"):
    rl_inputs.advantages(r, _rollout(), hyper)


@pytest.mark.parametrize("override, field", [
    (dict(process_reward="prm"), "config.rl.process_reward='prm'"),
    (dict(process_reward="pav"), "config.rl.process.alpha=nan"),
    (dict(process_reward="pav", alpha=1.0), "config.rl.process.prm_dir"),
    (dict(process_reward="prime", norm="max"), "config.rl.process.norm='max'"),
    (dict(process_reward="oprl", oprl_baseline="x"), "config.rl.process.oprl_baseline='x'"),
    (dict(process_reward="prime", beta=0.0), "config.rl.process.beta=0.0"),
    (dict(process_reward="prime", rl_max_group_size=8), "max_group_size=8"),
])
def test_bad_process_options_are_named_errors(override, field):
  c = ladder.get_config("smoke")
  c.rl.process_reward = override.pop("process_reward")
  for k, v in override.items():
    if k.startswith("rl_"):
      setattr(c.rl, k[3:], v)
    else:
      setattr(c.rl.process, k, v)
  with pytest.raises(config_check.ConfigError) as e:
    config_check.check(c)
  assert field in str(e.value)


def test_defaults_check_and_hyper_options():
  c = ladder.get_config("smoke")
  config_check.check(c)  # 'none' by default
  c.rl.update(process_reward="oracle", max_group_size=8, allocator="knapsack")
  c.rl.process.alpha = 1.0
  config_check.check(c)  # per-row process rewards take ragged batches (an allocator's)
  c.rl.update(process_reward="none", max_group_size=0, allocator="uniform")
  assert process.estimator_options(c) == ()
  c.rl.process_reward = "oprl"
  assert process.estimator_options(c) == (("baseline", "rloo"), ("weight", 1.0))


def test_prime_update_on_a_fixed_batch():
  cfg = models.ModelConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1,
                           d_ff=32, max_seq_len=16)
  params = models.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(0)
  seqs = (rng.integers(1, 16, (4, 3)).astype(np.int32), np.ones((4, 3), bool),
          rng.integers(1, 16, (4, 4)).astype(np.int32), np.ones((4, 4), bool))
  ref = process._logp(params, *seqs, cfg=cfg)
  outcome, valid = np.array([1.0, 0.0, 1.0, 0.0], np.float32), np.ones(4, bool)
  state = TrainState.create(params, optax.sgd(1.0))
  losses = []
  for _ in range(3):
    state, loss = process._update(state, ref, seqs, outcome, valid, loss="prime", cfg=cfg,
                                  beta=0.05)
    losses.append(float(loss))
  assert losses[0] == pytest.approx(np.log(2.0), abs=1e-6)  # pi_phi == pi_ref: sigma(0)
  assert losses[2] < losses[0]
  ratio = np.asarray(process._logp(state.params, *seqs, cfg=cfg) - ref).sum(-1)
  assert ratio[outcome == 1].min() > ratio[outcome == 0].max()  # successes gained likelihood
