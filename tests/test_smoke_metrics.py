"""experiments.smoke_metrics: the comparison of two runs' metrics.jsonl (timing keys aside) and
the command each smoke run gets; no run is started."""

from __future__ import annotations

import json
import sys

import pytest

from experiments import smoke_metrics

_LINES = [
    {"step": 1, "phase": "sft", "loss": 4.5369157791137695, "step_seconds": 0.84,
     "time": 1795919596.3},
    {"step": 1, "phase": "rl", "reward_mean": 0.25, "reward/timeouts": 0.0,
     "tokens_per_sec": 812.5, "wall": 3.0, "heldout_accuracy": float("nan")},
]


def _write(path, records) -> str:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(json.dumps(r) + "\n" for r in records))
  return str(path)


def _run(tmp_path, side: str, name: str, records) -> str:
  return _write(tmp_path / side / name / "metrics.jsonl", records)


def test_identical_files_compare_equal(tmp_path):
  a = _run(tmp_path, "a", "default", _LINES)
  b = _run(tmp_path, "b", "default", _LINES)
  assert smoke_metrics.compare_files(a, b) is None


def test_a_differing_value_is_reported_with_its_line_key_and_values(tmp_path):
  changed = [dict(_LINES[0]), dict(_LINES[1], reward_mean=0.5)]
  a = _run(tmp_path, "a", "default", _LINES)
  b = _run(tmp_path, "b", "default", changed)
  assert smoke_metrics.compare_files(a, b) == "line 2 (rl step 1): reward_mean: 0.25 != 0.5"


def test_the_last_bit_of_a_float_is_a_difference(tmp_path):
  loss = _LINES[0]["loss"]
  changed = [dict(_LINES[0], loss=float.fromhex(loss.hex()[:-1] + "1")), _LINES[1]]
  assert changed[0]["loss"] != loss
  a = _run(tmp_path, "a", "default", _LINES)
  b = _run(tmp_path, "b", "default", changed)
  assert smoke_metrics.compare_files(a, b).startswith("line 1 (sft step 1): loss: ")


def test_timing_keys_that_differ_are_ignored(tmp_path):
  retimed = [dict(_LINES[0], step_seconds=9.0, time=1.0),
             dict(_LINES[1], tokens_per_sec=1.0, wall=99.0, **{"reward/timeouts": 2.0})]
  a = _run(tmp_path, "a", "default", _LINES)
  b = _run(tmp_path, "b", "default", retimed)
  assert smoke_metrics.compare_files(a, b) is None
  assert [k for k in ("step_seconds", "time", "tokens_per_sec", "wall", "reward/timeouts",
                      "reward_mean", "step") if smoke_metrics.is_timing(k)] == [
                          "step_seconds", "time", "tokens_per_sec", "wall", "reward/timeouts"]


def test_a_key_present_on_one_side_only_is_a_difference(tmp_path):
  extra = [_LINES[0], dict(_LINES[1], kl=0.0)]
  a = _run(tmp_path, "a", "default", _LINES)
  b = _run(tmp_path, "b", "default", extra)
  assert smoke_metrics.compare_files(a, b) == "line 2 (rl step 1): kl: '<absent>' != 0.0"


def test_key_order_is_part_of_the_bytes(tmp_path):
  a = _run(tmp_path, "a", "default", [{"step": 1, "loss": 1.0}])
  b = _run(tmp_path, "b", "default", [{"loss": 1.0, "step": 1}])
  assert smoke_metrics.compare_files(a, b) == "line 1: same keys and values in another order"


def test_a_different_line_count_is_a_difference(tmp_path):
  a = _run(tmp_path, "a", "default", _LINES)
  b = _run(tmp_path, "b", "default", _LINES[:1])
  assert smoke_metrics.compare_files(a, b) == "2 lines != 1 lines"


def test_a_missing_file_is_a_difference_naming_it(tmp_path):
  a = _run(tmp_path, "a", "default", _LINES)
  missing = str(tmp_path / "b" / "default" / "metrics.jsonl")
  assert smoke_metrics.compare_files(a, missing) == f"missing {missing}"


def test_compare_dirs_gives_one_result_per_run(tmp_path):
  for side in ("a", "b"):
    _run(tmp_path, side, "default", _LINES)
  _run(tmp_path, "a", "latr", _LINES)
  _run(tmp_path, "b", "latr", [_LINES[0], dict(_LINES[1], reward_mean=0.0)])
  _run(tmp_path, "a", "echo", _LINES)
  results = smoke_metrics.compare_dirs(str(tmp_path / "a"), str(tmp_path / "b"),
                                       ["default", "latr", "echo"])
  assert list(results) == ["default", "latr", "echo"]
  assert results["default"] is None
  assert results["latr"] == "line 2 (rl step 1): reward_mean: 0.25 != 0.0"
  assert results["echo"].startswith("missing ") and results["echo"].endswith(
      "b/echo/metrics.jsonl")


@pytest.mark.parametrize("name", ["default", "latr", "april_minpro", "ladder2_oracle_prm"])
def test_each_run_is_one_experiments_run_command_into_its_own_work_dir(name):
  argv = smoke_metrics.command(name, "OUT/" + name)
  config, overrides = smoke_metrics.RUNS[name]
  assert argv[:3] == [sys.executable, "-m", "experiments.run"]
  assert argv[3:5] == [f"--config={config}", f"--workdir=OUT/{name}"]
  assert argv[5:] == [f"--config.{o}" for o in overrides]
