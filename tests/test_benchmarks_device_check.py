"""`benchmarks/device_check.py` end to end on the CPU with `--tiny`: both runs (the SmolLM2 recipe
on a tiny SmolLM2-layout twin, a tiny random Qwen3-layout model) take their steps and the script
prints one JSON line with every key, typed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import test_recipes  # tests/test_recipes.py: fixture problems
import test_smollm2_config  # tests/test_smollm2_config.py: the tiny SmolLM2 twin

from benchmarks import device_check

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_tiny_run_prints_one_json_line(tmp_path):
  model_dir = tmp_path / "smollm2"
  model_dir.mkdir()
  test_smollm2_config._write_checkpoint(str(model_dir))  # pylint: disable=protected-access
  write_problems = test_recipes._write_problems  # pylint: disable=protected-access
  problems = write_problems(tmp_path / "p.jsonl", "gsm8k")
  proc = subprocess.run(
      [sys.executable, "-m", "benchmarks.device_check", "--tiny", f"--smollm2_dir={model_dir}",
       f"--problems={problems}", "--steps=2", f"--workdir={tmp_path / 'runs'}"],
      cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-4000:]
  lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
  assert len(lines) == 1, proc.stdout[-2000:]
  out = json.loads(lines[0])
  assert out["platform"] == "cpu" and out["tiny"] is True and isinstance(out["device"], str)
  for run in device_check.RUNS:
    r = out[run]
    assert sorted(r) == sorted(device_check.RUN_KEYS), (run, r)
    assert r["steps"] == 2, (run, r)
    for key in ("step_seconds", "first_step_seconds", "tokens_per_second", "wall_seconds"):
      assert isinstance(r[key], float) and r[key] > 0, (run, key, r[key])
    assert r["first_step_seconds"] > r["step_seconds"], (run, r)  # the first step compiles
    assert 0.0 <= r["accuracy"] <= 1.0, (run, r)
    # XLA:CPU keeps no allocator statistics: null there, an int on a GPU or TPU.
    assert r["peak_device_bytes"] is None, (run, r)
  assert (tmp_path / "runs" / "smollm2" / "summary.json").exists()


def test_refuses_a_missing_checkpoint(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "benchmarks.device_check", f"--smollm2_dir={tmp_path}"],
      cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
  assert proc.returncode == 2 and "holds no config.json" in proc.stderr, proc.stderr[-2000:]
