"""Fused (tiled) log-prob vs materialized logits: compiled temporary memory and time.

    python -m benchmarks.logprob                      # N=4096, D=576, V in {49152, 151936}
    python -m benchmarks.logprob --n=1024 --vocab=32768
    python -m benchmarks.logprob --vocab=151936 --impl=pallas --tiles 32x128x32 64x128x32  # a sweep

Measures one forward + backward (value_and_grad of sum(g * logp) w.r.t. hidden and the
unembedding) of `kernels.logprob.token_logprobs` (impl='auto': the tiled XLA path on CPU and
GPU, Mosaic on TPU) and of `kernels.logprob.materialized`, in one process. Memory is XLA's
compiled temporary allocation (`compile().memory_analysis().temp_size_in_bytes`: everything but
the arguments and outputs); time is the median of --repeats runs after one warm-up. Prints one
JSON line with the ratios fused / materialized. Goal (issue #6, on CPU): at V=151936, temp
memory <= 1/8 and time <= 1.3x of materialized.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from kernels import logprob
from kernels.logprob.block_sizes import BlockSizes

GOAL_VOCAB, GOAL_MEMORY, GOAL_TIME = 151936, 1 / 8, 1.3


def _loss_and_grads(fn):
  def loss(h, w, t, g):
    return jnp.sum(g * fn(h, w, t))
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def _measure(fn, args, repeats: int) -> dict:
  step = _loss_and_grads(fn)
  compiled = step.lower(*args).compile()
  mem = compiled.memory_analysis()
  jax.block_until_ready(compiled(*args))  # Warm-up.
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    times.append(time.perf_counter() - start)
  return {"temp_bytes": int(mem.temp_size_in_bytes), "time_s": round(statistics.median(times), 4)}


def parse_tile(text: str) -> BlockSizes:
  """'4096x16384' or '64x128x32' (block_n x block_v [x block_d]) -> BlockSizes."""
  try:
    return BlockSizes(*(int(x) for x in text.lower().split("x")))
  except (TypeError, ValueError) as e:
    raise argparse.ArgumentTypeError(
        f"--tiles: expected BLOCK_NxBLOCK_V[xBLOCK_D] of positive ints, got {text!r}") from e


def run(n: int, d: int, vocabs: list[int], repeats: int, dtype: str, impl: str = "auto",
        tiles: tuple = ()) -> dict:
  rng = np.random.default_rng(0)
  h = jnp.asarray(rng.standard_normal((n, d)), dtype)
  g = jnp.asarray(rng.standard_normal(n), jnp.float32)
  results = []
  for v in vocabs:
    w = jnp.asarray(rng.standard_normal((d, v)) / np.sqrt(d), dtype)
    t = jnp.asarray(rng.integers(0, v, n), jnp.int32)
    args = (h, w, t, g)
    mat = _measure(logprob.materialized, args, repeats)
    for tile in tiles or (None,):
      fn = functools.partial(logprob.token_logprobs, impl=impl, block_sizes=tile)
      try:
        fused = _measure(fn, args, repeats)
      except Exception as e:  # pylint: disable=broad-except  (a tile too large for the chip)
        results.append({"vocab": v, "tile": tile and tile.__dict__, "error": str(e)[:300]})
        continue
      results.append({
          "vocab": v, "tile": tile and tile.__dict__, "fused": fused, "materialized": mat,
          "temp_ratio": round(fused["temp_bytes"] / mat["temp_bytes"], 4),
          "time_ratio": round(fused["time_s"] / mat["time_s"], 3),
          "logits_bytes": n * v * 4,
      })
    del w
  backend = jax.default_backend()
  # The tiles impl='auto' uses: the XLA path's on CPU and GPU, the Mosaic kernel's on TPU.
  platform = {"gpu": "gpu_xla", "tpu": "tpu"}.get(backend, "cpu")
  goal = [r for r in results if r["vocab"] == GOAL_VOCAB]
  return {
      "benchmark": "logprob", "backend": backend, "device": jax.devices()[0].device_kind,
      "n": n, "d": d, "dtype": dtype, "impl": impl,
      "block_sizes": logprob.tuned(platform, dtype).__dict__,
      "results": results,
      "goal": {"vocab": GOAL_VOCAB, "temp_ratio_max": GOAL_MEMORY, "time_ratio_max": GOAL_TIME},
      "goal_met": (all("error" not in r and r["temp_ratio"] <= GOAL_MEMORY
                       and r["time_ratio"] <= GOAL_TIME for r in goal) if goal else None),
  }


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--n", type=int, default=4096, help="tokens N")
  parser.add_argument("--d", type=int, default=576, help="model width D (SmolLM2-135M: 576)")
  parser.add_argument("--vocab", type=int, nargs="+", default=[49152, 151936])
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  parser.add_argument("--impl", default="auto", choices=list(logprob.IMPLS),
                      help="kernels.logprob impl of the fused side")
  parser.add_argument("--tiles", type=parse_tile, nargs="*", default=(),
                      help="tile shapes to sweep, e.g. 4096x16384 64x128x32 (default: the tuned)")
  args = parser.parse_args()
  print(json.dumps(run(args.n, args.d, args.vocab, args.repeats, args.dtype, args.impl,
                       tuple(args.tiles))))


if __name__ == "__main__":
  main()
