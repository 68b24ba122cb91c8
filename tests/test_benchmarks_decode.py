"""benchmarks/decode.py at a tiny size: the engines decode the same drawn lengths, and the work
counts order as they must (refill <= stop <= scan slot-steps)."""

import numpy as np
import pytest

from benchmarks import decode as bench

pytestmark = pytest.mark.usefixtures("fast_compiles")  # Compiling dominates the tiny size.


def test_long_tail_lengths():
  x = bench.long_tail_lengths(4000, 256, median=32.0, sigma=1.0, seed=0)
  assert x.min() >= 1 and x.max() <= 256
  assert abs(np.median(x) - 32) <= 2
  assert np.percentile(x, 99) > 4 * np.median(x)  # A long tail.


def test_decode_benchmark_tiny(capsys):
  out = bench.main(["--vocab=32", "--prompts=2", "--samples=4", "--prompt_len=4",
                    "--tokens=16", "--median_len=4", "--repeats=1", "--slot_divisors", "2"])
  assert capsys.readouterr().out.count("\n") == 1  # One JSON line.
  syn = out["synthetic"]
  eng = syn["engines"]
  assert set(eng) == {"scan", "stop", "refill_S4"}
  useful = {r["useful_tokens"] for r in eng.values()}
  assert len(useful) == 1  # The same requests, the same lengths.
  assert eng["scan"]["slot_steps"] == 8 * 16
  assert eng["stop"]["slot_steps"] == 8 * syn["lengths"]["max"]
  assert eng["refill_S4"]["slot_steps"] <= eng["stop"]["slot_steps"]
  for r in eng.values():
    assert 0 < r["useful_tokens_per_slot_step"] <= 1
    assert r["useful_tokens_per_slot_step"] == r["useful_tokens"] / r["slot_steps"]
    assert r["wall_s"] > 0
  assert set(syn["goal_met_by"]) <= set(eng)
