"""benchmarks/peak_rss.py: each run's own peak RSS, measured by the kernel, in one JSON line.

The experiment runs are replaced by Python processes that hold a known amount of memory, so the
measurement is checked against what each process allocated, in seconds.
"""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks import peak_rss as bench


def _holding(mib: int) -> list[str]:
  return [sys.executable, "-c", f"b = bytearray({mib} * 2**20); b[::4096] = b'x' * len(b[::4096])"]


def test_peak_rss_is_the_childs_own(tmp_path):
  """Not the largest child's so far, nor the measuring process's: Linux keeps a parent's peak in
  a forked child's ru_maxrss, so this process first grows past what the small child holds."""
  ballast = bytearray(400 * 2**20)
  ballast[::4096] = b"x" * len(ballast[::4096])
  big = bench.peak_rss(_holding(300), str(tmp_path / "big.log"))
  small = bench.peak_rss(_holding(20), str(tmp_path / "small.log"))
  del ballast
  assert big["rc"] == small["rc"] == 0
  assert big["peak_rss_bytes"] >= 300 * 2**20
  assert small["peak_rss_bytes"] < 200 * 2**20


def test_main_prints_one_line_with_both_runs_and_their_ratio(tmp_path, monkeypatch, capsys):
  sizes = {"shipped": 60, "variant": 240}
  monkeypatch.setattr(bench, "run_argv", lambda config, workdir, steps, extra: _holding(
      sizes[workdir.rsplit("/", 1)[-1]]))
  # A --workdir that does not exist yet is made (the runs and their logs go under it).
  out = bench.main(["--config=experiments/configs/default.py:smoke",
                    f"--workdir={tmp_path / 'new' / 'dir'}"])
  line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert line == out and line["benchmark"] == "peak_rss"
  shipped, variant = (line["results"][k]["peak_rss_bytes"] for k in ("shipped", "variant"))
  assert shipped < variant and line["shipped_over_variant"] == round(shipped / variant, 3)
  assert line["results"]["variant"]["flags"] == ["--config.model.remat=none"]


def test_run_argv_is_the_experiment_command():
  argv = bench.run_argv("c.py:smoke", "/w", 2, ["--config.model.remat=full"])
  assert argv[1:] == ["-m", "experiments.run", "--config=c.py:smoke", "--workdir=/w",
                      "--config.rl.steps=2", "--config.rl.eval_every=0",
                      "--config.model.remat=full"]


def test_zero_steps_is_refused():
  with pytest.raises(SystemExit, match="--steps=0: expected at least 1 RL step"):
    bench.main(["--config=c.py", "--steps=0"])
