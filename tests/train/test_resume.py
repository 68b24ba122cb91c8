"""A run stopped mid-phase (`config.interrupt_at`) and re-run reproduces the uninterrupted run.

Every run here is the `default.py:smoke` pipeline without the more-SFT control (which adds
nothing to resume coverage): SFT (6 steps) -> RL (4 steps, held-out eval every 2) -> evals.

The smoke policy is too weak to earn any reward, so the policy-gradient term alone would leave RL
with zero gradients (and a resume that lost the optimizer state would go unnoticed). The k1
KL-to-reference term has a non-zero gradient even where policy == reference, so every RL step
really updates the parameters, and a resumed RL phase must also get the SFT reference back.
"""

from __future__ import annotations

import json
import os

import pytest

from rl_jax import fingerprint
from rl_jax import workdir as workdir_lib
from rl_jax.metrics import read_metrics
from rl_jax.train import loop, phases
from rl_jax.value.history import RolloutHistory

# Keys that measure time, not the computation.
_TIMING = ("time", "step_seconds", "v0/calib_seconds")
_SUMMARY_TIMING = ("wall_seconds", "sft_train_seconds", "rl_train_seconds")


def _config(make, interrupt_at=""):
  config = make()
  config.control.enabled = False
  config.rl.kl_coef = 0.05
  config.rl.kl_kind = "k1"
  config.rl.optim.warmup_steps = 0  # Every RL update moves the policy, so KL != 0 from step 2.
  # A constant rate: a finished run may then be continued to more RL steps (the last test).
  config.rl.optim.schedule = "constant"
  config.interrupt_at = interrupt_at
  # V0 (rl_jax/value/v0/run.py) trains every 2 steps and is calibrated at each evaluation: its
  # state rides in the RL checkpoint's meta, so its metrics must resume exactly too.
  config.value.v0.update(enabled=True, num_queries=4, mlp_hidden=8, head_dim=8, support_size=16,
                         train_every=2, train_steps=2, calib_prompts=8, calib_samples=2)
  return config


def _records(workdir, phase):
  """{step: record without timing keys} of `phase`; fails on a duplicate step."""
  out = {}
  for r in read_metrics(workdir):
    if r["phase"] != phase:
      continue
    assert r["step"] not in out, f"duplicate record of {phase} step {r['step']} in {workdir}"
    out[r["step"]] = {k: v for k, v in r.items() if k not in _TIMING}
  return out


def _summary(workdir):
  with open(os.path.join(workdir, workdir_lib.SUMMARY_FILE)) as f:
    return json.load(f)


def _assert_same_run(reference, resumed):
  """Same SFT and RL records at every step, same summary (timings aside), no duplicates."""
  for phase, num_steps in (("sft", 6), ("rl", 4)):
    want, got = _records(reference, phase), _records(resumed, phase)
    assert sorted(want) == list(range(1, num_steps + 1))
    assert {"loss", "grad_norm"} <= set(want[1])
    assert sorted(got) == sorted(want), phase
    for step in want:
      assert got[step] == want[step], (phase, step)
  rl = _records(resumed, "rl")
  assert {"reward_mean", "kl", "pg_loss", "rollout_tokens"} <= set(rl[1])
  assert all(r["grad_norm"] > 0 for r in rl.values())  # Every RL step changes the policy.
  assert all(r["kl"] != 0 for step, r in rl.items() if step > 1)
  heldout = [r["heldout_accuracy"] for r in rl.values() if "heldout_accuracy" in r]
  assert len(heldout) == 2  # rl.eval_every=2 of 4 steps.
  assert {"v0/loss", "v0/sigma0_sq", "v0/brier", "baseline_global_mean/brier"} <= set(rl[2])
  assert {"v0/loss", "v0/brier", "baseline_past_rate/coverage"} <= set(rl[4])
  # The rollout history (checkpointed in the RL meta) is the uninterrupted run's: 4 steps x 4
  # prompts, one record each.
  want_h = RolloutHistory.from_jsonl(os.path.join(reference, workdir_lib.HISTORY_FILE))
  got_h = RolloutHistory.from_jsonl(os.path.join(resumed, workdir_lib.HISTORY_FILE))
  assert len(want_h) == 16 and got_h == want_h
  assert sorted(set(want_h.records()["step"].tolist())) == [0, 1, 2, 3]
  assert (want_h.records()["attempts"] == 4).all()
  want, got = _summary(reference), _summary(resumed)
  assert got["rl_accuracy"] == want["rl_accuracy"]
  assert 0.0 <= got["rl_accuracy"] <= 1.0
  assert ({k: v for k, v in got.items() if k not in _SUMMARY_TIMING}
          == {k: v for k, v in want.items() if k not in _SUMMARY_TIMING})


# XLA optimizations off (`fast_compiles`): every run here is compared with another run of the same
# programs, and compiling the smoke pipeline's programs dominates its time.
pytestmark = pytest.mark.usefixtures("fast_compiles")


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, smoke_config_factory, fast_compiles):
  """(workdir, config factory) of the uninterrupted run, shared by the tests of this module."""
  del fast_compiles  # Requested first: the reference run compiles as the resumed runs do.
  workdir = str(tmp_path_factory.mktemp("uninterrupted"))
  loop.run(_config(smoke_config_factory), workdir)
  return workdir, smoke_config_factory


def test_rl_interrupted_and_resumed_matches_uninterrupted(reference_run, tmp_path):
  reference, make = reference_run
  workdir = str(tmp_path)
  with pytest.raises(phases.Interrupted, match="rl step 2"):
    loop.run(_config(make, "rl:2"), workdir)
  assert sorted(_records(workdir, "rl")) == [1, 2]
  assert not os.path.exists(os.path.join(workdir, workdir_lib.SUMMARY_FILE))
  # Simulate a crash after step 3 was logged but before it was checkpointed: the resumed run must
  # drop that record, not duplicate it.
  with open(os.path.join(workdir, workdir_lib.METRICS_FILE), "a") as f:
    f.write(json.dumps({"step": 3, "phase": "rl", "loss": 123.0, "time": 0.0}) + "\n")

  with open(os.path.join(workdir, workdir_lib.WALL_CLOCK_FILE)) as f:
    first = json.load(f)
  assert list(first) == ["process_0"] and first["process_0"] > 0  # kept up to its last record

  summary = loop.run(_config(make), workdir)

  assert summary["rl_steps"] == 4
  _assert_same_run(reference, workdir)
  assert _records(workdir, "rl")[3]["loss"] != 123.0
  # Wall seconds count both processes: the stopped one's up to its last record, so they are at
  # least the SFT and RL steps' own seconds (which a checkpoint carries across processes).
  with open(os.path.join(workdir, workdir_lib.WALL_CLOCK_FILE)) as f:
    ledger = json.load(f)
  assert ledger["process_0"] == first["process_0"] and sorted(ledger) == ["process_0",
                                                                         "process_1"]
  assert summary["wall_seconds"] == pytest.approx(sum(ledger.values()))
  assert summary["wall_seconds"] >= summary["sft_train_seconds"] + summary["rl_train_seconds"]


def test_sft_interrupted_and_resumed_matches_uninterrupted(reference_run, tmp_path):
  reference, make = reference_run
  workdir = str(tmp_path)
  with pytest.raises(phases.Interrupted, match="sft step 3"):
    loop.run(_config(make, "sft:3"), workdir)
  assert sorted(_records(workdir, "sft")) == [1, 2, 3]
  assert not _records(workdir, "rl")
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["sft"]

  loop.run(_config(make), workdir)

  _assert_same_run(reference, workdir)


def test_finished_run_rerun_is_a_no_op(reference_run, tmp_path):
  """Re-running a finished workdir trains nothing more and keeps the same results."""
  reference, make = reference_run
  with open(os.path.join(reference, workdir_lib.METRICS_FILE)) as f:
    before = f.read()
  summary = loop.run(_config(make), reference)
  with open(os.path.join(reference, workdir_lib.METRICS_FILE)) as f:
    assert f.read() == before
  assert summary["rl_accuracy"] == _summary(reference)["rl_accuracy"]
  assert summary["wall_seconds"] >= summary["sft_train_seconds"]


def test_finished_run_continued_to_more_rl_steps_matches_the_longer_run(reference_run, tmp_path):
  """A finished 2-step RL run re-run with rl.steps=4 goes on from its checkpoint and ends as the
  4-step run does from scratch (metrics, history, final evaluations, summary); it cannot then be
  shortened again."""
  reference, make = reference_run
  workdir = str(tmp_path)
  short = _config(make)
  short.rl.steps = 2
  assert loop.run(short, workdir)["rl_steps"] == 2
  assert sorted(_records(workdir, "rl")) == [1, 2]

  summary = loop.run(_config(make), workdir)

  assert summary["rl_steps"] == 4
  _assert_same_run(reference, workdir)
  with pytest.raises(fingerprint.ConfigMismatch, match="cannot be shortened"):
    loop.run(short, workdir)
