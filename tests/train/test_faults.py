"""Faults inside one process: non-finite steps (the jitted guard and the loop's stop), a real
SIGTERM at a step boundary, corrupted checkpoints, and the control's reproducible length."""

from __future__ import annotations

import functools
import os
import signal
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_jax import models
from rl_jax.checkpoint import Checkpointer, CheckpointCorruptError
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.train import loop, phases, signals
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState
from rl_jax.types import Rollout, SFTBatch

CFG = models.ModelConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32,
                         max_seq_len=16)
R, P, T = 8, 4, 4


@functools.cache
def _inputs():
  rng = np.random.default_rng(0)
  params = jax.device_get(jax.jit(models.init_params, static_argnums=0)(CFG, jax.random.key(0)))
  prompt = rng.integers(3, CFG.vocab_size, (R, P)).astype(np.int32)
  tokens = rng.integers(3, CFG.vocab_size, (R, T)).astype(np.int32)
  ones = np.ones((R, T), bool)
  rollout = Rollout(prompt_tokens=prompt, prompt_mask=np.ones((R, P), bool), tokens=tokens,
                    mask=ones, logp=np.full((R, T), -2.0, np.float32),
                    group=np.repeat(np.arange(2), 4).astype(np.int32), valid=np.ones(R, bool))
  sft = SFTBatch(prompt, np.ones((R, P), bool), tokens, ones)
  return params, rollout, sft


def _tree_equal(a, b):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.usefixtures("fast_compiles")
def test_rl_step_with_nan_rewards_is_not_applied():
  params, rollout, _ = _inputs()
  hyper = steps_lib.RLHyper(group_size=4)
  step = jax.jit(functools.partial(steps_lib.rl_step, model_cfg=CFG, hyper=hyper))
  state = TrainState.create(params, optax.adam(1e-2))
  good = np.array([1, 0, 0, 1, 0, 1, 1, 0], np.float32)

  applied, m_good = step(state, params, rollout, good)
  skipped, m_bad = step(state, params, rollout, np.full(R, np.nan, np.float32))

  assert float(m_good["nonfinite"]) == 0.0 and int(applied.step) == 1
  assert any(not np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(applied.params),
                                                      jax.tree_util.tree_leaves(params)))
  assert float(m_bad["nonfinite"]) == 1.0 and not np.isfinite(float(m_bad["loss"]))
  assert int(skipped.step) == 0
  _tree_equal(skipped.params, params)
  _tree_equal(skipped.opt_state, state.opt_state)


@pytest.mark.usefixtures("fast_compiles")
def test_sft_step_with_non_finite_gradient_is_not_applied():
  params, _, batch = _inputs()
  step = jax.jit(functools.partial(steps_lib.sft_step, model_cfg=CFG))
  state = TrainState.create(params, optax.sgd(0.1))
  _, m_good = step(state, batch)
  # An inf in one weight makes the loss (and the gradient) non-finite.
  bad = jax.tree_util.tree_map(lambda x: x, params)
  leaf_path, leaf = jax.tree_util.tree_leaves_with_path(bad)[0]
  bad = jax.tree_util.tree_map_with_path(
      lambda p, x: np.where(np.arange(x.size).reshape(x.shape) == 0, np.inf, x)
      if p == leaf_path else x, bad)
  bad_state = TrainState.create(bad, optax.sgd(0.1))
  out, m_bad = step(bad_state, batch)
  assert float(m_good["nonfinite"]) == 0.0 and np.isfinite(float(m_good["loss"]))
  assert float(m_bad["nonfinite"]) == 1.0 and leaf.size > 0
  assert int(out.step) == 0
  _tree_equal(out.params, bad)


def _fake_exp(tmp_path, limit=3, interrupt_at=""):
  config = types.SimpleNamespace(max_nonfinite_in_a_row=limit, interrupt_at=interrupt_at,
                                 progress=False)
  return types.SimpleNamespace(config=config, workdir=str(tmp_path))


def _counting_step(bad_steps, on_step=None):
  """A step that adds 1 to `w` unless `step + 1` is in `bad_steps` (then it reports nonfinite
  and leaves the state unchanged, as `finite_or_skip` does)."""

  def step_fn(state, step):
    if on_step is not None:
      on_step(step + 1)
    if step + 1 in bad_steps:
      return state, {"loss": float("nan"), "grad_norm": 1.0, "nonfinite": 1.0}
    return {"w": state["w"] + 1}, {"loss": 0.5, "grad_norm": 1.0, "nonfinite": 0.0}

  return step_fn


def test_non_finite_steps_are_counted_and_n_in_a_row_stop_the_run(tmp_path, caplog):
  exp = _fake_exp(tmp_path, limit=3)
  ckpt = Checkpointer(tmp_path / "ckpt", save_every=2, max_to_keep=5)
  state = {"w": jnp.zeros(3)}
  with MetricsWriter(tmp_path) as writer, caplog.at_level("WARNING"):
    # Step 3 alone is skipped and the run goes on; steps 6, 7, 8 in a row stop it at 8.
    with pytest.raises(phases.NonFiniteError,
                       match=r"rl steps 6-8: 3 steps in a row.*max_nonfinite_in_a_row=3.*step 6"):
      phases._run_steps(exp, "rl", (state, 0, {}), 10, _counting_step({3, 6, 7, 8}), writer,
                        ckpt)
  records = {r["step"]: r for r in read_metrics(tmp_path)}
  assert sorted(records) == list(range(1, 9))
  assert [s for s, r in records.items() if r["nonfinite"]] == [3, 6, 7, 8]
  assert sum("not applied" in r.getMessage() for r in caplog.records) == 4
  # The last checkpoint is step 6 (saved every 2; 8 was never saved) and holds the last good
  # state: 4 applied steps (1, 2, 4, 5).
  assert ckpt.all_steps() == [2, 4, 6]
  restored, meta = ckpt.restore(6, {"w": jnp.zeros(3)})
  np.testing.assert_array_equal(restored["w"], [4.0, 4.0, 4.0])
  assert meta["nonfinite_in_a_row"] == 1
  ckpt.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_checkpoints_the_current_step_and_stops(tmp_path, signum):
  exp = _fake_exp(tmp_path)
  ckpt = Checkpointer(tmp_path / "ckpt", save_every=100)
  kill_at = lambda step: os.kill(os.getpid(), signum) if step == 3 else None
  with MetricsWriter(tmp_path) as writer, signals.catch():
    with pytest.raises(signals.Preempted, match=f"{signum.name}.*rl step 3") as info:
      phases._run_steps(exp, "rl", ({"w": jnp.zeros(2)}, 0, {}), 10,
                        _counting_step(set(), kill_at), writer, ckpt)
  assert info.value.signum == signum
  assert ckpt.all_steps() == [3]  # Not a multiple of save_every: saved because of the signal.
  restored, _ = ckpt.restore(3, {"w": jnp.zeros(2)})
  np.testing.assert_array_equal(restored["w"], [3.0, 3.0])
  assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
  # The handlers before the block are back (pytest's SIGINT handler, the default SIGTERM one).
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
  assert signal.getsignal(signal.SIGINT) is not signals._handler  # pylint: disable=protected-access
  ckpt.close()


def _saved(directory, steps):
  ckpt = Checkpointer(directory, save_every=1, max_to_keep=5)
  for s in steps:
    ckpt.maybe_save(s, {"w": jnp.full(4, float(s))}, {"step": s})
  return ckpt


def _largest_file(step_dir):
  """The largest file of the saved state (the array data)."""
  files = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(step_dir, "state"))
           for f in fs]
  return max(files, key=os.path.getsize)


@pytest.mark.parametrize("damage", ["truncate", "flip", "truncate_without_digest"])
def test_a_corrupted_checkpoint_is_named_and_skipped_for_the_previous(tmp_path, caplog, damage):
  directory = tmp_path / "ckpt"
  _saved(directory, [2, 4]).close()
  victim = _largest_file(directory / "4")
  size = os.path.getsize(victim)
  if damage == "flip":
    with open(victim, "r+b") as f:
      data = bytearray(f.read())
      data[size // 2] ^= 0xFF
      f.seek(0)
      f.write(data)
  else:
    with open(victim, "r+b") as f:
      f.truncate(size // 2)
  if damage == "truncate_without_digest":  # Only orbax's own reading can tell.
    os.remove(directory / "4" / "digest.json")

  ckpt = Checkpointer(directory, save_every=1, max_to_keep=5)
  with pytest.raises(CheckpointCorruptError, match=f"checkpoint {directory}/4"):
    ckpt.restore(4, {"w": jnp.zeros(4)})
  with caplog.at_level("WARNING"):
    step, state, meta = ckpt.restore_latest({"w": jnp.zeros(4)})
  assert (step, meta) == (2, {"step": 2})
  np.testing.assert_array_equal(state["w"], np.full(4, 2.0))
  assert any(f"{directory}/4" in r.getMessage() and "skipping" in r.getMessage()
             for r in caplog.records)
  # Moved aside, so step 4 can be written again and read back.
  assert ckpt.all_steps() == [2] and os.listdir(f"{directory}.corrupt") == ["4.0"]
  assert ckpt.maybe_save(4, {"w": jnp.full(4, 9.0)}, {"step": 4})
  np.testing.assert_array_equal(ckpt.restore(4, {"w": jnp.zeros(4)})[0]["w"], np.full(4, 9.0))
  ckpt.close()


def test_checkpoint_shape_mismatch_is_not_treated_as_corruption(tmp_path):
  from rl_jax.checkpoint import CheckpointMismatchError  # pylint: disable=g-import-not-at-top
  ckpt = _saved(tmp_path / "ckpt", [1])
  with pytest.raises(CheckpointMismatchError):
    ckpt.restore_latest({"w": jnp.zeros(5)})
  assert ckpt.all_steps() == [1]
  ckpt.close()


def test_control_length_follows_the_config_not_the_clock(smoke_config):
  """Two identical configs get the same count; it scales with RL's steps and compute, and
  control.steps fixes it outright."""
  c = smoke_config
  base = loop.control_steps(c, 12, 5)
  assert base == loop.control_steps(c.copy_and_resolve_references(), 12, 5)
  # One RL step of the smoke config: prefill 4 x 12 + decode 16 x 5 = 128 token passes, then
  # policy forward + backward (3 x 128); no KL reference. One SFT step: 3 x 16 x (12 + 5).
  assert base == round(4 * (128 + 3 * 128) / (3 * 16 * 17))
  c.rl.steps = 40
  c.rl.kl_coef = 0.1
  assert loop.control_steps(c, 12, 5) == round(40 * (128 + 4 * 128) / (3 * 16 * 17))
  # Ragged groups: R_max = 32 rows, each with its own prompt (no shared prompts).
  c.rl.update(max_group_size=8, rows=32)
  rows = 32 * (12 + 5)
  assert loop.control_steps(c, 12, 5) == round(40 * (4 * 12 + 32 * 5 + 4 * rows) / (3 * 16 * 17))
  c.control.steps = 7
  assert loop.control_steps(c, 12, 5) == 7


def test_a_second_signal_stops_at_once():
  with signals.catch():
    os.kill(os.getpid(), signal.SIGTERM)
    assert signals.requested() == signal.SIGTERM
    with pytest.raises(KeyboardInterrupt, match="second signal"):
      os.kill(os.getpid(), signal.SIGINT)
      signal.sigtimedwait([], 0.5)  # Gives the handler a bytecode boundary to run at.
  assert signals.requested() is None
