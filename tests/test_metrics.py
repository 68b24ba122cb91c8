"""Tests for rl_jax.metrics: JSONL round-trip, truncation, TensorBoard, plots."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from rl_jax import metrics


def _write_run(workdir):
  with metrics.MetricsWriter(workdir) as writer:
    for step in range(1, 6):
      writer.write(step, {"loss": 2.0 / step}, phase="sft")
    for step in range(1, 6):
      writer.write(step, {"reward_mean": np.float32(0.1 * step),
                          "n_tokens": np.int64(7)}, phase="rl")
      writer.write(step, {"heldout_accuracy": 0.05 * step,
                          "heldout_sampled_accuracy": 0.04 * step}, phase="eval")


def test_jsonl_round_trip(tmp_path):
  _write_run(tmp_path)
  records = metrics.read_metrics(tmp_path)
  assert len(records) == 15
  first_rl = [r for r in records if r["phase"] == "rl"][0]
  assert first_rl["step"] == 1
  assert first_rl["reward_mean"] == pytest.approx(0.1)
  assert first_rl["n_tokens"] == 7 and isinstance(first_rl["n_tokens"], int)
  assert isinstance(first_rl["time"], float)
  # One JSON object per line, flushed without close.
  writer = metrics.MetricsWriter(tmp_path)
  writer.write(9, {"loss": 0.5}, phase="sft")
  with open(os.path.join(tmp_path, "metrics.jsonl")) as f:
    last = json.loads(f.read().splitlines()[-1])
  assert last["step"] == 9 and last["loss"] == 0.5
  writer.close()


def test_write_rejects_reserved_and_non_scalar(tmp_path):
  with metrics.MetricsWriter(tmp_path) as writer:
    with pytest.raises(ValueError, match="reserved"):
      writer.write(1, {"step": 3.0}, phase="rl")
    with pytest.raises(ValueError, match="scalar"):
      writer.write(1, {"x": np.ones(3)}, phase="rl")


def test_truncate_drops_only_that_phases_later_steps(tmp_path):
  _write_run(tmp_path)
  with metrics.MetricsWriter(tmp_path) as writer:
    assert writer.truncate("rl", after_step=2) == 3
    writer.write(3, {"reward_mean": 0.9}, phase="rl")  # the resumed run
  records = metrics.read_metrics(tmp_path)
  rl_steps = [r["step"] for r in records if r["phase"] == "rl"]
  assert rl_steps == [1, 2, 3]
  assert [r for r in records if r["phase"] == "rl"][-1]["reward_mean"] == 0.9
  assert sum(r["phase"] == "sft" for r in records) == 5
  assert sum(r["phase"] == "eval" for r in records) == 5
  assert not [f for f in os.listdir(tmp_path) if f.startswith("metrics.jsonl.")]


def test_read_skips_torn_last_line(tmp_path):
  _write_run(tmp_path)
  with open(os.path.join(tmp_path, "metrics.jsonl"), "a") as f:
    f.write('{"step": 6, "pha')
  with pytest.warns(UserWarning, match="torn"):
    assert len(metrics.read_metrics(tmp_path)) == 15


def test_tensorboard_event_file(tmp_path):
  _write_run(tmp_path)
  files = os.listdir(os.path.join(tmp_path, "tb"))
  assert any(f.startswith("events.out.tfevents") for f in files)
  sizes = [os.path.getsize(os.path.join(tmp_path, "tb", f)) for f in files]
  assert max(sizes) > 100
  # The events hold the scalars written (TFRecord framing: length, its CRC, the record, its CRC).
  from tensorboardX.proto import event_pb2  # pylint: disable=import-outside-toplevel
  scalars = {}
  for name in files:
    with open(os.path.join(tmp_path, "tb", name), "rb") as f:
      data = f.read()
    while data:
      (length,) = struct.unpack("<Q", data[:8])
      event = event_pb2.Event.FromString(data[12:12 + length])
      data = data[16 + length:]
      for v in event.summary.value:
        scalars[(v.tag, event.step)] = v.simple_value
  assert scalars[("sft/loss", 4)] == pytest.approx(0.5)
  assert scalars[("rl/reward_mean", 3)] == pytest.approx(0.3)


def test_writer_does_not_import_torch(tmp_path):
  """A run's metrics writer leaves torch unimported (tensorboardX's writer imports it whenever
  it is installed, seconds of every run's start), and torch stays importable afterwards."""
  code = (
      "import importlib.util, sys\n"
      "from rl_jax import metrics\n"
      f"with metrics.MetricsWriter({str(tmp_path)!r}) as w:\n"
      "  w.write(1, {'x': 1.0}, phase='rl')\n"
      "print('torch' in sys.modules)\n"
      "if importlib.util.find_spec('torch') is not None:\n"
      "  import torch\n"
      "  print(torch.zeros(2).sum().item())\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True).stdout.split()
  assert out[0] == "False"
  assert out[1:] in ([], ["0.0"])


def _assert_png(path, min_bytes=10_000):
  with open(path, "rb") as f:
    data = f.read()
  assert data[:8] == b"\x89PNG\r\n\x1a\n"
  assert len(data) > min_bytes


def test_plot_curves(tmp_path):
  _write_run(tmp_path)
  out = metrics.plot_curves(tmp_path)
  assert out == os.path.join(tmp_path, "curves.png")
  _assert_png(out)


def test_heldout_panels_are_per_phase(tmp_path):
  """SFT and RL each count steps from 1: their held-out curves get separate panels."""
  with metrics.MetricsWriter(tmp_path) as writer:
    for step in (10, 20):
      writer.write(step, {"heldout_accuracy": 0.3}, phase="sft")
      writer.write(step // 10, {"heldout_accuracy": 0.5, "heldout_step_error_rate": 0.2},
                   phase="rl")
  panels = metrics.curve_panels(metrics.read_metrics(tmp_path))
  titles = [title for title, _, _ in panels]
  assert titles == ["Held-out, sft steps", "Held-out, rl steps"]
  assert panels[0][2] == [("heldout_accuracy", [10, 20], [0.3, 0.3])]
  assert [label for label, _, _ in panels[1][2]] == ["heldout_accuracy",
                                                     "heldout_step_error_rate"]
  assert panels[1][2][0][1] == [1, 2]
  # RL's step 0 (the SFT policy's accuracy) starts its curve.
  started = metrics.curve_panels(metrics.read_metrics(tmp_path),
                                 {"rl": {"heldout_accuracy": 0.25}})
  assert started[1][2][0][1:] == ([0, 1, 2], [0.25, 0.5, 0.5])
  assert started[1][2][1][1] == [1, 2]  # No start value for the step error rate.
  _assert_png(metrics.plot_curves(tmp_path))


def test_plot_curves_with_missing_keys(tmp_path):
  with metrics.MetricsWriter(tmp_path) as writer:
    writer.write(1, {"other": 1.0}, phase="rl")
  _assert_png(metrics.plot_curves(tmp_path, out_png="empty.png"), 1_000)
  with metrics.MetricsWriter(tmp_path) as writer:
    writer.write(1, {"loss": 1.0}, phase="sft")
  _assert_png(metrics.plot_curves(tmp_path, out_png="sft_only.png"))


def test_missing_file_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
    metrics.read_metrics(tmp_path)


def test_disabled_writer_writes_nothing(tmp_path):
  workdir = tmp_path / "w"
  with metrics.MetricsWriter(workdir, enabled=False) as writer:
    writer.write(1, {"loss": 1.0}, phase="sft")
  assert not workdir.exists()


class _Terminal(io.StringIO):

  def isatty(self):
    return True


def test_progress_bar_on_a_terminal():
  stream = _Terminal()
  bar = metrics.ProgressBar(10, "rl", initial=2, stream=stream)
  bar.update(3, loss=np.float32(0.25), phase="rl")
  assert bar._bar.n == 5
  bar.close()
  assert "rl" in stream.getvalue() and "loss=0.25" in stream.getvalue()
  quiet = metrics.ProgressBar(10, "x", disable=True)
  quiet.update(1)
  quiet.close()


def test_progress_off_a_terminal_is_a_few_plain_lines(capsys):
  """In a log file: one line every `every` steps and at the end, no carriage returns."""
  bar = metrics.ProgressBar(200, "rl")  # stderr under capsys is not a terminal.
  for step in range(200):
    bar.update(1, loss=0.5, reward_mean=step / 200)
  bar.close()
  err = capsys.readouterr().err
  lines = err.splitlines()
  assert "\r" not in err and len(lines) == 20
  assert lines[0].startswith("rl 10/200 (5%) loss=0.5 reward_mean=0.045 ")
  assert lines[-1].startswith("rl 200/200 (100%)")
  short = metrics.ProgressBar(7, "sft", initial=3, every=2)
  for _ in range(4):
    short.update(1)
  assert [l.split()[1] for l in capsys.readouterr().err.splitlines()] == ["4/7", "6/7", "7/7"]
