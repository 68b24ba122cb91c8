"""Scanned vs unrolled decoder layers (`config.model.scan_layers`): start-up, step time, memory.

    python -m benchmarks.scan_layers --quick    # SmolLM2-135M GRPO steps only (minutes)
    python -m benchmarks.scan_layers            # + TPU AOT compiles of Qwen3-1.7B / 8B rl_step

SmolLM2-135M-Instruct (`--model_dir`, written by `python -m rl_jax.models.convert_gguf`): the
GRPO step of `benchmarks.peers` (`_peer_rl_jax`: sampler, reward, reference and update, float32,
`--threads` CPU threads), once per layout with an empty persistent compilation cache (cold) and
once more with the cache that run filled (warm), each in its own process, run side by side in
the order unrolled, scanned, unrolled, scanned. Per run: the first step's wall time and its
trace / lower / backend seconds (`compile_cache.CompileStats`), the mean steady step time
(`--steps` steps after the first) and the process's peak RSS.

Full mode adds (`--aot_only`: only this), for each of `--aot_models` (variants of
experiments/configs/scale.py, with `--aot_remat` and `--aot_param_dtype`; the defaults, full
remat and bfloat16 compute weights on v5p:2x2x1, are the README's Qwen3-8B rows that fit),
`experiments.aot`'s compile of `rl_step` for the TPU `--aot_topology` (libtpu, no TPU), scanned
and unrolled, each in its own process: compile seconds (with the micro-batch piece's compile),
per-device memory (`memory_analysis`) and the compiling process's peak RSS. The unrolled
Qwen3-8B compile takes 17-22 minutes and ~21 GB of host memory.

Prints ONE JSON line: the ratios scanned / unrolled (`first_step_ratio_scanned_vs_unrolled`
cold, `first_step_ratio_warm_scanned_vs_unrolled`, `steady_step_ratio_scanned_vs_unrolled`,
`peak_rss_ratio_scanned_vs_unrolled`, the first step's trace / lower / backend ratios, and per AOT
model `aot_compile_ratio_scanned_vs_unrolled` and `aot_memory_ratio_scanned_vs_unrolled`), then
the raw runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Optional, Sequence

from benchmarks import peers

LAYOUTS = ("unrolled", "scanned")
DEFAULT_MODEL_DIR = os.path.join(peers.REPO, "runs", "models", "smollm2-135m-instruct")
AOT_MODELS = ("qwen3-1.7b", "qwen3-8b")
_AOT_PREFIX = "SCAN_AOT_RESULT "
_COMPILE_KEYS = ("trace_s", "lower_s", "compile_s")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--quick", action="store_true", help="SmolLM2 steps only (no AOT compiles)")
  p.add_argument("--aot_only", action="store_true", help="AOT compiles only (no SmolLM2 steps)")
  p.add_argument("--model_dir", default=DEFAULT_MODEL_DIR,
                 help="Hugging Face checkpoint of the GRPO steps (SmolLM2-135M-Instruct)")
  p.add_argument("--shape", default=peers.GOAL_SHAPE, help="B prompts x G samples x T tokens")
  p.add_argument("--steps", type=int, default=3, help="steady steps after the first")
  p.add_argument("--threads", type=int, default=1, help="CPU threads of every worker")
  p.add_argument("--timeout", type=float, default=1200.0, help="seconds per worker")
  p.add_argument("--aot_models", default=",".join(AOT_MODELS),
                 help="comma-separated experiments/configs/scale.py variants to AOT-compile")
  p.add_argument("--aot_topology", default="v5p:2x2x1", help="TPU topology of the AOT compiles")
  p.add_argument("--aot_remat", default="full", help="model.remat of the AOT compiles")
  p.add_argument("--aot_param_dtype", default="bfloat16",
                 help="model.param_dtype of the AOT compiles (master weights stay float32)")
  p.add_argument("--aot_timeout", type=float, default=3600.0, help="seconds per AOT compile")
  p.add_argument("--aot_worker", default="", help=argparse.SUPPRESS)  # scale.py variant
  p.add_argument("--scanned", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  peers.parse_shape(args.shape)
  if args.steps < 1 or args.threads < 1:
    p.error("--steps and --threads must be >= 1")
  if args.quick and args.aot_only:
    p.error("--quick (no AOT) and --aot_only (only AOT) exclude each other")
  args.aot_models = [m.strip() for m in args.aot_models.split(",") if m.strip()]
  # What `peers.worker_cmd` reads.
  args.python = sys.executable
  args.rl_jax_minibatches = 1
  return args


def _step_cmd(args: argparse.Namespace, layout: str, cache_dir: str, workdir: str) -> list[str]:
  args.rl_jax_cache_dir = cache_dir
  cmd = peers.worker_cmd(args, "rl_jax", args.model_dir, args.shape, workdir)
  return cmd + (["--scan_layers"] if layout == "scanned" else [])


def _summary(run: dict[str, Any]) -> dict[str, Any]:
  if "error" in run:
    return run
  keys = ("first_step_s", "step_s", "step_s_all", "peak_rss_bytes", "first_step_compile",
          "scan_layers", "gen_tokens_per_s", "wall_s")
  return {k: run.get(k) for k in keys}


def _figure(run: Optional[dict[str, Any]], *path: str) -> Any:
  for key in path:
    if not isinstance(run, dict) or "error" in run:
      return None
    run = run.get(key)
  return run


def _mean_step(runs: dict[str, Any]) -> Optional[float]:
  """Mean steady step time over the cold and the warm run (every timed step of both)."""
  steps = [s for r in runs.values() if r and "error" not in r for s in r["step_s_all"][1:]]
  return sum(steps) / len(steps) if steps else None


def smollm2_steps(args: argparse.Namespace) -> dict[str, Any]:
  """{'runs': layout -> {'cold', 'warm'}, ratios...} of the GRPO steps on `args.model_dir`."""
  env = peers.thread_env(args.threads)
  runs: dict[str, dict[str, Any]] = {layout: {} for layout in LAYOUTS}
  scratch = tempfile.mkdtemp(prefix="scan_layers_bench_")
  try:
    for state in ("cold", "warm"):
      for layout in LAYOUTS:
        cache_dir = os.path.join(scratch, f"cache_{layout}")
        workdir = os.path.join(scratch, f"work_{layout}_{state}")
        found = peers.cache_state(cache_dir)["state"]
        run = peers.run_subprocess(_step_cmd(args, layout, cache_dir, workdir), env, args.timeout)
        run = _summary(run)
        run["compile_cache"] = found
        runs[layout][state] = run
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  un, sc = runs["unrolled"], runs["scanned"]
  out = {
      "first_step_ratio_scanned_vs_unrolled": peers.ratio(
          _figure(sc, "cold", "first_step_s"), _figure(un, "cold", "first_step_s")),
      "first_step_ratio_warm_scanned_vs_unrolled": peers.ratio(
          _figure(sc, "warm", "first_step_s"), _figure(un, "warm", "first_step_s")),
      "steady_step_ratio_scanned_vs_unrolled": peers.ratio(_mean_step(sc), _mean_step(un)),
      "peak_rss_ratio_scanned_vs_unrolled": peers.ratio(
          _figure(sc, "cold", "peak_rss_bytes"), _figure(un, "cold", "peak_rss_bytes")),
      "first_step_compile_ratios_scanned_vs_unrolled": {
          state: {k: peers.ratio(_figure(sc, state, "first_step_compile", k),
                                 _figure(un, state, "first_step_compile", k))
                  for k in _COMPILE_KEYS}
          for state in ("cold", "warm")},
      "runs": runs,
  }
  return out


def _aot_cmd(args: argparse.Namespace, model: str, layout: str) -> list[str]:
  return [sys.executable, "-m", "benchmarks.scan_layers", "--aot_worker", model,
          "--aot_topology", args.aot_topology, "--aot_remat", args.aot_remat,
          "--aot_param_dtype", args.aot_param_dtype] + (
              ["--scanned"] if layout == "scanned" else [])


def _run_aot(args: argparse.Namespace, model: str, layout: str) -> dict[str, Any]:
  env = dict(os.environ, PYTHONPATH=peers.REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  return peers.run_subprocess(_aot_cmd(args, model, layout), env, args.aot_timeout)


def aot_worker(args: argparse.Namespace) -> None:
  """In its own process: `rl_step` of scale.py:<args.aot_worker> compiled for the topology."""
  from experiments.configs import scale  # pylint: disable=g-import-not-at-top
  from rl_jax import compile_cache  # pylint: disable=g-import-not-at-top
  from rl_jax.tools import aot  # pylint: disable=g-import-not-at-top
  from benchmarks import _peer_common  # pylint: disable=g-import-not-at-top

  config = scale.get_config(args.aot_worker)
  config.model.scan_layers = bool(args.scanned)
  config.model.remat = args.aot_remat
  config.model.param_dtype = args.aot_param_dtype
  with compile_cache.CompileStats() as stats:
    lines = {line["phase"]: line for line in aot.compile_phases(config, args.aot_topology,
                                                                ["rl_step"])}
  step = lines["rl_step"]
  keys = ("compile_seconds", "fits", "per_device_total_bytes", "argument_bytes", "temp_bytes",
          "output_bytes", "alias_bytes", "error")
  result = {k: step[k] for k in keys if k in step}
  result.update(model=args.aot_worker, scan_layers=bool(args.scanned), remat=args.aot_remat,
                param_dtype=args.aot_param_dtype,
                topology=args.aot_topology, params=lines["setup"]["params"],
                compile_stats=stats.as_dict(), peak_rss_bytes=_peer_common.peak_rss_bytes())
  print(peers.RESULT_PREFIX + json.dumps(result), flush=True)


def aot_compiles(args: argparse.Namespace) -> dict[str, Any]:
  """Per model: both layouts' rl_step compile and their ratios."""
  runs = {m: {layout: _run_aot(args, m, layout) for layout in LAYOUTS} for m in args.aot_models}
  return {
      "aot_compile_ratio_scanned_vs_unrolled": {
          m: peers.ratio(_figure(r["scanned"], "compile_seconds"),
                         _figure(r["unrolled"], "compile_seconds")) for m, r in runs.items()},
      "aot_memory_ratio_scanned_vs_unrolled": {
          m: peers.ratio(_figure(r["scanned"], "per_device_total_bytes"),
                         _figure(r["unrolled"], "per_device_total_bytes"))
          for m, r in runs.items()},
      "aot_host_rss_ratio_scanned_vs_unrolled": {
          m: peers.ratio(_figure(r["scanned"], "peak_rss_bytes"),
                         _figure(r["unrolled"], "peak_rss_bytes")) for m, r in runs.items()},
      "aot_runs": runs,
  }


def run(args: argparse.Namespace) -> dict[str, Any]:
  mode = "quick" if args.quick else "aot_only" if args.aot_only else "full"
  out: dict[str, Any] = {"benchmark": "scan_layers", "mode": mode,
                         "model_dir": args.model_dir, "shape": args.shape, "steps": args.steps,
                         "threads": args.threads}
  if args.aot_only:
    pass
  elif not os.path.isfile(os.path.join(args.model_dir, "config.json")):
    out["error"] = (f"no checkpoint at --model_dir={args.model_dir!r}; write SmolLM2 there with "
                    "python -m rl_jax.models.convert_gguf --out DIR")
  else:
    out.update(smollm2_steps(args))
  if not args.quick:
    out.update(aot_compiles(args))
    out.update(aot_topology=args.aot_topology, aot_remat=args.aot_remat,
               aot_param_dtype=args.aot_param_dtype)
  return out


def main(argv: Optional[Sequence[str]] = None) -> Optional[dict[str, Any]]:
  args = parse_args(argv)
  if args.aot_worker:
    aot_worker(args)
    return None
  out = run(args)
  print(json.dumps(out))
  return out


if __name__ == "__main__":
  main()
