"""benchmarks/learn_parity.py's arithmetic (windows, TRL's band, the verdict) and its TRL worker's
prompt feed. The two systems' runs themselves need TRL (the peers extra) and minutes per seed:
their result is in docs/research/learn-parity.md."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import learn_parity


def test_windows_cover_every_step():
  assert learn_parity.windows(np.zeros((2, 7)), 5) == [(0, 5), (5, 7)]
  assert learn_parity.windows(np.zeros((1, 4)), 1) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_compare_band_and_verdict():
  """Window 1: TRL 0.5 over 2 seeds x 2 steps x 10 rows = 40 completions -> half-width
  1.96 * sqrt(0.25 / 40) = 0.155; rl_jax 0.4 is inside, 0.3 is below."""
  trl = np.full((2, 4), 0.5)
  rl_jax = np.array([[0.4, 0.4, 0.3, 0.3], [0.4, 0.4, 0.3, 0.3]])
  out = learn_parity.compare(rl_jax, trl, rows_per_step=10, window=2)
  half = 1.96 * math.sqrt(0.25 / 40)
  assert out["window_end_step"] == [2, 4]
  assert out["trl_low"] == [round(0.5 - half, 4)] * 2
  assert out["trl_high"] == [round(0.5 + half, 4)] * 2
  assert out["rl_jax"] == [0.4, 0.3]
  assert out["inside_or_above"] == [True, False]
  # Above the band counts as a pass; a TRL mean of 0 or 1 has a zero-width band.
  assert learn_parity.compare(np.ones((1, 2)), np.zeros((1, 2)), 8, 2)["inside_or_above"] == [True]


def test_step_time_skips_each_seeds_first_step():
  rows = [[{"step_seconds": 30.0}, {"step_seconds": 1.0}, {"step_seconds": 3.0}],
          [{"step_seconds": 20.0}, {"step_seconds": 2.0}]]
  assert learn_parity.step_time(rows) == 2.0


def test_rl_jax_steps_reads_the_rl_rows(tmp_path):
  lines = [{"step": 1, "phase": "sft", "loss": 1.0},
           {"step": 1, "phase": "rl", "reward_mean": 0.25, "step_seconds": 2.0,
            "completion_len": 9.0},
           {"step": 2, "phase": "rl", "heldout_accuracy": 0.5}]
  (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
  assert learn_parity.rl_jax_steps(str(tmp_path)) == [
      {"step": 1, "reward_mean": 0.25, "step_seconds": 2.0, "completion_len": 9.0}]


def test_bad_flags_are_one_line_errors(capsys):
  for argv, match in ((["--steps=1"], "--steps must be >= 2"),
                      (["--seeds=a,b"], "--seeds must be comma-separated integers")):
    with pytest.raises(SystemExit):
      learn_parity.parse_args(argv)
    assert match in capsys.readouterr().err
