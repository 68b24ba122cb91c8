"""benchmarks/faults.py in small: the `:smoke` run (with its faulty reward component and a NaN
step) in subprocesses, stopped by a real SIGTERM once training has begun and killed with SIGKILL
during a checkpoint write, re-run each time, ends with the uninterrupted run's records and
summary. The children share a compilation cache, so each re-start costs imports, not compiles."""

from __future__ import annotations

import os
import random
import signal

from benchmarks import faults


def test_sigterm_and_sigkill_mid_write_then_resume_equals_uninterrupted(tmp_path):
  env = faults.child_env(str(tmp_path / "xla_cache"))
  # XLA optimizations off in every child: the runs are compared with each other (records and
  # summaries), and compiling the smoke pipeline dominates the first start.
  env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
  rng = random.Random(0)
  run_dir = str(tmp_path / "faulty")
  result = faults.run_with_faults(run_dir, ["SIGTERM", "SIGKILL_write"], rng, env,
                                  max_delay=1.0, max_starts=4)
  # SIGTERM: a clean stop with status 143; SIGKILL: killed (-9). Then a third start finishes.
  assert [e["fault"] for e in result["events"]] == ["SIGTERM", "SIGKILL_write"]
  assert [e["exit"] for e in result["events"]] == [128 + signal.SIGTERM, -signal.SIGKILL]
  assert result["events"][0]["in_training"]
  assert result["finished"] and result["starts"] == 3

  ref_dir = str(tmp_path / "reference")
  assert faults.run_with_faults(ref_dir, [], rng, env, max_delay=1.0)["finished"]
  reference = faults.read_records(ref_dir)
  cmp = faults.compare_records(reference, faults.read_records(run_dir))
  assert cmp == {"lost": 0, "duplicated": 0, "differing": 0, "unexpected": 0}
  summary = faults.read_summary(run_dir)
  assert summary == faults.read_summary(ref_dir) and summary["sft_more_steps"] >= 1
  # The in-run faults happened and were contained: the faulty reward raised and hung (scored 0,
  # counted), and the NaN step was skipped, in both runs alike.
  counts = faults._in_run_faults(reference)  # pylint: disable=protected-access
  assert counts["reward_errors"] > 0 and counts["reward_timeouts"] > 0
  assert counts["nonfinite_steps"] == 1
  nan_record = [r for r in reference if r["phase"] == "rl" and r["step"] == faults.NAN_STEP][0]
  assert nan_record["nonfinite"] == 1.0
  assert os.path.isdir(os.path.join(run_dir, "checkpoints", "rl"))
