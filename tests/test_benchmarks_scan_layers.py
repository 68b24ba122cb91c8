"""benchmarks/scan_layers.py on tiny shapes: one JSON line with the scanned / unrolled ratios.

The GRPO steps run on the peers' tiny random Qwen3 (2 layers, made with transformers), and the
AOT part on experiments/configs/scale.py:tiny for a TPU v5e 2x2 slice (libtpu, no TPU).
"""

from __future__ import annotations

import json

import pytest

from benchmarks import _peer_models
from benchmarks import scan_layers as bench


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
  pytest.importorskip("transformers")
  return _peer_models.make_tiny(str(tmp_path_factory.mktemp("models") / "tiny"))


def test_parse_args():
  args = bench.parse_args(["--quick"])
  assert args.quick and args.shape == "8x4x32" and args.steps == 3 and args.threads == 1
  assert args.aot_models == ["qwen3-1.7b", "qwen3-8b"]
  assert bench.parse_args(["--aot_models=tiny,qwen3-1.7b"]).aot_models == ["tiny", "qwen3-1.7b"]
  for bad in (["--shape=8x4"], ["--steps=0"], ["--quick", "--aot_only"]):
    with pytest.raises((SystemExit, ValueError)):
      bench.parse_args(bad)


def test_scan_layers_benchmark_tiny(tiny_dir, capsys, monkeypatch):
  # XLA optimizations off in the six workers (they inherit this environment): what is checked is
  # the report's shape and that every figure is there and positive, not its values; the tiny
  # programs' time is mostly compiling.
  monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
  out = bench.main(["--model_dir", tiny_dir, "--shape=2x2x4", "--steps=1",
                    "--aot_models=tiny", "--aot_topology=v5e:2x2",
                    "--aot_param_dtype=float32"])
  printed = capsys.readouterr().out.strip().splitlines()
  assert len(printed) == 1 and json.loads(printed[0]) == out  # ONE JSON line
  runs = out["runs"]
  for layout in bench.LAYOUTS:
    for state in ("cold", "warm"):
      run = runs[layout][state]
      assert "error" not in run, run
      assert run["scan_layers"] == (layout == "scanned")
      assert run["compile_cache"] == state
      assert run["first_step_s"] > 0 and run["step_s"] > 0 and run["peak_rss_bytes"] > 0
      assert run["first_step_compile"]["trace_s"] > 0
  for key in ("first_step_ratio_scanned_vs_unrolled", "first_step_ratio_warm_scanned_vs_unrolled",
              "steady_step_ratio_scanned_vs_unrolled", "peak_rss_ratio_scanned_vs_unrolled"):
    assert out[key] > 0, key
  assert set(out["first_step_compile_ratios_scanned_vs_unrolled"]["cold"]) == {
      "trace_s", "lower_s", "compile_s"}
  assert out["aot_compile_ratio_scanned_vs_unrolled"]["tiny"] > 0
  assert out["aot_memory_ratio_scanned_vs_unrolled"]["tiny"] > 0
  aot = out["aot_runs"]["tiny"]
  assert aot["scanned"]["scan_layers"] and not aot["unrolled"]["scan_layers"]
  assert aot["scanned"]["fits"] and aot["scanned"]["per_device_total_bytes"] > 0
