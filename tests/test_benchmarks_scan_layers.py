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


def _stub_tunix(tmp_path):
  """An 'interpreter' standing in for a tunix environment: it records its command line and prints
  a worker result (tunix itself is not in the test environment)."""
  stub, record = tmp_path / "tunix_python", tmp_path / "tunix_argv"
  result = {"first_step_s": 40.0, "step_s": 8.0, "step_s_all": [40.0, 8.0],
            "peak_rss_bytes": 1 << 30, "gen_tokens_per_s": 100.0}
  stub.write_text(f"#!/bin/sh\necho \"$@\" > {record}\n"
                  f"echo 'PEER_RESULT {json.dumps(result)}'\n")
  stub.chmod(0o755)
  return str(stub), record


def test_scan_layers_benchmark_tiny(tiny_dir, capsys, monkeypatch, tmp_path):
  # XLA optimizations off in the six workers (they inherit this environment): what is checked is
  # the report's shape and that every figure is there and positive, not its values; the tiny
  # programs' time is mostly compiling.
  monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
  tunix_python, tunix_argv = _stub_tunix(tmp_path)
  out = bench.main(["--model_dir", tiny_dir, "--shape=2x2x4", "--steps=1",
                    "--aot_models=tiny", "--aot_topology=v5e:2x2",
                    "--aot_param_dtype=float32", f"--tunix_python={tunix_python}"])
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
  # tunix ran once, on the same model and shape, and the ratios divide by its figures.
  argv = tunix_argv.read_text().split()
  assert argv[:2] == ["-m", "benchmarks._peer_tunix"]
  assert argv[argv.index("--model_dir") + 1] == tiny_dir
  assert [argv[argv.index(f) + 1] for f in ("--batch", "--group", "--tokens")] == ["2", "2", "4"]
  assert out["tunix"]["first_step_s"] == 40.0
  assert out["first_step_ratio_scanned_vs_tunix"] == pytest.approx(
      runs["scanned"]["cold"]["first_step_s"] / 40.0, abs=1e-3)
  assert out["first_step_ratio_unrolled_vs_tunix"] == pytest.approx(
      runs["unrolled"]["cold"]["first_step_s"] / 40.0, abs=1e-3)
  assert out["steady_step_ratio_scanned_vs_tunix"] > 0
  assert out["aot_compile_ratio_scanned_vs_unrolled"]["tiny"] > 0
  assert out["aot_memory_ratio_scanned_vs_unrolled"]["tiny"] > 0
  assert out["aot_peak_memory_ratio_scanned_vs_unrolled"]["tiny"] > 0
  aot = out["aot_runs"]["tiny"]
  assert aot["scanned"]["scan_layers"] and not aot["unrolled"]["scan_layers"]
  assert aot["scanned"]["fits"] and aot["scanned"]["per_device_total_bytes"] > 0


def test_bad_shape_is_a_one_line_usage_error(capsys):
  with pytest.raises(SystemExit):
    bench.parse_args(["--aot_shape=16x8"])
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].endswith(" error: --aot_shape: shape '16x8' is not BxGxT (e.g. 8x4x32)")
  assert not any("Traceback" in line for line in err)
  with pytest.raises(SystemExit):
    bench.parse_args(["--quick", "--tunix_python=/nonexistent/python"])
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].endswith(" error: --tunix_python=/nonexistent/python: not an executable file "
                          "(expected the python of an environment with google-tunix installed)")


def test_parse_args_shape_flags():
  args = bench.parse_args(["--device_only", "--aot_shape=16x8x1024", "--aot_minibatches=4"])
  assert args.device_only and args.aot_shape == "16x8x1024" and args.aot_minibatches == 4
  assert bench._shape_flags(args) == ["--aot_shape=16x8x1024", "--aot_minibatches=4"]
  assert bench._shape_flags(bench.parse_args([])) == []
  for bad in (["--aot_shape=16x8"], ["--aot_minibatches=-1"], ["--aot_layers=-2"],
              ["--device_only", "--quick"]):
    with pytest.raises((SystemExit, ValueError)):
      bench.parse_args(bad)


def test_scale_config_takes_the_shape():
  args = bench.parse_args(["--aot_shape=16x8x512", "--aot_minibatches=4", "--aot_remat=none",
                           "--aot_layers=3"])
  args.scanned = True
  config = bench._scale_config(args, "qwen3-1.7b")
  assert (config.rl.prompts_per_step, config.rl.group_size, config.sampling.max_new_tokens,
          config.rl.num_minibatches) == (16, 8, 512, 4)
  assert config.model.scan_layers and config.model.remat == "none"
  assert config.model.n_layers == 3
  default = bench._scale_config(bench.parse_args([]), "qwen3-1.7b")
  assert (default.rl.prompts_per_step, default.rl.num_minibatches) == (64, 16)


def test_device_only_tiny(capsys):
  # rl_step of scale.py:tiny on the local devices (here the CPU), both layouts, real arrays.
  out = bench.main(["--device_only", "--aot_models=tiny", "--steps=1", "--aot_shape=4x4x8",
                    "--aot_minibatches=2", "--aot_param_dtype=float32", "--aot_layers=2"])
  printed = capsys.readouterr().out.strip().splitlines()
  assert len(printed) == 1 and json.loads(printed[0]) == out
  runs = out["device_runs"]["tiny"]
  for layout in bench.LAYOUTS:
    run = runs[layout]
    assert "error" not in run, run
    assert run["scan_layers"] == (layout == "scanned")
    assert (run["prompts"], run["group"], run["new_tokens"], run["num_minibatches"]) == (
        4, 4, 8, 2)
    assert run["compile_seconds"] > 0 and run["step_s"] > 0 and len(run["step_s_all"]) == 2
    assert run["analysis_total_bytes"] > run["argument_bytes"] > 0
  # The same random weights (2 layers, stacked for the scan) and completions: the same loss.
  assert abs(runs["scanned"]["loss"] - runs["unrolled"]["loss"]) <= 1e-5 * abs(
      runs["unrolled"]["loss"])
  assert (out["aot_shape"], out["aot_minibatches"], out["aot_layers"]) == ("4x4x8", 2, 2)
  assert out["device_step_ratio_scanned_vs_unrolled"]["tiny"] > 0
  assert out["device_analysis_memory_ratio_scanned_vs_unrolled"]["tiny"] > 0
