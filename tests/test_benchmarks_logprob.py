"""benchmarks/logprob.py: the tile sweep runs each shape against one materialized baseline."""

import argparse

import pytest

from benchmarks import logprob as bench


def test_tile_sweep_reports_each_tile_and_the_goal_only_at_its_vocab():
  out = bench.run(n=32, d=16, vocabs=[300], repeats=1, dtype="float32", impl="xla",
                  tiles=(bench.parse_tile("32x128"), bench.parse_tile("16x64x8")))
  rows = out["results"]
  assert [r["tile"] for r in rows] == [{"block_n": 32, "block_v": 128, "block_d": 64},
                                       {"block_n": 16, "block_v": 64, "block_d": 8}]
  assert rows[0]["materialized"] == rows[1]["materialized"]  # one baseline for the sweep
  assert all(0 < r["temp_ratio"] and r["time_ratio"] > 0 for r in rows)
  assert out["impl"] == "xla" and out["goal_met"] is None  # no row at the goal's vocabulary


@pytest.mark.parametrize("text", ["3x", "ax128", "0x128", "64"])
def test_bad_tile_names_the_flag(text):
  with pytest.raises(argparse.ArgumentTypeError, match="--tiles"):
    bench.parse_tile(text)
