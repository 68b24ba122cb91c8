"""Turns finished work dirs into a markdown table and a PNG of learning efficiency.

    python -m experiments.report --workdirs='runs/sweeps/estimators/*' \
        --out=runs/sweeps/estimators.md --png=runs/sweeps/estimators.png

A run is a work dir holding `summary.json` (others, such as a sweep's `_sft/`, are skipped). Its
variant is the directory name without a trailing `_seedN`; the first table gives the mean over a
variant's seeds, the second every run. Rollout tokens are the RL phase's sampled completion
tokens (every generation round counted); RL seconds exclude compilation of the first step. The
PNG plots held-out greedy accuracy (the periodic RL evaluations, with the SFT policy at 0)
against cumulative rollout tokens and against cumulative RL step time.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re

import numpy as np
from absl import app, flags
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rl_jax.metrics import read_metrics

_WORKDIRS = flags.DEFINE_multi_string("workdirs", None, "Glob(s) of run work dirs.")
_OUT = flags.DEFINE_string("out", None, "Markdown output path.")
_PNG = flags.DEFINE_string("png", None, "PNG output path (optional).")

_SEED_SUFFIX = re.compile(r"_seed\d+$")
# (column title, key of the per-run record, format)
COLUMNS = (("greedy acc", "rl_accuracy", "{:.3f}"),
           ("sampled acc", "rl_sampled_accuracy", "{:.3f}"),
           ("SFT greedy", "sft_accuracy", "{:.3f}"),
           ("rollout tokens", "rollout_tokens", "{:,.0f}"),
           ("RL s", "rl_train_seconds", "{:.0f}"),
           ("wall s", "wall_seconds", "{:.0f}"))


def load_run(workdir: str) -> dict:
  """A run's summary numbers and its curves (accuracy vs cumulative tokens and seconds)."""
  with open(os.path.join(workdir, "summary.json")) as f:
    summary = json.load(f)
  rl = sorted((r for r in read_metrics(workdir) if r.get("phase") == "rl"),
              key=lambda r: r["step"])
  tokens = np.cumsum([r.get("rollout_tokens", 0) for r in rl])
  seconds = np.cumsum([0.0] + [r.get("step_seconds", 0.0) for r in rl[1:]])  # Step 1 compiles.
  curve = [(0, 0.0, 0.0, summary["sft_accuracy"])]
  curve += [(r["step"], float(tokens[i]), float(seconds[i]), r["heldout_accuracy"])
            for i, r in enumerate(rl) if "heldout_accuracy" in r]
  if rl and "heldout_accuracy" not in rl[-1]:  # The final evaluation is the same greedy one.
    curve.append((rl[-1]["step"], float(tokens[-1]), float(seconds[-1]), summary["rl_accuracy"]))
  name = os.path.basename(os.path.normpath(workdir))
  return dict({k: summary.get(k, float("nan")) for _, k, _ in COLUMNS}, name=name,
              variant=_SEED_SUFFIX.sub("", name), seed=summary.get("seed"),
              rollout_tokens=float(tokens[-1]) if len(tokens) else 0.0, curve=curve)


def find_runs(patterns: list[str]) -> list[dict]:
  dirs = sorted({d for p in patterns for d in glob.glob(p) if os.path.isdir(d)})
  runs = [load_run(d) for d in dirs if os.path.exists(os.path.join(d, "summary.json"))]
  if not runs:
    raise FileNotFoundError(f"no work dir with a summary.json matches {patterns}")
  return runs


def by_variant(runs: list[dict]) -> dict[str, list[dict]]:
  groups = collections.defaultdict(list)
  for run in runs:
    groups[run["variant"]].append(run)
  return dict(groups)


def markdown(runs: list[dict]) -> str:
  """Two tables: the mean over seeds per variant, then every run."""
  head = [f"| {' | '.join(t for t, _, _ in COLUMNS)} |", "|" + "---:|" * len(COLUMNS)]
  lines = ["| variant | seeds " + head[0], "|---|---:" + head[1]]
  for variant, group in by_variant(runs).items():
    cells = [fmt.format(np.mean([r[k] for r in group])) for _, k, fmt in COLUMNS]
    lines.append(f"| {variant} | {len(group)} | {' | '.join(cells)} |")
  lines += ["", "| run | seed " + head[0], "|---|---:" + head[1]]
  for r in runs:
    cells = [fmt.format(r[k]) for _, k, fmt in COLUMNS]
    lines.append(f"| {r['name']} | {r['seed']} | {' | '.join(cells)} |")
  return "\n".join(lines) + "\n"


def plot(runs: list[dict], out_png: str) -> str:
  """Held-out greedy accuracy vs cumulative rollout tokens and vs RL seconds, mean over seeds
  (points averaged at equal eval steps; single seeds faint)."""
  fig = Figure(figsize=(11, 4), layout="constrained")
  FigureCanvasAgg(fig)
  axes = fig.subplots(1, 2)
  for i, (variant, group) in enumerate(by_variant(runs).items()):
    color = f"C{i % 10}"
    steps = sorted(set.intersection(*[{p[0] for p in r["curve"]} for r in group]))
    mean = np.array([np.mean([[p[1], p[2], p[3]] for r in group for p in r["curve"]
                              if p[0] == s], axis=0) for s in steps]).reshape(-1, 3)
    for ax, col in zip(axes, (0, 1)):
      if len(group) > 1:
        for r in group:
          c = np.array([p[1:] for p in r["curve"]])
          ax.plot(c[:, col], c[:, 2], color=color, alpha=0.25, lw=0.8)
      ax.plot(mean[:, col], mean[:, 2], color=color, marker=".", label=variant)
  for ax, xlabel in zip(axes, ("cumulative rollout tokens", "cumulative RL step seconds")):
    ax.set(xlabel=xlabel, ylabel="held-out greedy accuracy")
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize="small")
  os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
  fig.savefig(out_png, dpi=100)
  return out_png


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  runs = find_runs(_WORKDIRS.value)
  text = markdown(runs)
  os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
  with open(_OUT.value, "w") as f:
    f.write(text)
  if _PNG.value:
    plot(runs, _PNG.value)
  print(text)


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdirs", "out"])
  app.run(main)
