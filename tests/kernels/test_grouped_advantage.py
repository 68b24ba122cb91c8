"""Grouped advantage: reference vs the registered estimators and hand numbers; the Pallas kernel
(interpret mode) vs the reference over modes, segment layouts and reward columns."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from kernels import grouped_advantage as ga
from rl_jax.rl import advantages

B, G, T = 5, 4, 12
R = B * G


def _batch(k: int = 1, seed: int = 0):
  rng = np.random.default_rng(seed)
  rewards = rng.integers(0, 3, (R, k)).astype(np.float32) + 0.1 * rng.standard_normal((R, k))
  valid = np.ones(R, bool)
  valid[[1, 2, 3]] = False        # Group 0 is a singleton.
  valid[[9, 14]] = False          # Ragged groups.
  rewards[~valid] = np.nan        # Padding must not leak.
  lengths = rng.integers(1, T + 1, R)
  mask = np.arange(T)[None, :] < lengths[:, None]
  return rewards.squeeze(-1) if k == 1 else rewards, valid, mask


def test_hand_numbers():
  r = jnp.array([1.0, 0.0, 0.0, 1.0])
  v = jnp.ones(4, bool)
  adv, _ = ga.reference(r, v, group_size=4, mode="mean_std", eps=0.0)
  np.testing.assert_allclose(adv, [0.8660254, -0.8660254, -0.8660254, 0.8660254], rtol=1e-6)
  adv, _ = ga.reference(r, v, group_size=4, mode="loo")
  np.testing.assert_allclose(adv, [2 / 3, -2 / 3, -2 / 3, 2 / 3], rtol=1e-6)
  adv, _ = ga.reference(jnp.array([0.0, 1.0, 5.0]), jnp.ones(3, bool), group_size=3,
                        mode="median_mad", eps=0.0)
  np.testing.assert_allclose(adv, [-1.0, 0.0, 4.0])  # med 1, |r - med| = (1, 0, 4) -> MAD 1.


@pytest.mark.parametrize("mode,name,kw", [
    ("mean_std", "grpo", {}), ("mean", "drgrpo", {}), ("loo", "rloo", {}),
    ("median_mad", "mc_grpo", {"mad_eps": 1e-3})])
def test_reference_matches_registered_estimator(mode, name, kw):
  rewards, valid, _ = _batch()
  want, _ = advantages.get(name)(rewards.reshape(B, G), valid.reshape(B, G), **kw)
  eps = kw.get("mad_eps", 1e-6)
  got, _ = ga.reference(jnp.asarray(rewards), jnp.asarray(valid), group_size=G, mode=mode,
                        eps=eps)
  np.testing.assert_allclose(got, want.reshape(-1), atol=1e-6)


@pytest.mark.parametrize("mode", ga.MODES)
def test_segment_ids_equal_contiguous_groups(mode):
  rewards, valid, mask = _batch(k=2)
  perm = np.random.default_rng(1).permutation(R)
  ids = (np.arange(R) // G)[perm]
  want, want_tok = ga.reference(jnp.asarray(rewards), jnp.asarray(valid), group_size=G,
                                mode=mode, weights=(1.0, 0.5), token_mask=jnp.asarray(mask))
  got, got_tok = ga.reference(jnp.asarray(rewards[perm]), jnp.asarray(valid[perm]),
                              segment_ids=jnp.asarray(ids), num_segments=B, mode=mode,
                              weights=(1.0, 0.5), token_mask=jnp.asarray(mask[perm]))
  np.testing.assert_allclose(got, np.asarray(want)[perm], atol=1e-6)
  np.testing.assert_allclose(got_tok, np.asarray(want_tok)[perm], atol=1e-6)
  np.testing.assert_allclose(
      want_tok, (np.asarray(want) @ [1.0, 0.5])[:, None] * mask, atol=1e-6)


@pytest.mark.parametrize("mode", ["mean_std", "mean", "loo"])
@pytest.mark.parametrize("k,contiguous", [(1, True), (2, False)], ids=["K1-contig", "K2-ids"])
def test_pallas_interpret_matches_reference(mode, k, contiguous):
  rewards, valid, mask = _batch(k=k)
  if contiguous:
    seg = dict(group_size=G)
  else:  # Segments given by id, rows interleaved.
    seg = dict(segment_ids=jnp.asarray(np.arange(R) % B), num_segments=B)
  kw = dict(mode=mode, token_mask=jnp.asarray(mask), weights=(0.5,) * k, **seg)
  want, want_tok = ga.reference(jnp.asarray(rewards), jnp.asarray(valid), **kw)
  got, got_tok = ga.grouped_advantage(jnp.asarray(rewards), jnp.asarray(valid),
                                      impl="interpret", block_r=8, block_t=8, **kw)
  np.testing.assert_allclose(got, want, atol=1e-5)
  np.testing.assert_allclose(got_tok, want_tok, atol=1e-5)
  assert got.shape == rewards.shape and got_tok.shape == (R, T)


def test_dispatch():
  rewards, valid, _ = _batch()
  want, tok = ga.grouped_advantage(jnp.asarray(rewards), jnp.asarray(valid), group_size=G)
  assert tok is None
  np.testing.assert_allclose(want, ga.reference(jnp.asarray(rewards), jnp.asarray(valid),
                                                group_size=G)[0])
  with pytest.raises(ValueError, match="GPU or TPU"):
    ga.grouped_advantage(jnp.asarray(rewards), jnp.asarray(valid), group_size=G, impl="pallas")
  with pytest.raises(ValueError, match="exactly one"):
    ga.reference(jnp.asarray(rewards), jnp.asarray(valid))
  with pytest.raises(ValueError, match="mode"):
    ga.reference(jnp.asarray(rewards), jnp.asarray(valid), group_size=G, mode="z")


@pytest.mark.parametrize("name,kw,mode", [
    ("grpo", {}, "mean_std"), ("grpo", {"scale": "none"}, "mean"), ("rloo", {}, "loo")])
def test_estimators_run_the_kernel(name, kw, mode):
  # The registered estimators compute their group statistics with the grouped-advantage kernel:
  # its interpret mode (the Pallas body) and 'auto' (the XLA reference on CPU) give the reference.
  rewards, valid, _ = _batch()
  want, _ = ga.reference(jnp.asarray(rewards), jnp.asarray(valid), group_size=G, mode=mode)
  r, v = rewards.reshape(B, G), valid.reshape(B, G)
  for impl in ("interpret", "auto"):
    got, weight = advantages.get(name)(r, v, impl=impl, **kw)
    np.testing.assert_allclose(got.reshape(-1), want, atol=1e-6)
    np.testing.assert_array_equal(weight.reshape(-1), valid.astype(np.float32))


def test_auto_lowers_to_the_kernel_for_tpu_and_to_xla_for_cpu():
  import jax  # pylint: disable=g-import-not-at-top
  from jax.sharding import SingleDeviceSharding  # pylint: disable=g-import-not-at-top

  from rl_jax.tools import topology  # pylint: disable=g-import-not-at-top
  grpo = jax.jit(advantages.get("grpo"))
  rewards, valid, _ = _batch()
  r, v = jnp.asarray(rewards.reshape(B, G)), jnp.asarray(valid.reshape(B, G))
  assert "custom_call" not in grpo.lower(r, v).as_text()
  tpu = SingleDeviceSharding(topology.topology_devices("v5e:2x2")[0])
  args = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=tpu) for x in (r, v)]
  assert "tpu_custom_call" in grpo.trace(*args).lower().as_text()


def test_token_columns_are_padded_to_whole_blocks(monkeypatch):
  # Triton does not mask a partial last block: on an H100, T=100 with block_t=128 gave wrong
  # token advantages while interpret mode matched. The kernel must only ever see whole blocks.
  from kernels.grouped_advantage import kernel  # pylint: disable=g-import-not-at-top
  seen = []
  real = kernel.grouped_advantage

  def spy(*args, **kw):
    seen.append((args[3].shape, kw["block_t"]))
    return real(*args, **kw)

  monkeypatch.setattr(kernel, "grouped_advantage", spy)
  rng = np.random.default_rng(3)
  rewards = jnp.asarray(rng.random(24) < 0.5, jnp.float32)
  valid = jnp.ones(24, bool)
  mask = jnp.asarray(rng.random((24, 13)) < 0.7)
  got, got_tok = ga.grouped_advantage(rewards, valid, group_size=4, token_mask=mask,
                                      impl="interpret", block_r=8, block_t=8)
  (shape, block_t), = seen
  assert shape[1] % block_t == 0 and shape[1] >= 13
  want, want_tok = ga.reference(rewards, valid, group_size=4, token_mask=mask)
  assert got_tok.shape == (24, 13)
  np.testing.assert_allclose(got_tok, want_tok, atol=1e-5)
