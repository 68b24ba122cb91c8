"""Tests for rl_jax.checkpoint: round-trips, retention, resume, mismatch errors."""

from __future__ import annotations

import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from rl_jax import checkpoint


@flax.struct.dataclass
class _State:
  params: dict
  opt_state: optax.OptState
  step: jax.Array
  rng: jax.Array  # typed key
  raw_rng: jax.Array  # legacy uint32 key


def _make_state(width=4, seed=0):
  params = {"dense": {"w": jnp.arange(3.0 * width).reshape(3, width),
                      "b": jnp.zeros(width, jnp.bfloat16)}}
  tx = optax.adamw(1e-2)
  opt_state = tx.init(params)
  grads = jax.tree.map(jnp.ones_like, params)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return _State(params, opt_state, jnp.asarray(7, jnp.int32),
                jax.random.key(seed), jax.random.PRNGKey(seed + 1))


def _assert_equal(a, b):
  a_leaves, a_def = jax.tree.flatten(a)
  b_leaves, b_def = jax.tree.flatten(b)
  assert a_def == b_def
  for x, y in zip(a_leaves, b_leaves):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      assert jax.dtypes.issubdtype(y.dtype, jax.dtypes.prng_key)
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_save_restore_round_trip(tmp_path):
  state = _make_state()
  meta = {"phase": "rl", "data_pos": 123, "wall_time": 4.5}
  with checkpoint.Checkpointer(tmp_path, save_every=1) as ckpt:
    assert ckpt.maybe_save(7, state, meta)
    for target in (state, jax.eval_shape(lambda: state)):
      restored, restored_meta = ckpt.restore(7, target)
      _assert_equal(restored, state)
      assert restored_meta == meta
  # Restored keys are usable.
  jax.random.normal(restored.rng, ())
  jax.random.normal(restored.raw_rng, ())


def test_restore_in_a_fresh_checkpointer_with_shardings(tmp_path):
  state = _make_state()
  ckpt = checkpoint.Checkpointer(tmp_path, save_every=5)
  ckpt.maybe_save(5, state, {"phase": "sft"})
  ckpt.close()
  fresh = checkpoint.Checkpointer(tmp_path, save_every=5)
  assert fresh.latest_step() == 5
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  abstract = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), state)
  restored, meta = fresh.restore(5, abstract)
  _assert_equal(restored, state)
  assert meta == {"phase": "sft"}
  assert restored.params["dense"]["w"].sharding == sharding
  fresh.close()


def test_key_form_follows_the_target(tmp_path):
  state = _make_state()
  with checkpoint.Checkpointer(tmp_path, save_every=1) as ckpt:
    ckpt.maybe_save(1, state)
    swapped = state.replace(rng=jax.random.key_data(state.rng),
                            raw_rng=jax.random.wrap_key_data(state.raw_rng))
    restored, meta = ckpt.restore(1, jax.eval_shape(lambda: swapped))
  assert meta == {}
  _assert_equal(restored, swapped)


def test_save_every_and_max_to_keep(tmp_path):
  state = _make_state()
  with checkpoint.Checkpointer(tmp_path, save_every=3, max_to_keep=2) as ckpt:
    assert ckpt.latest_step() is None
    saved = [s for s in range(1, 11) if ckpt.maybe_save(s, state, {"s": s})]
    assert saved == [3, 6, 9]
    assert ckpt.maybe_save(10, state, {"s": 10}, force=True)
    assert not ckpt.maybe_save(10, state, force=True)  # already on disk
    assert ckpt.latest_step() == 10
    assert ckpt.all_steps() == [9, 10]
    assert ckpt.restore(9, state)[1] == {"s": 9}
  assert sorted(os.listdir(tmp_path)) == ["10", "9"]


def test_failed_save_never_becomes_latest(tmp_path, monkeypatch):
  state = _make_state()
  ckpt = checkpoint.Checkpointer(tmp_path, save_every=1)
  ckpt.maybe_save(1, state)

  def crash(*args, **kwargs):
    raise OSError("disk died mid-save")

  monkeypatch.setattr(ocp.JsonCheckpointHandler, "async_save", crash)
  with pytest.raises(OSError, match="disk died"):
    ckpt.maybe_save(2, state)
  monkeypatch.undo()
  assert any(".orbax-checkpoint-tmp" in f for f in os.listdir(tmp_path))
  assert ckpt.latest_step() == 1
  ckpt.close()
  fresh = checkpoint.Checkpointer(tmp_path, save_every=1)
  assert fresh.latest_step() == 1
  assert fresh.maybe_save(2, state)
  fresh.close()
  assert sorted(os.listdir(tmp_path)) == ["1", "2"]


def test_mismatched_tree_is_a_clear_error(tmp_path):
  with checkpoint.Checkpointer(tmp_path, save_every=1) as ckpt:
    ckpt.maybe_save(1, _make_state(width=4))
  fresh = checkpoint.Checkpointer(tmp_path, save_every=1)
  other = _make_state(width=5)
  with pytest.raises(checkpoint.CheckpointMismatchError) as err:
    fresh.restore(1, jax.eval_shape(lambda: other))
  message = str(err.value)
  assert str(tmp_path) in message and "params.dense.w (3, 4) vs (3, 5)" in message
  renamed = other.replace(params={"dense": {"kernel": other.params["dense"]["w"]}})
  with pytest.raises(checkpoint.CheckpointMismatchError,
                     match="not the checkpoint: params.dense.kernel"):
    fresh.restore(1, renamed)
  with pytest.raises(FileNotFoundError, match="step 3"):
    fresh.restore(3, other)
  fresh.close()


def test_meta_must_be_json(tmp_path):
  with checkpoint.Checkpointer(tmp_path, save_every=1) as ckpt:
    with pytest.raises(TypeError, match="JSON"):
      ckpt.maybe_save(1, _make_state(), {"bad": object()})
    assert ckpt.latest_step() is None
