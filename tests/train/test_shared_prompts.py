"""Shared-prompt log-probs: each group's prompt runs once, and nothing else changes.

`completion_logprobs(group_size=G)` and `RLHyper(shared_prompts=True)` must give the values and
gradients of the per-row path on a batch whose rows come in groups sharing a prompt.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_jax import models
from rl_jax.rl import logprobs
from rl_jax.train import rl_inputs
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState
from rl_jax.types import Rollout

CFG = models.ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                         d_ff=48, max_seq_len=24)
B, G, P, T = 3, 4, 6, 7
R = B * G


pytestmark = pytest.mark.usefixtures("fast_compiles")  # These tests compare programs.
# Jitted once for the module (eagerly, every primitive would compile on its own).
_logprobs = jax.jit(functools.partial(logprobs.completion_logprobs, CFG))


@functools.cache
def _batch():
  rng = np.random.default_rng(1)
  params = jax.device_get(jax.jit(models.init_params, static_argnums=0)(CFG, jax.random.key(2)))
  lengths = rng.integers(1, P + 1, B)
  pmask = np.arange(P)[None, :] >= (P - lengths)[:, None]  # Left-padded, one prompt per group.
  prompt = np.where(pmask, rng.integers(3, CFG.vocab_size, (B, P)), 0).astype(np.int32)
  clen = rng.integers(1, T + 1, R)
  cmask = np.arange(T)[None, :] < clen[:, None]               # Right-padded completions.
  comp = np.where(cmask, rng.integers(3, CFG.vocab_size, (R, T)), 0).astype(np.int32)
  return params, np.repeat(prompt, G, 0), np.repeat(pmask, G, 0), comp, cmask


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prompt_logprobs_and_gradients_match(temperature):
  params, prompt, pmask, comp, cmask = _batch()
  weights = jnp.asarray(np.random.default_rng(3).standard_normal((R, T)), jnp.float32)

  def objective(params, group):
    lp, ent = logprobs.completion_logprobs(CFG, params, prompt, pmask, comp, cmask,
                                           temperature=temperature, with_entropy=True,
                                           group_size=group)
    return jnp.sum(lp * weights), (lp, ent)

  # Jitted as the trainer runs it (eagerly, every primitive would compile on its own).
  value_and_grad = jax.jit(jax.value_and_grad(objective, has_aux=True), static_argnums=1)
  (v1, (lp1, ent1)), g1 = value_and_grad(params, 1)
  (vg, (lpg, entg)), gg = value_and_grad(params, G)
  np.testing.assert_allclose(lpg, lp1, atol=1e-5)
  np.testing.assert_allclose(entg, ent1, atol=1e-5)
  assert float(jnp.abs(lp1).sum()) > 0
  for a, b in zip(jax.tree_util.tree_leaves(gg), jax.tree_util.tree_leaves(g1)):
    np.testing.assert_allclose(a, b, atol=2e-5)


def test_shared_prompts_rejects_partial_groups():
  params, prompt, pmask, comp, cmask = _batch()
  with pytest.raises(ValueError, match="group_size=5"):
    logprobs.completion_logprobs(CFG, params, prompt, pmask, comp, cmask, group_size=5)


def test_split_rows_keeps_groups_whole():
  x = np.arange(24)
  micro = rl_inputs.split_rows(x, 2, group=3)
  np.testing.assert_array_equal(micro, [[0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20],
                                        [3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23]])
  np.testing.assert_array_equal(rl_inputs.merge_rows(micro, group=3), x)
  # group=1 is the strided split.
  np.testing.assert_array_equal(rl_inputs.split_rows(x, 4)[1], np.arange(1, 24, 4))
  with pytest.raises(ValueError, match="whole groups"):
    rl_inputs.split_rows(x, 3, group=3)


@pytest.mark.parametrize("num_minibatches", [1, 3])
def test_rl_step_with_shared_prompts_matches(num_minibatches):
  params, prompt, pmask, comp, cmask = _batch()
  logp = _logprobs(params, prompt, pmask, comp, cmask)
  ref = jax.tree_util.tree_map(lambda x: x * 1.01, params)
  rollout = Rollout(prompt_tokens=prompt, prompt_mask=pmask, tokens=comp, mask=cmask,
                    logp=np.asarray(logp), group=np.repeat(np.arange(B), G).astype(np.int32),
                    valid=np.ones(R, bool))
  rewards = np.random.default_rng(4).random(R).astype(np.float32)
  out = {}
  for shared in (False, True):
    hyper = steps_lib.RLHyper(group_size=G, kl_coef=0.1, aggregation="seq-mean-token-mean",
                              num_minibatches=num_minibatches, shared_prompts=shared)
    state = TrainState.create(params, optax.sgd(1.0))
    out[shared] = jax.jit(functools.partial(steps_lib.rl_step, model_cfg=CFG, hyper=hyper))(
        state, ref, rollout, rewards)
  (s0, m0), (s1, m1) = out[False], out[True]
  moved = [float(jnp.abs(a - b).max()) for a, b in zip(jax.tree_util.tree_leaves(s0.params),
                                                       jax.tree_util.tree_leaves(params))]
  assert max(moved) > 1e-4
  for a, b in zip(jax.tree_util.tree_leaves(s1.params), jax.tree_util.tree_leaves(s0.params)):
    np.testing.assert_allclose(a, b, atol=1e-5)
  for k in ("loss", "kl", "grad_norm"):
    np.testing.assert_allclose(m1[k], m0[k], rtol=1e-4, atol=1e-6)
