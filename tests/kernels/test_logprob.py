"""Fused log-prob: every implementation against the references, values and gradients.

Shapes are small and chosen so every edge is hit: N=40 tokens (padded to whole row blocks),
D=48 (not a multiple of the GPU kernel's D chunk), V=300 (a partial last column block), over a
3 x 3 tile grid. The Pallas kernels run in interpret mode on CPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels import logprob

# Compiling dominates these small shapes; the comparisons hold with or without XLA's optimizations.
pytestmark = pytest.mark.usefixtures("fast_compiles")

N, D, V = 40, 48, 300
BLOCKS = logprob.BlockSizes(block_n=16, block_v=128, block_d=32)
# (values atol, gradients atol, gradients rtol) per dtype.
TOL = {"float32": (2e-5, 1e-4, 1e-4), "bfloat16": (1e-4, 3e-2, 2e-2)}
PLAIN = dict(soft_cap=None, temperature=1.0)
CAPPED = dict(soft_cap=2.5, temperature=0.7)


@functools.cache
def _inputs(dtype: str):
  rng = np.random.default_rng(0)
  h = rng.standard_normal((N, D)).astype(np.float32)
  w = (3.0 / np.sqrt(D)) * rng.standard_normal((D, V)).astype(np.float32)
  t = rng.integers(0, V, N).astype(np.int32)
  t[:3] = [0, V - 1, 200]  # First column, last column, inside the partial block.
  g = rng.standard_normal(N).astype(np.float32)
  e = rng.standard_normal(N).astype(np.float32)
  return jnp.asarray(h, dtype), jnp.asarray(w, dtype), jnp.asarray(t), g, e


def _value_and_grads(fn, dtype, with_entropy, vocab_major=False, **kw):
  """(logp, entropy or None, d_hidden, d_unembedding [D, V]) of sum(g logp) + sum(e entropy).

  With vocab_major, W is passed as [V, D] (and its gradient transposed back for comparison).
  """
  h, w, t, g, e = _inputs(dtype)
  if vocab_major:
    w = jnp.asarray(w.T)
    kw = dict(kw, vocab_major=True)

  def loss(h, w):
    out = fn(h, w, t, with_entropy=with_entropy, **kw)
    logp, ent = out if with_entropy else (out, None)
    total = jnp.sum(g * logp) + (jnp.sum(e * ent) if with_entropy else 0.0)
    return total, (logp, ent)

  (_, (logp, ent)), (dh, dw) = jax.jit(jax.value_and_grad(loss, (0, 1), has_aux=True))(h, w)
  assert dh.dtype == h.dtype and dw.dtype == w.dtype and dw.shape == w.shape
  return logp, ent, dh, dw.T if vocab_major else dw


def _assert_close(got, want, dtype):
  atol, g_atol, g_rtol = TOL[dtype]
  f32 = lambda a: np.asarray(jnp.asarray(a, jnp.float32))  # noqa: E731
  np.testing.assert_allclose(f32(got[0]), f32(want[0]), atol=atol, err_msg="logp")
  if want[1] is not None:
    np.testing.assert_allclose(f32(got[1]), f32(want[1]), atol=atol, err_msg="entropy")
  np.testing.assert_allclose(f32(got[2]), f32(want[2]), atol=g_atol, rtol=g_rtol, err_msg="dh")
  np.testing.assert_allclose(f32(got[3]), f32(want[3]), atol=g_atol, rtol=g_rtol, err_msg="dw")


@pytest.mark.parametrize("transform", [PLAIN, CAPPED], ids=["plain", "capped"])
def test_reference_matches_materialized(transform):
  want = _value_and_grads(logprob.materialized, "float32", True, **transform)
  got = _value_and_grads(functools.partial(logprob.reference, block_n=16), "float32", True,
                         True, **transform)
  _assert_close(got, want, "float32")
  assert bool(jnp.all(want[0] <= 0)) and bool(jnp.all(want[1] >= 0))


@pytest.mark.parametrize("vocab_major", [False, True], ids=["DV", "VD"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("transform", [PLAIN, CAPPED], ids=["plain", "capped"])
def test_xla_matches_materialized(dtype, transform, vocab_major):
  want = _value_and_grads(logprob.materialized, dtype, True, **transform)
  got = _value_and_grads(logprob.token_logprobs, dtype, True, vocab_major, impl="xla",
                         block_sizes=BLOCKS, **transform)
  _assert_close(got, want, dtype)


@pytest.mark.parametrize("platform", ["gpu", "tpu"])
@pytest.mark.parametrize("dtype,transform,with_entropy,vocab_major", [
    ("float32", CAPPED, True, False), ("bfloat16", CAPPED, True, True),
    ("float32", PLAIN, False, True)],
                         ids=["f32-capped-entropy-DV", "bf16-capped-entropy-VD", "f32-plain-VD"])
def test_pallas_interpret_matches_reference(platform, dtype, transform, with_entropy,
                                            vocab_major):
  want = _value_and_grads(logprob.reference, dtype, with_entropy, vocab_major, **transform)
  got = _value_and_grads(logprob.token_logprobs, dtype, with_entropy, vocab_major,
                         impl="interpret", platform=platform, block_sizes=BLOCKS, **transform)
  _assert_close(got, want, dtype)


def test_merge_tile_by_tile_equals_combine():
  """The TPU forward's online merge (running maximum from MASKED, tile by tile, a fully masked
  tile included) gives `combine`'s logp, entropy and lse over the same tiles."""
  from kernels.logprob import common  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  z = jnp.asarray(4.0 * rng.standard_normal((5, 512)), jnp.float32)
  valid = jnp.arange(512) < 300  # The third tile is partial, the fourth past the vocabulary.
  hit = jnp.arange(512)[None, :] == jnp.asarray([0, 7, 130, 299, 255])[:, None]
  tiles = [common.tile_stats(z[:, k:k + 128], valid[k:k + 128], hit[:, k:k + 128])
           for k in (0, 128, 256, 384)]
  want = common.combine(*(jnp.stack(a) for a in zip(*tiles)), axis=0)
  acc = (jnp.full((5, 1), common.MASKED), *(jnp.zeros((5, 1)),) * 3)
  for tile in tiles:
    acc = common.merge(acc, tile)
  got = common.combine(*(a[None] for a in acc), axis=0)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)
  logz = jax.nn.logsumexp(jnp.where(valid, z, -jnp.inf), axis=-1)
  np.testing.assert_allclose(np.asarray(got[2][:, 0]), np.asarray(logz), rtol=1e-6)


def test_auto_is_xla_on_cpu_and_default_blocks_work():
  h, w, t, _, _ = _inputs("float32")
  want = logprob.materialized(h, w, t)
  np.testing.assert_allclose(logprob.token_logprobs(h, w, t), want, atol=2e-5)
  np.testing.assert_allclose(logprob.token_logprobs(h[:5], w, t[:5], impl="xla"), want[:5],
                             atol=2e-5)


def test_bad_arguments_raise():
  h, w, t, _, _ = _inputs("float32")
  with pytest.raises(ValueError, match="impl"):
    logprob.token_logprobs(h, w, t, impl="cuda")
  with pytest.raises(ValueError, match="GPU or TPU"):
    logprob.token_logprobs(h, w, t, impl="pallas")
  with pytest.raises(ValueError, match="temperature"):
    logprob.token_logprobs(h, w, t, temperature=0.0)
  with pytest.raises(ValueError, match="block_v"):
    logprob.BlockSizes(block_n=8, block_v=0)


def test_completion_logprobs_equal_full_forward_logits():
  """The trainer's fused path == log_softmax of `models.forward` logits, values and gradients."""
  from rl_jax import models  # pylint: disable=g-import-not-at-top
  from rl_jax.rl import logprobs  # pylint: disable=g-import-not-at-top
  cfg = models.ModelConfig(vocab_size=V, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2,
                           d_ff=64, max_seq_len=16)
  params = models.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(1)
  prompt = jnp.asarray(rng.integers(3, V, (3, 4)), jnp.int32)
  prompt_mask = jnp.asarray([[1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 0, 1]], bool)
  completion = jnp.asarray(rng.integers(0, V, (3, 5)), jnp.int32)
  mask = jnp.asarray(np.arange(5)[None, :] < np.array([5, 2, 4])[:, None])

  def full(params):
    logits = models.forward(cfg, params, jnp.concatenate([prompt, completion], 1),
                            jnp.concatenate([prompt_mask, mask], 1))[:, 3:-1]
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits / 0.7), completion[..., None], -1)
    return jnp.where(mask, logp[..., 0], 0.0)

  fused = functools.partial(logprobs.completion_logprobs, cfg, prompt=prompt,
                            prompt_mask=prompt_mask, completion=completion,
                            completion_mask=mask, temperature=0.7)
  total = lambda fn: lambda p: jnp.sum(fn(p) * jnp.arange(15.0).reshape(3, 5))  # noqa: E731
  np.testing.assert_allclose(jax.jit(fused)(params), jax.jit(full)(params), atol=1e-5)
  got, want = jax.jit(jax.grad(total(fused)))(params), jax.jit(jax.grad(total(full)))(params)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got),
                          jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(a, b, atol=1e-4, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("n", [64, 60])  # 60 tokens are padded to whole shards.
def test_sharded_kernel_wrapper_equals_one_device(n):
  # impl='auto' runs the TPU (Mosaic) kernel per device in a shard_map over the tokens under a
  # context mesh; the wrapper, run here around the XLA path on 8 CPU devices, must give one
  # device's values and gradients (the unembedding's gradient summed over the token shards).
  from kernels.logprob import ops  # pylint: disable=g-import-not-at-top
  from rl_jax import parallel  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  h = jnp.asarray(rng.standard_normal((n, 16)), jnp.float32)
  w = jnp.asarray(rng.standard_normal((16, 40)), jnp.float32)
  t = jnp.asarray(rng.integers(0, 40, n), jnp.int32)
  run = functools.partial(ops._run, family="xla", table="cpu", interpret=False,  # pylint: disable=protected-access
                          soft_cap=None, temperature=0.7, with_entropy=True, block_sizes=None,
                          vocab_major=False)

  def loss(h, w, sharded):
    fn = functools.partial(ops._sharded, run, with_entropy=True) if sharded else run  # pylint: disable=protected-access
    logp, ent = fn(h, w, t)
    return jnp.sum(logp * jnp.arange(n)) + jnp.sum(ent), (logp, ent)

  grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True), static_argnums=2)
  (_, want), dwant = grad(h, w, False)
  mesh = parallel.make_mesh((2, 4, 1))
  with jax.set_mesh(mesh):
    (_, got), dgot = grad(h, w, True)
    text = jax.jit(lambda h, w: ops._sharded(run, h, w, t, with_entropy=True)).lower(h, w).as_text()  # pylint: disable=protected-access
  assert "shard_map" in text or "manual" in text  # The wrapper did split the tokens.
  # Float32 sums in another order: errors relative to each array's largest entry.
  for a, b in zip(jax.tree_util.tree_leaves((got, dgot)), jax.tree_util.tree_leaves((want, dwant))):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))
