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
per-device memory (`memory_analysis`: the total it allocates and XLA's peak of live bytes) and the
compiling process's peak RSS. The unrolled Qwen3-8B process compiles for about 9 minutes alone on
2 cores (17-22 beside other jobs) and takes ~21 GB of host memory.

`--device_only` measures what the AOT compile can only estimate, on the machine's own accelerator
(a GPU, or a TPU host): for each of `--aot_models`, in its own process per layout, `rl_step` on
real arrays (random weights, random completions) over a mesh of the local devices: compile
seconds, XLA's `memory_analysis()`, the allocator's peak bytes in use (`memory_stats()`, absent
on CPU) and the mean step time of `--steps` steps after the first. `--aot_shape` and
`--aot_minibatches` shrink scale.py's RL step (64x8x1024 in 16 micro-batches) for both the AOT
and the device runs (`--aot_layers` its depth); the weights are the same random draw in both
layouts; the micro-batch of 32 rows x 1,280 tokens stays the same at 16x8x1024 in 4.

Prints ONE JSON line: the ratios scanned / unrolled (`first_step_ratio_scanned_vs_unrolled`
cold, `first_step_ratio_warm_scanned_vs_unrolled`, `steady_step_ratio_scanned_vs_unrolled`,
`peak_rss_ratio_scanned_vs_unrolled`, the first step's trace / lower / backend ratios; with
`--tunix_python`, `first_step_ratio_scanned_vs_tunix` (cold), `first_step_ratio_unrolled_vs_tunix`
and `steady_step_ratio_scanned_vs_tunix`, from google-tunix's GRPO step on the same model and
shape, run between the cold and the warm runs; per AOT model
`aot_compile_ratio_scanned_vs_unrolled`, `aot_memory_ratio_scanned_vs_unrolled` and
`aot_peak_memory_ratio_scanned_vs_unrolled`; with `--device_only`, per model
`device_step_ratio_scanned_vs_unrolled`, `device_peak_memory_ratio_scanned_vs_unrolled`,
`device_analysis_memory_ratio_scanned_vs_unrolled` and `device_compile_ratio_scanned_vs_unrolled`),
then the raw runs.
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
  p.add_argument("--tunix_python", default="",
                 help="interpreter of an environment with google-tunix (pip install -e "
                      "'.[peers]'): tunix's GRPO step on the same model and shape runs between "
                      "the cold and the warm runs ('' = no tunix run)")
  p.add_argument("--aot_models", default=",".join(AOT_MODELS),
                 help="comma-separated experiments/configs/scale.py variants to AOT-compile")
  p.add_argument("--aot_topology", default="v5p:2x2x1", help="TPU topology of the AOT compiles")
  p.add_argument("--aot_remat", default="full", help="model.remat of the AOT compiles")
  p.add_argument("--aot_param_dtype", default="bfloat16",
                 help="model.param_dtype of the AOT compiles (master weights stay float32)")
  p.add_argument("--aot_timeout", type=float, default=3600.0, help="seconds per AOT compile")
  p.add_argument("--aot_shape", default="",
                 help="BxGxT of the AOT / device rl_step ('' = scale.py's 64x8x1024)")
  p.add_argument("--aot_minibatches", type=int, default=0,
                 help="rl.num_minibatches of the AOT / device rl_step (0 = scale.py's 16)")
  p.add_argument("--aot_layers", type=int, default=0,
                 help="model.n_layers of the AOT / device rl_step (0 = the preset's)")
  p.add_argument("--device_only", action="store_true",
                 help="rl_step of --aot_models run on the local accelerator, both layouts")
  p.add_argument("--device_worker", default="", help=argparse.SUPPRESS)  # scale.py variant
  p.add_argument("--aot_worker", default="", help=argparse.SUPPRESS)  # scale.py variant
  p.add_argument("--scanned", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  for flag in ("shape", "aot_shape"):
    if getattr(args, flag):
      try:
        peers.parse_shape(getattr(args, flag))
      except ValueError as e:
        p.error(f"--{flag}: {e}")
  if args.steps < 1 or args.threads < 1:
    p.error("--steps and --threads must be >= 1")
  if sum((args.quick, args.aot_only, args.device_only)) > 1:
    p.error("--quick, --aot_only and --device_only exclude each other")
  if args.tunix_python and not os.access(args.tunix_python, os.X_OK):
    p.error(f"--tunix_python={args.tunix_python}: not an executable file (expected the python "
            f"of an environment with google-tunix installed)")
  if args.aot_layers < 0:
    p.error(f"--aot_layers={args.aot_layers}: expected >= 0 (0 = the preset's)")
  if args.aot_minibatches < 0:
    p.error(f"--aot_minibatches={args.aot_minibatches}: expected >= 0 (0 = scale.py's)")
  args.aot_models = [m.strip() for m in args.aot_models.split(",") if m.strip()]
  # What `peers.worker_cmd` reads.
  args.python = sys.executable
  args.rl_jax_minibatches = 1
  return args


def _step_cmd(args: argparse.Namespace, layout: str, cache_dir: str, workdir: str) -> list[str]:
  args.rl_jax_cache_dir = cache_dir
  cmd = peers.worker_cmd(args, "rl_jax", args.model_dir, args.shape, workdir)
  return cmd + (["--scan_layers"] if layout == "scanned" else [])


# What a GRPO-step worker's result keeps: every system's figures, and rl_jax's compile record.
_STEP_KEYS = ("first_step_s", "step_s", "step_s_all", "peak_rss_bytes", "gen_tokens_per_s",
              "wall_s")
_RL_JAX_KEYS = _STEP_KEYS + ("first_step_compile", "scan_layers")


def _summary(run: dict[str, Any], keys: Sequence[str] = _RL_JAX_KEYS) -> dict[str, Any]:
  """A worker's result cut to `keys` (an error result as it is)."""
  if "error" in run:
    return run
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
  tunix = None
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
      if state == "cold" and args.tunix_python:
        tunix = _tunix_run(args, env, os.path.join(scratch, "work_tunix"))
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
  if tunix is not None:
    out.update({
        "first_step_ratio_scanned_vs_tunix": peers.ratio(
            _figure(sc, "cold", "first_step_s"), _figure(tunix, "first_step_s")),
        "first_step_ratio_unrolled_vs_tunix": peers.ratio(
            _figure(un, "cold", "first_step_s"), _figure(tunix, "first_step_s")),
        "steady_step_ratio_scanned_vs_tunix": peers.ratio(
            _mean_step(sc), _figure(tunix, "step_s")),
        "tunix": tunix})
  return out


def _tunix_run(args: argparse.Namespace, env: dict[str, str], workdir: str) -> dict[str, Any]:
  """google-tunix's GRPO step (`benchmarks._peer_tunix`) on the model and shape of the rl_jax
  runs, in `args.tunix_python`; tunix keeps no compilation cache, so every run of it is cold."""
  cmd = peers.worker_cmd(argparse.Namespace(**dict(vars(args), python=args.tunix_python)),
                         "tunix", args.model_dir, args.shape, workdir)
  return _summary(peers.run_subprocess(cmd, env, args.timeout), _STEP_KEYS)


def _run_worker(args: argparse.Namespace, role: str, model: str, layout: str,
                *extra: str) -> dict[str, Any]:
  """One `--aot_worker` / `--device_worker` process of scale.py:<model> in `layout`."""
  cmd = [sys.executable, "-m", "benchmarks.scan_layers", f"--{role}", model, *extra,
         "--aot_remat", args.aot_remat, "--aot_param_dtype", args.aot_param_dtype]
  cmd += _shape_flags(args) + (["--scanned"] if layout == "scanned" else [])
  env = dict(os.environ, PYTHONPATH=peers.REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  return peers.run_subprocess(cmd, env, args.aot_timeout)


def _layout_ratios(runs: dict[str, dict[str, Any]], key: str) -> dict[str, Optional[float]]:
  """Per model: scanned / unrolled of `key`."""
  return {m: peers.ratio(_figure(r["scanned"], key), _figure(r["unrolled"], key))
          for m, r in runs.items()}


def _step_settings(args: argparse.Namespace) -> dict[str, Any]:
  """The RL step the AOT and device runs measured (None: scale.py's or the preset's)."""
  return dict(aot_shape=args.aot_shape or "64x8x1024", aot_remat=args.aot_remat,
              aot_param_dtype=args.aot_param_dtype, aot_minibatches=args.aot_minibatches or None,
              aot_layers=args.aot_layers or None)


def _shape_flags(args: argparse.Namespace) -> list[str]:
  return ([f"--aot_shape={args.aot_shape}"] if args.aot_shape else []) + (
      [f"--aot_minibatches={args.aot_minibatches}"] if args.aot_minibatches else []) + (
      [f"--aot_layers={args.aot_layers}"] if args.aot_layers else [])


def _scale_config(args: argparse.Namespace, model: str):
  """scale.py:<model> with the layout, remat, compute dtype and the RL step's shape of `args`."""
  from experiments.configs import scale  # pylint: disable=g-import-not-at-top
  config = scale.get_config(model)
  config.model.scan_layers = bool(args.scanned)
  config.model.remat = args.aot_remat
  config.model.param_dtype = args.aot_param_dtype
  if args.aot_shape:
    b, g, t = peers.parse_shape(args.aot_shape)
    config.rl.prompts_per_step, config.rl.group_size, config.sampling.max_new_tokens = b, g, t
  if args.aot_minibatches:
    config.rl.num_minibatches = args.aot_minibatches
  if args.aot_layers:
    config.model.n_layers = args.aot_layers
  return config


def aot_worker(args: argparse.Namespace) -> None:
  """In its own process: `rl_step` of scale.py:<args.aot_worker> compiled for the topology."""
  from rl_jax import compile_cache  # pylint: disable=g-import-not-at-top
  from rl_jax.tools import aot  # pylint: disable=g-import-not-at-top
  from benchmarks import _peer_common  # pylint: disable=g-import-not-at-top

  config = _scale_config(args, args.aot_worker)
  with compile_cache.CompileStats() as stats:
    lines = {line["phase"]: line for line in aot.compile_phases(config, args.aot_topology,
                                                                ["rl_step"])}
  step = lines["rl_step"]
  keys = ("compile_seconds", "fits", "per_device_total_bytes", "peak_bytes", "argument_bytes",
          "temp_bytes", "output_bytes", "alias_bytes", "error")
  result = {k: step[k] for k in keys if k in step}
  result.update(model=args.aot_worker, scan_layers=bool(args.scanned), remat=args.aot_remat,
                param_dtype=args.aot_param_dtype,
                topology=args.aot_topology, params=lines["setup"]["params"],
                compile_stats=stats.as_dict(), peak_rss_bytes=_peer_common.peak_rss_bytes())
  print(peers.RESULT_PREFIX + json.dumps(result), flush=True)


def aot_compiles(args: argparse.Namespace) -> dict[str, Any]:
  """Per model: both layouts' rl_step compile and their ratios."""
  runs = {m: {layout: _run_worker(args, "aot_worker", m, layout,
                                   "--aot_topology", args.aot_topology)
              for layout in LAYOUTS} for m in args.aot_models}
  return {
      "aot_compile_ratio_scanned_vs_unrolled": _layout_ratios(runs, "compile_seconds"),
      "aot_memory_ratio_scanned_vs_unrolled": _layout_ratios(runs, "per_device_total_bytes"),
      "aot_peak_memory_ratio_scanned_vs_unrolled": _layout_ratios(runs, "peak_bytes"),
      "aot_host_rss_ratio_scanned_vs_unrolled": _layout_ratios(runs, "peak_rss_bytes"),
      "aot_runs": runs,
  }


def _rollout_arrays(abstract, vocab: int, group: int, seed: int = 0):
  """Random completions with the shapes and shardings of `abstract` (a Rollout of SDS)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(seed)
  rows = abstract.tokens.shape[0]
  host = {
      "prompt_tokens": rng.integers(3, vocab, abstract.prompt_tokens.shape, dtype=np.int32),
      "prompt_mask": np.ones(abstract.prompt_mask.shape, bool),
      "tokens": rng.integers(3, vocab, abstract.tokens.shape, dtype=np.int32),
      "mask": np.ones(abstract.mask.shape, bool),
      "logp": np.full(abstract.logp.shape, -2.0, np.float32),
      "group": (np.arange(rows) // group).astype(np.int32),
      "valid": np.ones((rows,), bool),
  }
  return abstract.replace(**{k: jax.device_put(v, getattr(abstract, k).sharding)
                             for k, v in host.items()})


def device_worker(args: argparse.Namespace) -> None:
  """In its own process: `rl_step` of scale.py:<args.device_worker> on the local devices."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import functools  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top

  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from benchmarks import _peer_common  # pylint: disable=g-import-not-at-top
  from rl_jax import chips, compile_cache, models, parallel  # pylint: disable=g-import-not-at-top
  from rl_jax.tools import aot  # pylint: disable=g-import-not-at-top
  from rl_jax.train_state import TrainState  # pylint: disable=g-import-not-at-top

  config = _scale_config(args, args.device_worker)
  mesh = parallel.make_mesh(tuple(config.mesh.shape))
  device = mesh.devices.flat[0]
  with jax.set_mesh(mesh):
    builder = aot._Builder(config, mesh)  # pylint: disable=protected-access
    phase = builder.rl_step()
    state_sds, master_sds, rollout_sds, rewards_sds = phase.args
    sharding = lambda tree: jax.tree_util.tree_map(lambda a: a.sharding, tree)  # noqa: E731
    # The same random weights in both layouts: drawn unrolled, then stacked for the scanned run.
    unrolled = dataclasses.replace(builder.cfg, param_dtype=config.train.master_dtype,
                                   scan_layers=False)
    init = lambda key: models.to_layout(models.init_params(unrolled, key),  # noqa: E731
                                        builder.cfg.scan_layers)
    master = jax.jit(init, out_shardings=sharding(master_sds))(jax.random.key(0))
    state = jax.jit(functools.partial(TrainState.create, tx=state_sds.tx),
                    out_shardings=sharding(state_sds))(master)
    rollout = _rollout_arrays(rollout_sds, builder.cfg.vocab_size, config.rl.group_size)
    rewards = jax.device_put(
        np.random.default_rng(1).integers(0, 2, rewards_sds.shape).astype(np.float32),
        rewards_sds.sharding)
    start = time.perf_counter()
    with compile_cache.CompileStats() as stats:
      compiled = phase.fn.trace(state, master, rollout, rewards).lower().compile()
    compile_s = time.perf_counter() - start
    mem = compiled.memory_analysis()
    before = device.memory_stats() or {}
    times = []
    for _ in range(args.steps + 1):
      start = time.perf_counter()
      state, metrics = compiled(state, master, rollout, rewards)
      jax.block_until_ready((state, metrics))
      times.append(time.perf_counter() - start)
    after = device.memory_stats() or {}
  analysis = chips.per_device_bytes(mem)
  loss = float(np.asarray(jax.device_get(metrics.get("loss", np.nan))))
  result = dict(
      model=args.device_worker, scan_layers=bool(args.scanned), remat=args.aot_remat,
      param_dtype=args.aot_param_dtype, device=device.device_kind, devices=int(mesh.devices.size),
      prompts=config.rl.prompts_per_step, group=config.rl.group_size,
      new_tokens=config.sampling.max_new_tokens, num_minibatches=config.rl.num_minibatches,
      compile_seconds=round(compile_s, 2), compile_stats=stats.as_dict(),
      analysis_total_bytes=int(analysis), temp_bytes=int(mem.temp_size_in_bytes),
      argument_bytes=int(mem.argument_size_in_bytes),
      bytes_in_use_before=before.get("bytes_in_use"),
      peak_bytes_in_use=after.get("peak_bytes_in_use"),
      first_step_s=round(times[0], 4), step_s=round(sum(times[1:]) / args.steps, 4),
      step_s_all=[round(t, 4) for t in times], loss=loss,
      peak_rss_bytes=_peer_common.peak_rss_bytes())
  print(peers.RESULT_PREFIX + json.dumps(result), flush=True)


def device_runs(args: argparse.Namespace) -> dict[str, Any]:
  """Per model: both layouts' rl_step on the local accelerator and their ratios."""
  runs = {m: {layout: _run_worker(args, "device_worker", m, layout, f"--steps={args.steps}")
              for layout in LAYOUTS} for m in args.aot_models}
  return {
      "device_step_ratio_scanned_vs_unrolled": _layout_ratios(runs, "step_s"),
      "device_peak_memory_ratio_scanned_vs_unrolled": _layout_ratios(runs, "peak_bytes_in_use"),
      "device_analysis_memory_ratio_scanned_vs_unrolled": _layout_ratios(
          runs, "analysis_total_bytes"),
      "device_compile_ratio_scanned_vs_unrolled": _layout_ratios(runs, "compile_seconds"),
      "device_runs": runs,
  }


def run(args: argparse.Namespace) -> dict[str, Any]:
  mode = ("quick" if args.quick else "aot_only" if args.aot_only
          else "device_only" if args.device_only else "full")
  out: dict[str, Any] = {"benchmark": "scan_layers", "mode": mode,
                         "model_dir": args.model_dir, "shape": args.shape, "steps": args.steps,
                         "threads": args.threads}
  if args.device_only:
    out.update(device_runs(args), **_step_settings(args))
    return out
  if args.aot_only:
    pass
  elif not os.path.isfile(os.path.join(args.model_dir, "config.json")):
    out["error"] = (f"no checkpoint at --model_dir={args.model_dir!r}; write SmolLM2 there with "
                    "python -m rl_jax.models.convert_gguf --out DIR")
  else:
    out.update(smollm2_steps(args))
  if not args.quick:
    out.update(aot_compiles(args), aot_topology=args.aot_topology, **_step_settings(args))
  return out


def main(argv: Optional[Sequence[str]] = None) -> Optional[dict[str, Any]]:
  args = parse_args(argv)
  if args.aot_worker:
    aot_worker(args)
    return None
  if args.device_worker:
    device_worker(args)
    return None
  out = run(args)
  print(json.dumps(out))
  return out


if __name__ == "__main__":
  main()
