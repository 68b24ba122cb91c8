"""benchmarks/scan_decode.py on the tiny preset: one JSON line, and the scanned decode step's
weight copies found in its compiled HLO (every layer weight, once per step)."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import scan_decode as bench


def test_tiny_run_counts_every_layer_weight_copied(capsys):
  flags = os.environ.get("XLA_FLAGS")
  out = bench.main(["--preset=tiny", "--vocab_size=64", "--rows=4", "--slots=16", "--steps=1",
                    "--rounds=1"])
  printed = capsys.readouterr().out.strip().splitlines()
  assert len(printed) == 1 and json.loads(printed[0]) == out  # ONE JSON line
  # The tiny block has 9 weights (q, k, v, o, gate, up, down, two norms): one slice fusion each
  # in the loop body, and over the 3 layers they copy every layer weight once.
  assert out["n_layers"] == 3 and out["hlo_weight_slice_fusions"] == 9
  assert out["hlo_weight_copy_bytes"] == out["layer_weight_bytes"] > 0
  # The gradient (full remat by default) slices them in the forward loop and again backward.
  assert out["remat"] == "full"
  assert out["hlo_grad_weight_copy_bytes"] >= 2 * out["layer_weight_bytes"]
  assert out["decode_step_ratio_scanned_vs_unrolled"] > 0
  assert min(out["decode_step_s"].values()) > 0 and out["copy_layers_s"] > 0
  assert out["copy_gb_per_s"] > 0
  assert {k: len(v) for k, v in out["rounds_s"].items()} == {"unrolled": 1, "scanned": 1,
                                                             "copy": 1}
  assert os.environ.get("XLA_FLAGS") == flags  # the caller's environment is left as it was


def test_hlo_layer_slices_counts_only_one_layer_of_a_stacked_float_array():
  hlo = """%fused_computation.1 (param_0.1: f32[4,8,16], param_1.1: s32[]) -> f32[8,16] {
  %param_0.1 = f32[4,8,16]{2,1,0} parameter(0)
  %param_1.1 = s32[] parameter(1)
  %c = s32[] constant(0)
  %dynamic_slice.1 = f32[1,8,16]{2,1,0} dynamic-slice(%param_0.1, %param_1.1, %c, %c), dynamic_slice_sizes={1,8,16}
  ROOT %bitcast.1 = f32[8,16]{1,0} bitcast(%dynamic_slice.1)
}

%fused_computation.2 (param_0.2: bf16[2,4,3,5]) -> bf16[2,1,3,5] {
  %param_0.2 = bf16[2,4,3,5]{3,2,1,0} parameter(0)
  %dynamic_slice.2 = bf16[2,1,3,5]{3,2,1,0} dynamic-slice(%param_0.2, %c, %i, %c, %c), dynamic_slice_sizes={2,1,3,5}
}

%fused_computation.3 (param_0.3: s32[4]) -> s32[1] {
  %param_0.3 = s32[4]{0} parameter(0)
  %dynamic_slice.3 = s32[1]{0} dynamic-slice(%param_0.3, %i), dynamic_slice_sizes={1}
}

%fused_computation.4 (param_0.4: bf16[4,6]) -> bf16[1,6] {
  %param_0.4 = bf16[4,6]{1,0} parameter(0)
  %dynamic_slice.4 = bf16[1,6]{1,0} dynamic-slice(%param_0.4, %i, %c), dynamic_slice_sizes={1,6}
}"""
  # The cache's layer slice (rows first) and the integer index slice are not weights.
  assert bench.hlo_layer_slices(hlo, 4) == (2, 8 * 16 * 4 + 6 * 2)
  assert bench.hlo_layer_slices(hlo, 5) == (0, 0)


@pytest.mark.parametrize("argv, message", [
    (["--rows=1"], "--rows=1: expected >= 2"),
    (["--steps=0"], "--steps=0: expected >= 1"),
    (["--slots=16", "--steps=5", "--rounds=3"], "--slots=16: expected >= 20"),
    (["--remat=some"], "--remat=some: expected one of"),
    (["--preset=nope"], "--preset=nope: unknown model preset 'nope'"),
    (["--preset=tiny"], "--preset=tiny: preset 'tiny' needs vocab_size"),
])
def test_bad_flags_are_one_line_errors(argv, message, capsys):
  with pytest.raises(SystemExit):
    bench.parse_args(argv)
  err = capsys.readouterr().err.strip().splitlines()
  assert message in err[-1] and not any("Traceback" in line for line in err)
