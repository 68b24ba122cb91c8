"""Every sampling engine on a (data 2 x fsdp 4) mesh of 8 host devices: its KV cache is split over
the batch axes, and its samples equal those of one device (tokens exactly, log-probs to float
tolerance). `tests/conftest.py` provides the 8 CPU devices.

The inputs are replicated, so only the samplers' own `parallel.shard_batch` constraints can
split the cache: a jitted engine's compiled (per-device) program must hold the cache's buffers
with R / 8 rows; the host-driven tree samplers (TreePO, EPTree) return their caches from jitted
pieces, whose shardings are read directly.
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models, parallel, sampling
from rl_jax.sampling import arrol, echo, engines, eptree, latr, partial, treepo

pytestmark = pytest.mark.usefixtures("fast_compiles")

CFG = models.ModelConfig(vocab_size=19, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                         d_ff=64, max_seq_len=32, tie_embeddings=False)
B, P, T, G = 4, 5, 6, 4  # R = B·G = 16 rows: 2 per device.
SHARDS = 8
EOS = 1
STRATEGY = sampling.Sampling(1.0)


@functools.cache
def _inputs():
  params = jax.device_get(jax.jit(models.init_params, static_argnums=0)(CFG, jax.random.key(0)))
  params["lm_head"] = params["lm_head"] * 0.3  # flat logits: trees branch
  rng = np.random.default_rng(0)
  lengths = np.array([5, 2, 3, 4])
  mask = np.arange(P)[None, :] >= (P - lengths)[:, None]
  prompt = np.where(mask, rng.integers(3, CFG.vocab_size, (B, P)), 0).astype(np.int32)
  return params, prompt, mask


def _head():
  return {"head": {"kernel": jax.random.normal(jax.random.key(1), (CFG.d_model,)),
                   "bias": jnp.float32(0.0)}}


def _partial(params, prompt, mask, rng):
  rows = jnp.repeat(jnp.arange(B), G)
  r = B * G
  empty = (jnp.zeros((r, T), jnp.int32), jnp.zeros((r, T), bool), jnp.zeros((r, T)),
           jnp.zeros((r,), bool))
  return partial._partial_generate(  # pylint: disable=protected-access
      params, prompt[rows], mask[rows], *empty, rng, jnp.int32(2), cfg=CFG, strategy=STRATEGY,
      max_new_tokens=T, eos_id=EOS, pad_id=0, group_size=G)


def _decode_loop(name):
  options = engines.EngineOptions(exit_every=2, num_slots=8)
  return lambda params, prompt, mask, rng: engines.DECODE_LOOPS.get(name)(
      params, prompt, mask, rng, options=options, cfg=CFG, strategy=STRATEGY, max_new_tokens=T,
      eos_id=EOS, pad_id=0, num_samples=G).samples


# The jitted engines: (params, prompt [B, P], mask, rng) -> a pytree whose first fields are
# tokens, mask, logp [R, T] (R = B·G rows).
JITTED = {
    **{f"decode:{name}": _decode_loop(name) for name in engines.DECODE_LOOPS.names()},
    "latr": lambda params, prompt, mask, rng: latr.latr_generate(
        params, prompt, mask, rng, cfg=CFG, strategy=STRATEGY, num_slots=G, max_new_tokens=T,
        eos_id=EOS, options=latr.LatrOptions(tau_abs=0.0, tau_rel=1.0, windows=(2,),
                                             sm_threshold=None, rl_threshold=0.99)),
    "echo": lambda params, prompt, mask, rng: echo.echo_generate(
        params, prompt, mask, rng, cfg=CFG, strategy=STRATEGY, options=echo.EchoOptions(),
        num_slots=G, max_new_tokens=T, eos_id=EOS),
    "arrol": lambda params, prompt, mask, rng: arrol.arrol_generate(
        params, _head(), prompt, mask, rng, cfg=CFG, strategy=STRATEGY, max_new_tokens=T,
        eos_id=EOS, options=arrol.ArrolOptions(oversample=2 * G, keep=G, prune_at=2)).samples,
    "partial": _partial,
}


def _meshes():
  return {1: parallel.make_mesh((1, 1, 1)), SHARDS: parallel.make_mesh((2, 4, 1))}


def _fields(out):
  return [np.asarray(x) for x in (out.tokens, out.mask, out.logp)]


def _assert_same(one, many):
  np.testing.assert_array_equal(many[0], one[0])
  np.testing.assert_array_equal(many[1], one[1])
  np.testing.assert_allclose(many[2], one[2], atol=1e-5)
  assert one[1].sum() > one[1].shape[0]  # rows really sampled several tokens


def _cache_rows(hlo: str, slots: int) -> set[int]:
  """Row counts of the [rows, n_kv_heads, slots, head_dim] buffers of a compiled program."""
  shape = rf"f32\[(\d+),{CFG.n_kv_heads},{slots},{CFG.hd}\]"
  return {int(m) for m in re.findall(shape, hlo)}


@pytest.mark.parametrize("name", sorted(JITTED))
def test_jitted_engine_shards_its_cache_and_matches_one_device(name):
  params, prompt, mask = _inputs()
  fn = jax.jit(JITTED[name])
  outs = {}
  for n, mesh in _meshes().items():
    with jax.set_mesh(mesh):
      args = jax.device_put((params, prompt, mask, jax.random.key(3)),
                            jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
      compiled = fn.lower(*args).compile()
      outs[n] = _fields(jax.device_get(compiled(*args)))
    if n == SHARDS:
      # The cache of R = 16 rows lives as 2 rows a device (ARRoL's N0 = 32 oversampled rows as
      # 4, then its 16 survivors as 2; refill's 8 slots as 1).
      assert (8 if name == "decode:refill" else 16) // SHARDS in _cache_rows(
          compiled.as_text(), P + T), name
  _assert_same(outs[1], outs[SHARDS])


def _record(calls: list, fn, cache_at: int):
  """fn, recording the cache (output `cache_at`) of every call."""

  def wrapped(*args, **kw):
    out = fn(*args, **kw)
    calls.append(out[cache_at])
    return out

  return wrapped


def _assert_batch_sharded(caches: list):
  assert len(caches) >= 2  # the opening's and at least one fork's
  for cache in caches:
    for x in jax.tree_util.tree_leaves((cache.k, cache.v, cache.mask, cache.pos)):
      assert x.sharding.shard_shape(x.shape)[0] == x.shape[0] // SHARDS, x.sharding


@pytest.mark.parametrize("name", ["treepo:fixed", "treepo:newline", "eptree"])
def test_tree_sampler_shards_its_cache_and_matches_one_device(name, monkeypatch):
  params, prompt, mask = _inputs()
  caches = []
  if name == "eptree":
    monkeypatch.setattr(eptree, "generate_with_cache",
                        _record(caches, eptree.generate_with_cache, 1))
    monkeypatch.setattr(eptree, "continue_rows", _record(caches, eptree.continue_rows, 1))
    # M = 2 chains a prompt (8 rows); 8 trees x 1 fork point x 2 branches = 16 continuations.
    run = functools.partial(
        eptree.eptree_rollout, options=eptree.EPTreeOptions(num_chains=2, forks_per_round=1,
                                                            rounds=1, branches=2))
  else:
    segment = name.split(":")[1]
    # pylint: disable-next=protected-access
    monkeypatch.setattr(treepo, "_open", _record(caches, treepo._open, 1))
    piece = "_segment" if segment == "fixed" else "_line_segment"
    monkeypatch.setattr(treepo, piece, _record(caches, getattr(treepo, piece), 1))
    run = functools.partial(
        treepo.treepo_rollout, group=G, options=treepo.TreePOOptions(
            segment_len=2, first_width=2, branches=2, segment=segment,
            delimiters=(5, 7) if segment == "newline" else ()))
  outs = {}
  for n, mesh in _meshes().items():
    caches.clear()
    with jax.set_mesh(mesh):
      outs[n] = _fields(run(params, prompt, mask, jax.random.key(3), cfg=CFG, strategy=STRATEGY,
                            max_new_tokens=T, eos_id=EOS))
  _assert_batch_sharded(caches)  # those of the 8-device run
  _assert_same(outs[1], outs[SHARDS])
