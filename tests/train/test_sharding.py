"""A train step on a (data x fsdp) or (data x fsdp x tensor) mesh of 8 host devices equals the
same step on one device, and so does the sampler on the tensor mesh.

The steps are jitted the way `rl_jax.train.phases` jits them: the state created with
`out_shardings` from `parallel.tree_shardings`, batches split by `parallel.batch_sharding`, the
state donated. The RL phase itself (sampling -> sharded step -> checkpoint -> resume) also runs
on that mesh. `tests/conftest.py` provides the 8 CPU devices.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from rl_jax import experiment
from rl_jax import models, parallel, sampling
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.rl import logprobs
from rl_jax.sampling import refill
from rl_jax.train import phases
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState, make_optimizer, optim_config
from rl_jax.types import Rollout, SFTBatch

CFG = models.ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                         max_seq_len=32)
B, G, P, T = 4, 4, 6, 5  # R = B * G = 16 rows: divisible by the 2 * 4 batch shards.
R = B * G
HYPER = steps_lib.RLHyper(group_size=G, kl_coef=0.1, kl_kind="k3", temperature=0.8,
                          sft_coef=0.5)
ATOL = 1e-5
# Adam's first update is g / (|g| + eps): with the usual eps=1e-8 a gradient entry near zero (1e-7)
# turns float reduction-order noise into a different update. A larger eps keeps the comparison of
# parameters well conditioned; the Adam moments (compared too) check the gradients themselves.
OPTIM = optim_config(1e-2, eps=1e-3)
# XLA optimizations off: these tests compare programs on tiny shapes (one device vs a mesh), or run
# the tiny smoke phase on a mesh; compiling dominates. The SPMD partitioner runs all the same.
pytestmark = pytest.mark.usefixtures("fast_compiles")


def _meshes():
  return {"1 device": parallel.make_mesh((1, 1, 1)),
          "2x4 data x fsdp": parallel.make_mesh((2, 4, 1))}


def _left_padded(rng, rows, length):
  lengths = rng.integers(1, length + 1, rows)
  mask = np.arange(length)[None, :] >= (length - lengths)[:, None]
  return np.where(mask, rng.integers(3, CFG.vocab_size, (rows, length)), 0).astype(np.int32), mask


def _right_padded(rng, rows, length):
  lengths = rng.integers(1, length + 1, rows)
  mask = np.arange(length)[None, :] < lengths[:, None]
  return np.where(mask, rng.integers(3, CFG.vocab_size, (rows, length)), 0).astype(np.int32), mask


def _params(seed):
  init = jax.jit(models.init_params, static_argnums=0)
  return jax.device_get(init(CFG, jax.random.key(seed)))


@functools.cache
def _rollout_inputs():
  """Policy and reference params, a random rollout batch and its rewards (host numpy)."""
  rng = np.random.default_rng(0)
  params = _params(0)
  # A reference that differs from the policy, so the KL term and its gradient are not zero.
  ref = jax.tree_util.tree_map(
      lambda x: x + 0.05 * rng.standard_normal(x.shape).astype(x.dtype), params)
  prompt, prompt_mask = _left_padded(rng, R, P)
  tokens, mask = _right_padded(rng, R, T)
  # Behaviour log-probs near the policy's, so some ratios are clipped and most are not.
  policy_logp = jax.jit(functools.partial(logprobs.completion_logprobs, CFG,
                                          temperature=HYPER.temperature))
  logp = np.asarray(policy_logp(params, prompt, prompt_mask, tokens, mask))
  logp = np.where(mask, logp + 0.3 * rng.standard_normal(logp.shape), 0.0).astype(np.float32)
  batch = Rollout(prompt_tokens=prompt, prompt_mask=prompt_mask, tokens=tokens, mask=mask,
                  logp=logp, group=np.repeat(np.arange(B), G).astype(np.int32),
                  valid=np.ones(R, bool))
  rewards = np.array([1, 0, 0, 1,
                      0, 0, 0, 0,
                      1, 1, 0, 1,
                      0, 1, 0, 0], np.float32)
  return params, ref, batch, rewards


@functools.cache
def _sft_inputs():
  rng = np.random.default_rng(1)
  prompt, prompt_mask = _left_padded(rng, R, P)
  tokens, mask = _right_padded(rng, R, T)
  return _params(2), SFTBatch(prompt, prompt_mask, tokens, mask)


def _batch_shardings(mesh, tree):
  return jax.tree_util.tree_map(
      lambda x: parallel.batch_sharding(mesh, x.ndim, x.shape[0] if x.ndim else None), tree)


def _make_state(mesh, params, tx):
  create = functools.partial(TrainState.create, tx=tx)
  shardings = parallel.tree_shardings(jax.eval_shape(create, params), mesh)
  return jax.jit(create, out_shardings=shardings)(params), shardings


def _specs(tree):
  return [leaf.sharding.spec for leaf in jax.tree_util.tree_leaves(tree)]


def _is_split(spec) -> bool:
  return any(axis is not None for axis in spec)


def _run_rl(mesh):
  params, ref, batch, rewards = _rollout_inputs()
  state, state_sh = _make_state(mesh, params, make_optimizer(OPTIM, 10))
  step = jax.jit(
      functools.partial(steps_lib.rl_step, model_cfg=CFG, hyper=HYPER),
      in_shardings=(state_sh, parallel.tree_shardings(ref, mesh), _batch_shardings(mesh, batch),
                    _batch_shardings(mesh, rewards)),
      out_shardings=(state_sh, parallel.replicated(mesh)), donate_argnums=0)
  state, metrics = step(state, ref, batch, rewards)
  return state, metrics


def _run_sft(mesh):
  params, batch = _sft_inputs()
  state, state_sh = _make_state(mesh, params, make_optimizer(OPTIM, 10))
  step = jax.jit(functools.partial(steps_lib.sft_step, model_cfg=CFG),
                 in_shardings=(state_sh, _batch_shardings(mesh, batch)),
                 out_shardings=(state_sh, parallel.replicated(mesh)), donate_argnums=0)
  return step(state, batch)


def _assert_same_step(run):
  assert len(jax.devices()) >= 8, "tests/conftest.py should force 8 host devices"
  results = {name: run(mesh) for name, mesh in _meshes().items()}
  (state1, metrics1), (state8, metrics8) = results.values()
  # Some parameters (and their Adam moments) really are split over 'fsdp' on 8 devices...
  assert any(_is_split(s) for s in _specs(state8.params)), _specs(state8.params)
  assert any("fsdp" in str(s) for s in _specs(state8.opt_state))
  assert not any(_is_split(s) for s in _specs(state1.params))
  assert all(len(leaf.sharding.device_set) == 8 for leaf in jax.tree_util.tree_leaves(state8))
  # ... and the step is the same computation: loss, metrics, params and optimizer moments.
  assert set(metrics1) == set(metrics8)
  for k in metrics1:
    np.testing.assert_allclose(metrics8[k], metrics1[k], atol=ATOL, err_msg=k)
  assert float(metrics1["grad_norm"]) > 0
  np.testing.assert_equal(int(state1.step), 1)
  np.testing.assert_equal(int(state8.step), 1)
  leaves1 = jax.tree_util.tree_leaves_with_path(jax.device_get(state1))
  leaves8 = jax.tree_util.tree_leaves(jax.device_get(state8))
  for (path, a), b in zip(leaves1, leaves8):
    np.testing.assert_allclose(b, a, atol=ATOL, err_msg=jax.tree_util.keystr(path))
  return metrics1


def test_batch_sharding_splits_rows_over_data_and_fsdp():
  mesh = parallel.make_mesh((2, 4, 1))
  assert parallel.batch_sharding(mesh, 2, R).spec == jax.sharding.PartitionSpec(("data", "fsdp"),
                                                                                None)
  # A batch the 8 shards do not divide stays replicated rather than failing.
  assert parallel.batch_sharding(mesh, 2, R + 1).spec == jax.sharding.PartitionSpec(None, None)


def test_rl_step_same_on_one_device_and_fsdp_mesh():
  metrics = _assert_same_step(_run_rl)
  # The KL-to-reference and SFT-on-correct terms ran (both are only computed when enabled).
  assert float(metrics["kl"]) > 0
  assert float(metrics["sft_loss"]) > 0
  assert 0 < float(metrics["informative_frac"]) < 1  # One group is all-zero reward.
  np.testing.assert_allclose(metrics["reward_mean"], 6 / 16)


def test_sft_step_same_on_one_device_and_fsdp_mesh():
  metrics = _assert_same_step(_run_sft)
  assert np.isfinite(float(metrics["loss"])) and float(metrics["loss"]) > 0


@pytest.mark.parametrize("shape", [(2, 4, 1), (1, 8, 1), (8, 1, 1)])
def test_param_shardings_fit_every_mesh(shape):
  """The rules only split dims the mesh axis divides (tiny models stay valid on any mesh)."""
  mesh = parallel.make_mesh(shape)
  params = _params(0)
  shardings = parallel.tree_shardings(params, mesh)
  for (path, leaf), sharding in zip(jax.tree_util.tree_leaves_with_path(params),
                                    jax.tree_util.tree_leaves(shardings)):
    for dim, axis in zip(leaf.shape, sharding.spec):
      if axis is not None:
        assert dim % mesh.shape[axis] == 0, (jax.tree_util.keystr(path), leaf.shape, sharding)
  placed = jax.device_put(params, shardings)  # Raises if a spec does not fit.
  assert all(len(x.sharding.device_set) == 8 for x in jax.tree_util.tree_leaves(placed))


def test_rl_phase_runs_and_resumes_on_fsdp_mesh(smoke_config, tmp_path):
  """Rollouts from the sampler feed the sharded step; a sharded checkpoint restores."""
  smoke_config.mesh.shape = (2, 4, 1)
  smoke_config.rl.update(steps=2, eval_every=0)  # R = 4 prompts x 4 samples = 16 rows.
  smoke_config.interrupt_at = "rl:1"
  exp = experiment.build(smoke_config, str(tmp_path))
  params = phases.init_params(exp)
  with MetricsWriter(tmp_path) as writer:
    with pytest.raises(phases.Interrupted):
      phases.rl(exp, params, writer)
    exp.config.interrupt_at = ""
    result = phases.rl(exp, params, writer)
  assert [r["step"] for r in read_metrics(tmp_path) if r["phase"] == "rl"] == [1, 2]
  assert any("fsdp" in str(s) for s in _specs(result.params))
  assert all(len(x.sharding.device_set) == 8 for x in jax.tree_util.tree_leaves(result.params))


# Tensor parallelism: a (data x fsdp x tensor) = 2x2x2 mesh splits the projections' feature
# dimensions (heads, MLP width, vocabulary) over 'tensor' and the rows over (data, fsdp).
TENSOR_MESH = (2, 2, 2)


def _tensor_split(tree) -> bool:
  return any("tensor" in str(s) for s in _specs(tree))


def test_rl_step_same_on_one_device_and_tensor_mesh():
  state1, metrics1 = _run_rl(parallel.make_mesh((1, 1, 1)))
  state8, metrics8 = _run_rl(parallel.make_mesh(TENSOR_MESH))
  assert _tensor_split(state8.params) and _tensor_split(state8.opt_state)
  assert any("fsdp" in str(s) for s in _specs(state8.params))
  assert all(len(leaf.sharding.device_set) == 8 for leaf in jax.tree_util.tree_leaves(state8))
  assert float(metrics1["grad_norm"]) > 0 and float(metrics1["kl"]) > 0
  for k in metrics1:
    np.testing.assert_allclose(metrics8[k], metrics1[k], atol=ATOL, err_msg=k)
  leaves1 = jax.tree_util.tree_leaves_with_path(jax.device_get(state1))
  for (path, a), b in zip(leaves1, jax.tree_util.tree_leaves(jax.device_get(state8))):
    np.testing.assert_allclose(b, a, atol=ATOL, err_msg=jax.tree_util.keystr(path))


def test_sampler_same_on_one_device_and_tensor_mesh():
  """Prefill + the decode scan over a KV cache, with tensor-split weights: the same tokens,
  log-probs and entropies as on one device (sampling at temperature 1, 2 samples per prompt)."""
  params = _params(3)
  rng = np.random.default_rng(3)
  prompt, prompt_mask = _left_padded(rng, 8, P)
  sample = functools.partial(sampling.generate, cfg=CFG, strategy=sampling.Sampling(),
                             max_new_tokens=6, eos_id=1, pad_id=0, num_samples=2)
  key = jax.random.key(5)
  outs = {}
  for shape in ((1, 1, 1), TENSOR_MESH):
    mesh = parallel.make_mesh(shape)
    placed = jax.device_put(params, parallel.tree_shardings(params, mesh))
    rows = parallel.batch_sharding(mesh, 2, len(prompt))
    outs[shape] = sample(placed, jax.device_put(prompt, rows), jax.device_put(prompt_mask, rows),
                         key)
  assert _tensor_split(placed)
  assert len(outs[TENSOR_MESH].tokens.sharding.device_set) == 8
  one, eight = (jax.device_get(outs[s]) for s in ((1, 1, 1), TENSOR_MESH))
  assert one.mask.sum() > 8  # Rows really sampled several tokens.
  np.testing.assert_array_equal(eight.tokens, one.tokens)
  np.testing.assert_array_equal(eight.mask, one.mask)
  np.testing.assert_allclose(eight.logp, one.logp, atol=ATOL)
  np.testing.assert_allclose(eight.entropy, one.entropy, atol=ATOL)


def test_refill_engine_same_on_one_device_and_tensor_mesh():
  """Slot refill under a context mesh (as the loop runs it, `jax.set_mesh`) of 2 x 2 x 2
  (data x fsdp x tensor): the slots' KV cache split over the 4 batch shards, the prompt rows
  gathered into slots across devices, tensor-split weights; the same
  tokens, log-probs and entropies as on one device (16 requests in 8 slots, so slots refill)."""
  params = _params(4)
  rng = np.random.default_rng(4)
  prompt, prompt_mask = _left_padded(rng, 8, P)
  sample = functools.partial(refill.refill_generate, cfg=CFG, strategy=sampling.Sampling(),
                             max_new_tokens=6, eos_id=1, pad_id=0, num_samples=2, num_slots=8)
  key = jax.random.key(6)
  outs, shape = {}, TENSOR_MESH
  for s in ((1, 1, 1), shape):
    mesh = parallel.make_mesh(s)
    placed = jax.device_put(params, parallel.tree_shardings(params, mesh))
    rows = parallel.batch_sharding(mesh, 2, len(prompt))
    with jax.set_mesh(mesh):
      outs[s] = sample(placed, jax.device_put(prompt, rows), jax.device_put(prompt_mask, rows),
                       key)
  one, many = (jax.device_get(outs[s]) for s in ((1, 1, 1), shape))
  assert len(outs[shape].samples.tokens.sharding.device_set) == 8
  assert one.iterations > 6  # More than one wave: slots were refilled.
  assert one.samples.mask.sum() > 16
  assert int(many.iterations) == int(one.iterations)
  np.testing.assert_array_equal(many.samples.tokens, one.samples.tokens)
  np.testing.assert_array_equal(many.samples.mask, one.samples.mask)
  np.testing.assert_allclose(many.samples.logp, one.samples.logp, atol=ATOL)
  np.testing.assert_allclose(many.samples.entropy, one.samples.entropy, atol=ATOL)
