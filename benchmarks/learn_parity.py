"""rl_jax's GRPO against TRL's `GRPOTrainer`: the same run, learning curve and step time.

    pip install -e '.[peers]'   # TRL and torch, in their own environment (see benchmarks/README)
    python -m benchmarks.learn_parity --steps=30 --seeds=0,1 --plot=learn_parity.png

For each seed, two subprocesses train from the same checkpoint with the same settings, read from
one rl_jax config (default `experiments/configs/smollm2_learns.py`): rl_jax through
`python -m experiments.run` (periodic evaluations off; its held-out evaluations before and after
RL stay), TRL through `benchmarks/_parity_trl.py` (the same prompts in the same order, chat
template, reward, G, B, T, temperature, learning rate, AdamW, clipping, KL and clip range). Each
worker's output goes to a log in the work dir.
`--trl_python` runs the TRL worker with another interpreter (the peers environment);
`--device=cuda` puts TRL on the GPU (rl_jax takes JAX's default backend).

The curve is the training reward, each step's mean over its B x G completions, averaged over
windows of `--window` steps and over seeds. TRL's 95% band at a window is its mean +- 1.96
binomial standard errors over every completion in the window (all seeds); rl_jax is "inside or
above" where its mean is >= the band's lower edge. Prints one JSON line: both curves, the band,
`inside_or_above` per window, and `step_time_ratio_rl_jax_vs_trl` (mean step seconds after the
first step, which includes compilation / warm-up).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from typing import Sequence

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CONFIG = os.path.join("experiments", "configs", "smollm2_learns.py")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--config", default=DEFAULT_CONFIG)
  p.add_argument("--steps", type=int, default=30)
  p.add_argument("--seeds", default="0,1", help="comma-separated config.seed values")
  p.add_argument("--window", type=int, default=5, help="steps per point of the curves")
  p.add_argument("--model_dir", default="", help="overrides config.model.path")
  p.add_argument("--trl_python", default=sys.executable)
  p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="TRL's device")
  p.add_argument("--workdir", default="", help="keeps both systems' outputs here")
  p.add_argument("--plot", default="", help="writes the curves as a PNG here")
  p.add_argument("--rl_jax_flags", default="",
                 help="extra experiments.run flags, space-separated (e.g. --config.x=y)")
  args = p.parse_args(argv)
  if args.steps < 2 or args.window < 1:
    p.error(f"--steps must be >= 2 and --window >= 1, got {args.steps} and {args.window}")
  try:
    args.seeds = [int(s) for s in args.seeds.split(",")]
  except ValueError:
    p.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
  return args


def load_config(path: str):
  """The ConfigDict of an rl_jax config file (its default variant)."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  return config_flags.config_flags._LoadConfigModule("config", path).get_config()  # pylint: disable=protected-access


def rl_jax_steps(workdir: str) -> list[dict]:
  """The RL phase's per-step rows of an experiments.run work dir (metrics.jsonl)."""
  rows = []
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    for line in f:
      d = json.loads(line)
      if d.get("phase") == "rl" and "reward_mean" in d:
        rows.append({"step": d["step"], "reward_mean": d["reward_mean"],
                     "step_seconds": d["step_seconds"], "completion_len": d["completion_len"]})
  return rows


def run_worker(cmd: Sequence[str], log: str):
  """Runs one worker with its output in `log`; a failure exits with the log's last lines."""
  with open(log, "w") as f:
    rc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
  if rc:
    with open(log) as f:
      tail = f.read()[-3000:]
    sys.exit(f"learn_parity: {' '.join(cmd[:3])} ... failed (exit {rc}); the end of {log}:\n{tail}")


def read_jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def windows(rewards: np.ndarray, window: int) -> list[tuple[int, int]]:
  """[start, end) step ranges of `window` steps covering all of them (the last may be short)."""
  n = rewards.shape[-1]
  return [(s, min(s + window, n)) for s in range(0, n, window)]


def compare(rl_jax: np.ndarray, trl: np.ndarray, rows_per_step: int, window: int) -> dict:
  """Curves and TRL's band from per-step mean rewards [seeds, steps] of each system.

  A window's mean is over its steps and seeds; TRL's band is its mean +- 1.96 sqrt(p(1-p)/n)
  with n = its completions in the window (steps x seeds x rows_per_step).
  """
  out = {"window_end_step": [], "rl_jax": [], "trl": [], "trl_low": [], "trl_high": [],
         "inside_or_above": []}
  for lo, hi in windows(trl, window):
    a, b = float(rl_jax[:, lo:hi].mean()), float(trl[:, lo:hi].mean())
    n = trl[:, lo:hi].size * rows_per_step
    half = 1.96 * math.sqrt(max(b * (1 - b), 0.0) / n)
    out["window_end_step"].append(hi)
    out["rl_jax"].append(round(a, 4))
    out["trl"].append(round(b, 4))
    out["trl_low"].append(round(b - half, 4))
    out["trl_high"].append(round(b + half, 4))
    out["inside_or_above"].append(bool(a >= b - half))
  return out


def step_time(rows: Sequence[Sequence[dict]]) -> float:
  """Mean step seconds over every seed's steps after its first."""
  return float(np.mean([r["step_seconds"] for seed_rows in rows for r in seed_rows[1:]]))


def plot(path: str, result: dict, steps: np.ndarray, rl_jax: np.ndarray, trl: np.ndarray):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 4))
  for i, r in enumerate(rl_jax):
    ax.plot(steps, r, color="C0", alpha=0.25, lw=0.8, label="rl_jax, per seed" if i == 0 else None)
  for i, r in enumerate(trl):
    ax.plot(steps, r, color="C1", alpha=0.25, lw=0.8, label="TRL, per seed" if i == 0 else None)
  x = result["window_end_step"]
  ax.plot(x, result["rl_jax"], "o-", color="C0", label="rl_jax (window mean)")
  ax.plot(x, result["trl"], "s-", color="C1", label="TRL (window mean)")
  ax.fill_between(x, result["trl_low"], result["trl_high"], color="C1", alpha=0.2,
                  label="TRL 95% band")
  ax.set_xlabel("RL step")
  ax.set_ylabel("training reward (mean over the step's completions)")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)


def main(argv=None):
  args = parse_args(argv)
  work = args.workdir or tempfile.mkdtemp(prefix="learn_parity_")
  os.makedirs(work, exist_ok=True)
  runs = {"rl_jax": [], "trl": []}
  for seed in args.seeds:
    wd = os.path.join(work, f"rl_jax_seed{seed}")
    cmd = [sys.executable, "-m", "experiments.run", f"--config={args.config}",
           f"--workdir={wd}", f"--config.seed={seed}", f"--config.rl.steps={args.steps}",
           "--config.rl.eval_every=0"]
    if args.model_dir:
      cmd.append(f"--config.model.path={args.model_dir}")
    cmd += args.rl_jax_flags.split()
    run_worker(cmd, os.path.join(work, f"rl_jax_seed{seed}.log"))
    runs["rl_jax"].append(rl_jax_steps(wd))
    out = os.path.join(work, f"trl_seed{seed}.jsonl")
    cmd = [args.trl_python, "-m", "benchmarks._parity_trl", f"--config={args.config}",
           f"--seed={seed}", f"--steps={args.steps}", f"--out={out}", f"--device={args.device}"]
    if args.model_dir:
      cmd.append(f"--model_dir={args.model_dir}")
    run_worker(cmd, os.path.join(work, f"trl_seed{seed}.log"))
    runs["trl"].append(read_jsonl(out))
  rl_jax = np.array([[r["reward_mean"] for r in rows] for rows in runs["rl_jax"]])
  trl = np.array([[r["reward_mean"] for r in rows] for rows in runs["trl"]])
  config = load_config(args.config)
  rows = config.rl.prompts_per_step * config.rl.group_size
  result = compare(rl_jax, trl, rows, args.window)
  summary = {"benchmark": "learn_parity", "config": args.config, "steps": args.steps,
             "seeds": args.seeds, "rows_per_step": rows, "window": args.window,
             "device": args.device, **result,
             "all_inside_or_above": all(result["inside_or_above"]),
             "rl_jax_step_s": round(step_time(runs["rl_jax"]), 3),
             "trl_step_s": round(step_time(runs["trl"]), 3),
             "rl_jax_completion_len": round(float(np.mean(
                 [r["completion_len"] for s in runs["rl_jax"] for r in s])), 2),
             "trl_completion_len": round(float(np.mean(
                 [r["completion_len"] for s in runs["trl"] for r in s])), 2)}
  summary["step_time_ratio_rl_jax_vs_trl"] = round(summary["rl_jax_step_s"]
                                                   / summary["trl_step_s"], 3)
  for seed, wd in zip(args.seeds, (os.path.join(work, f"rl_jax_seed{s}") for s in args.seeds)):
    path = os.path.join(wd, "summary.json")
    if os.path.exists(path):
      with open(path) as f:
        s = json.load(f)
      summary.setdefault("rl_jax_heldout", []).append(
          {"seed": seed, "before": s.get("sft_accuracy"), "after": s.get("rl_accuracy")})
  if args.plot:
    plot(args.plot, result, np.arange(1, args.steps + 1), rl_jax, trl)
  print(json.dumps(summary), flush=True)


if __name__ == "__main__":
  main()
