"""Mixed precision, rematerialization and donation of the train steps (`config.train`,
`config.model.{dtype,param_dtype,remat}`).

* float32 (the default) is the program without any of the new machinery, op for op.
* bfloat16 parameters and activations on float32 master weights: the state, optimizer moments,
  log-probs and metrics stay float32, and the loss stays close to the float32 one.
* Every remat policy gives the loss and gradients of no remat.
* Donating the train state frees its buffers and changes no result.
* The phases run with these options from a config.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_jax import experiment
from rl_jax import models
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.rl import logprobs
from rl_jax.train import phases
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState
from rl_jax.types import Rollout, SFTBatch
from padded_tokens import padded_tokens  # tests/padded_tokens.py

CFG = models.ModelConfig(vocab_size=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                         max_seq_len=16)
BF16 = dataclasses.replace(CFG, dtype="bfloat16", param_dtype="bfloat16")
B, G, P, T = 2, 4, 4, 5
R = B * G
HYPER = steps_lib.RLHyper(group_size=G, kl_coef=0.1, sft_coef=0.5, shared_prompts=True)
REWARDS = np.array([1, 0, 0, 1, 0, 1, 1, 1], np.float32)

pytestmark = pytest.mark.usefixtures("fast_compiles")  # These tests compare programs.


def _padded(rng, length, left):
  return padded_tokens(rng, R, length, CFG.vocab_size, left)


@functools.cache
def _inputs():
  """float32 params, a reference that differs from them, a rollout (shared prompts per group)
  whose behaviour log-probs are near the policy's, and an SFT batch."""
  rng = np.random.default_rng(0)
  params = jax.device_get(jax.jit(models.init_params, static_argnums=0)(CFG, jax.random.key(0)))
  ref = jax.tree_util.tree_map(
      lambda x: x + 0.05 * rng.standard_normal(x.shape).astype(x.dtype), params)
  prompt, prompt_mask = _padded(rng, P, left=True)
  prompt, prompt_mask = np.repeat(prompt[::G], G, 0), np.repeat(prompt_mask[::G], G, 0)
  tokens, mask = _padded(rng, T, left=False)
  logp = np.asarray(jax.jit(functools.partial(logprobs.completion_logprobs, CFG))(
      params, prompt, prompt_mask, tokens, mask))
  logp = np.where(mask, logp + 0.2 * rng.standard_normal(logp.shape), 0.0).astype(np.float32)
  batch = Rollout(prompt_tokens=prompt, prompt_mask=prompt_mask, tokens=tokens, mask=mask,
                  logp=logp, group=np.repeat(np.arange(B), G).astype(np.int32),
                  valid=np.ones(R, bool))
  return params, ref, batch, SFTBatch(prompt, prompt_mask, tokens, mask)


def _state(params):
  return TrainState.create(params, optax.adam(1e-2))


@functools.cache
def _rl(cfg, donate=()):
  """The jitted RL step (cached: tests that share a config share its compilation)."""
  return jax.jit(functools.partial(steps_lib.rl_step, model_cfg=cfg, hyper=HYPER),
                 donate_argnums=donate)


@functools.cache
def _sft(cfg, donate=()):
  return jax.jit(functools.partial(steps_lib.sft_step, model_cfg=cfg), donate_argnums=donate)


def _leaves(tree):
  return jax.tree_util.tree_leaves(jax.device_get(tree))


def _plain_steps(monkeypatch):
  """Patches out the mixed-precision casts: the steps as they were before they existed."""
  monkeypatch.setattr(models, "cast_params", lambda cfg, params: params)
  monkeypatch.setattr(steps_lib, "_like", lambda tree, target: tree)


def test_float32_is_the_program_without_casts(monkeypatch):
  params, ref, batch, sft_batch = _inputs()
  state = _state(params)
  rl = lambda: str(jax.make_jaxpr(functools.partial(
      steps_lib.rl_step, model_cfg=CFG, hyper=HYPER))(state, ref, batch, REWARDS))
  sft = lambda: str(jax.make_jaxpr(functools.partial(steps_lib.sft_step, model_cfg=CFG))(
      state, sft_batch))
  with_casts = rl(), sft()
  assert "bf16" not in with_casts[0] and "checkpoint" not in with_casts[0]
  _plain_steps(monkeypatch)
  assert with_casts == (rl(), sft())
  # ... while bfloat16 parameters do add casts (so the comparison above could fail).
  monkeypatch.undo()
  bf16 = str(jax.make_jaxpr(functools.partial(steps_lib.sft_step, model_cfg=BF16))(
      state, sft_batch))
  assert "bf16" in bf16


def test_bfloat16_params_and_activations_on_float32_master_weights():
  params, ref, batch, sft_batch = _inputs()
  for step, args in ((_rl, (ref, batch, REWARDS)),
                     (_sft,
                      (sft_batch,))):
    state32, m32 = step(CFG)(_state(params), *args)
    state16, m16 = step(BF16)(_state(params), *args)
    # Master weights, optimizer moments and metrics stay float32 ...
    assert {x.dtype for x in _leaves(state16.params)} == {np.dtype(np.float32)}
    assert {x.dtype for x in _leaves(state16.opt_state)} <= {np.dtype(np.float32),
                                                             np.dtype(np.int32)}
    assert all(np.asarray(v).dtype == np.float32 for v in m16.values())
    # ... the bfloat16 forward changed the numbers, but not by much.
    assert float(m16["loss"]) != float(m32["loss"])
    for k in ("loss", "grad_norm"):
      np.testing.assert_allclose(m16[k], m32[k], rtol=3e-2, err_msg=k)
    # One Adam step moves each weight by about the learning rate: the updates agree in sign.
    d32 = np.concatenate([(a - b).ravel() for a, b in zip(_leaves(state32.params),
                                                          _leaves(params))])
    d16 = np.concatenate([(a - b).ravel() for a, b in zip(_leaves(state16.params),
                                                          _leaves(params))])
    big = np.abs(d32) > 5e-3
    assert big.mean() > 0.5 and (np.sign(d16[big]) == np.sign(d32[big])).mean() > 0.95


def test_bfloat16_logprobs_are_float32_and_close():
  params, _, batch, _ = _inputs()
  args = (batch.prompt_tokens, batch.prompt_mask, batch.tokens, batch.mask)
  lp32 = jax.jit(functools.partial(logprobs.completion_logprobs, CFG))(params, *args)
  lp16 = jax.jit(functools.partial(logprobs.completion_logprobs, BF16))(
      models.cast_params(BF16, params), *args)
  assert lp16.dtype == jnp.float32
  np.testing.assert_allclose(lp16, lp32, atol=5e-2)


def test_remat_gives_the_same_loss_and_gradients():
  params, ref, batch, sft_batch = _inputs()

  def sft_loss(cfg, params):
    logp = logprobs.completion_logprobs(cfg, params, sft_batch.prompt_tokens,
                                        sft_batch.prompt_mask, sft_batch.tokens, sft_batch.mask)
    return -jnp.sum(logp)

  grad = lambda c: jax.jit(jax.value_and_grad(functools.partial(sft_loss, c)))(params)
  loss0, g0 = grad(CFG)
  for policy in ("full", "dots_saveable", "dots_with_no_batch_dims_saveable"):
    cfg = dataclasses.replace(CFG, remat=policy)
    loss1, g1 = grad(cfg)
    np.testing.assert_allclose(loss1, loss0, rtol=1e-6, err_msg=policy)
    for a, b in zip(_leaves(g1), _leaves(g0)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=policy)
    # The backward pass really is rematerialized.
    jaxpr = str(jax.make_jaxpr(jax.grad(functools.partial(sft_loss, cfg)))(params))
    assert "checkpoint" in jaxpr or "remat" in jaxpr, policy
  # The RL step (micro-batches, KL, SFT term) agrees too.
  (_, m0), (_, m1) = (_rl(c)(_state(params), ref, batch, REWARDS)
                      for c in (CFG, dataclasses.replace(CFG, remat="full")))
  for k in m0:
    np.testing.assert_allclose(m1[k], m0[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_remat_rejects_an_unknown_policy():
  with pytest.raises(ValueError, match="remat must be one of"):
    dataclasses.replace(CFG, remat="dots")


def test_donated_state_is_freed_and_results_unchanged():
  params, _, _, batch = _inputs()
  kept, donated = _state(jax.device_put(params)), _state(jax.device_put(params))
  out_kept = _sft(CFG)(kept, batch)
  out_donated = _sft(CFG, donate=(0,))(donated, batch)
  assert all(x.is_deleted() for x in jax.tree_util.tree_leaves(donated.params))
  assert not any(x.is_deleted() for x in jax.tree_util.tree_leaves(kept.params))
  for a, b in zip(_leaves(out_donated), _leaves(out_kept)):
    np.testing.assert_array_equal(a, b)


def test_phases_run_bfloat16_with_float32_master_weights_and_no_donation(smoke_config, tmp_path):
  """SFT and an RL step from a config: bfloat16 model with remat on float32 master weights,
  state not donated. The sampler and the evaluation get the bfloat16 copy."""
  smoke_config.rl.update(steps=1, eval_every=0)
  smoke_config.sft.update(steps=2)
  smoke_config.model.update(dtype="bfloat16", param_dtype="bfloat16", remat="full")
  smoke_config.train.donate = False
  exp = experiment.build(smoke_config, str(tmp_path))
  params = phases.init_params(exp)
  assert {x.dtype for x in jax.tree_util.tree_leaves(params)} == {jnp.dtype(jnp.float32)}
  with MetricsWriter(tmp_path) as writer:
    sft = phases.sft(exp, "sft", params, smoke_config.sft.steps, writer)
    result = phases.rl(exp, sft.params, writer)
  assert not any(x.is_deleted() for x in jax.tree_util.tree_leaves(params))  # not donated
  assert {x.dtype for x in jax.tree_util.tree_leaves(result.params)} == {jnp.dtype(jnp.float32)}
  rows = read_metrics(tmp_path)
  assert [(r["phase"], r["step"]) for r in rows] == [("sft", 1), ("sft", 2), ("rl", 1)]
  assert all(np.isfinite(r["loss"]) for r in rows)
  assert rows[1]["loss"] < rows[0]["loss"] + 0.5  # SFT at lr 1e-3 does not blow up in bf16


def test_bad_master_dtype_is_rejected(smoke_config, tmp_path):
  smoke_config.train.master_dtype = "float8"
  with pytest.raises(ValueError, match="config.train.master_dtype='float8'"):
    experiment.build(smoke_config, str(tmp_path))



def _rl_params(smoke_config, tmp_path, *, kl_coef: float, release: bool):
  """(SFT params after the RL phase, RL params) of one RL step from 2 SFT steps."""
  smoke_config.rl.update(steps=1, eval_every=0, kl_coef=kl_coef)
  smoke_config.sft.update(steps=2)
  exp = experiment.build(smoke_config, str(tmp_path))
  with MetricsWriter(tmp_path) as writer:
    sft = phases.sft(exp, "sft", phases.init_params(exp), smoke_config.sft.steps, writer)
    result = phases.rl(exp, sft.params, writer, release_sft_params=release)
  return sft.params, jax.device_get(result.params)


def test_released_sft_params_are_freed_and_the_step_unchanged(smoke_config_factory, tmp_path):
  """With no KL term the RL phase frees the SFT parameters it was told to release, and the step
  is the one that keeps them; with a KL term they are the reference and stay."""
  sft, released = _rl_params(smoke_config_factory(), tmp_path / "a", kl_coef=0.0, release=True)
  assert all(x.is_deleted() for x in jax.tree_util.tree_leaves(sft))
  sft, kept = _rl_params(smoke_config_factory(), tmp_path / "b", kl_coef=0.0, release=False)
  assert not any(x.is_deleted() for x in jax.tree_util.tree_leaves(sft))
  for a, b in zip(_leaves(released), _leaves(kept)):
    np.testing.assert_array_equal(a, b)
  sft, _ = _rl_params(smoke_config_factory(), tmp_path / "c", kl_coef=0.1, release=True)
  assert not any(x.is_deleted() for x in jax.tree_util.tree_leaves(sft))
