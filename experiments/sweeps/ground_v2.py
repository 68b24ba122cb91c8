"""Proving ground v2 (experiments/configs/ladder2.py): GRPO's budget axis and each family's oracle.

One command runs every variant on 5 seeds from one shared SFT, two runs at a time, and writes the
report (experiments/sweeps/ground_v2_report.{md,png,json}):

    python -m experiments.sweeps.ground_v2 --workdir_root=runs/sweeps --jobs=2

`--report_only` writes the report from the runs finished so far (a partial sweep);
`--variants=grpo_g4,...` runs those variants alone (the report still reads every finished run).

It is `experiments.sweeps.launch --sweep=ground_v2 --base_config=experiments/configs/ladder2.py`
followed by `experiments.report` on the finished runs with `--baseline=grpo_g4` (paired
differences over seeds on the test set). A method measured here later names its family's oracle
(`--oracle=METHOD:oracle_prm`) for the share of the oracle's gain it recovers. Re-running the
command continues an interrupted sweep (finished runs are skipped, half-finished ones resume
from their checkpoints).

Variants (every one 100 RL steps of 32 prompts; the tables read the test set):
  grpo_g4          GRPO, G = 4 (the ground's baseline).
  grpo_g8          GRPO, G = 8: twice the rollout tokens per step.
  grpo_g16         GRPO, G = 16: four times.
  oracle_prm       PAV with a perfect prover at G = 4: the step checker's labels as progress
                   (`rl.process_reward=oracle`), alpha = 1 (the PAV sweep's setting).
  oracle_knapsack  Knapsack RL at G = 4's budget (128 rows, 1 to 16 a prompt) with the oracle
                   prior: each prompt's success rate under the current policy from 16 Monte
                   Carlo samples (`oracle/mc_tokens`, not rollout tokens). min_n = 1 (one row,
                   not the reference's two, for a prompt the prior calls all-right or
                   all-wrong) was chosen on the dev set (ground_v2_pilot.py); the first sweep's
                   min_n = 2 runs are kept in runs/sweeps/ground_v2_knapsack_min2.
  oracle_treepo    TreePO at G = 4 with segments cut at the scratchpad's newlines
                   (`rl.treepo.segment=newline`): forks at step boundaries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from absl import app, flags
import numpy as np

from experiments.sweeps import launch

SEEDS = (0, 1, 2, 3, 4)
BASE_CONFIG = "experiments/configs/ladder2.py"
BASELINE = "grpo_g4"

COMMON: dict = {}

VARIANTS = {
    "grpo_g4": {},
    "grpo_g8": {"rl.group_size": 8},
    "grpo_g16": {"rl.group_size": 16},
    "oracle_prm": {"rl.process_reward": "oracle", "rl.process.alpha": 1.0},
    "oracle_knapsack": {"rl.max_group_size": 16, "rl.allocator": "knapsack",
                        "rl.allocator_prior": "oracle", "rl.allocation.min_n": 1},
    "oracle_treepo": {"rl.rollout": "treepo", "rl.treepo.segment": "newline"},
}


def get_sweep(only=None) -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name). `only`: these
  variants alone (names)."""
  unknown = sorted(set(only or ()) - set(VARIANTS))
  if unknown:
    raise ValueError(f"--variants names {unknown}; expected names from {sorted(VARIANTS)}")
  # Seed by seed: an interrupted sweep leaves whole seeds, which pair across variants.
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for seed in SEEDS for variant, overrides in VARIANTS.items()
          if not only or variant in only]


# Issue 32's gates, on the test set over paired seeds: (text, variant, minimum paired gain over
# grpo_g4, whether its 95% interval must exclude 0). The oracles and G = 16 are read at the end
# of the same 100 RL steps; the oracles run at G = 4's rows per step, so at about its rollout
# tokens (the table's tokens column shows how close).
GATES = (
    ("G=16 beats G=4 at equal RL steps", "grpo_g16", 0.04, True),
    ("the oracle process reward beats G=4 at equal rollout tokens", "oracle_prm", 0.05, False),
    ("Knapsack with the oracle prior beats G=4 at equal rollout tokens", "oracle_knapsack", 0.03,
     False),
)
MAX_SEED_STD = 0.02  # GRPO G=4's seed standard deviation on the test set


def gates(data: dict, min_seeds: int = len(SEEDS)) -> list[dict]:
  """Issue 32's gates from `experiments.report --json`'s object: one dict per gate with `gate`,
  `value` (the paired gain [mean, ci95], or the seed std), `seeds` and `met` (None while the
  variant has fewer than `min_seeds` seeds: a partial sweep shows its numbers, not a verdict)."""
  by = {v["name"]: v for v in data["variants"]}
  out = []
  for text, name, min_gain, exclude_zero in GATES:
    v = by.get(name)
    delta = v["paired_delta"].get(BASELINE) if v and BASELINE in by else None
    met = None
    if delta is not None and delta[0] is not None and v["seeds"] >= min_seeds:
      met = delta[0] >= min_gain and (not exclude_zero or (
          delta[1] is not None and delta[0] - delta[1] > 0))
    out.append(dict(gate=f"{text}: paired gain >= {min_gain}"
                    + (", its 95% interval above 0" if exclude_zero else ""),
                    variant=name, value=delta, seeds=v["seeds"] if v else 0, met=met))
  base = by.get(BASELINE)
  accs = [a for a in (base["test_accuracy_by_seed"] if base else {}).values() if a is not None]
  std = float(np.std(accs, ddof=1)) if len(accs) > 1 else None
  out.append(dict(gate=f"GRPO G=4's seed std <= {MAX_SEED_STD}", variant=BASELINE, value=std,
                  seeds=len(accs),
                  met=None if std is None or len(accs) < min_seeds else std <= MAX_SEED_STD))
  return out


def gates_markdown(rows: list[dict], min_seeds: int = len(SEEDS)) -> str:
  lines = ["", "## Issue 32's gates (test set, paired over seeds)", "",
           "| gate | variant | seeds | value | met |", "|---|---|---:|---:|---|"]
  for r in rows:
    v = r["value"]
    value = ("n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else
             f"{v[0]:+.3f} ± {v[1]:.3f}" if v[1] is not None else f"{v[0]:+.3f}")
    met = ({True: "yes", False: "no"}[r["met"]] if r["met"] is not None else
           "not run" if not r["seeds"] else f"not judged: {r['seeds']} of {min_seeds} seeds")
    lines.append(f"| {r['gate']} | {r['variant']} | {r['seeds']} | {value} | {met} |")
  return "\n".join(lines) + "\n"


def add_gates(out_prefix: str, min_seeds: int = len(SEEDS)) -> None:
  """Appends the gates to OUT.md and adds them to OUT.json (`gates`)."""
  with open(out_prefix + ".json") as f:
    data = json.load(f)
  rows = gates(data, min_seeds)
  data["gates"] = rows
  with open(out_prefix + ".json", "w") as f:
    json.dump(data, f, indent=1)
  with open(out_prefix + ".md", "a") as f:
    f.write(gates_markdown(rows, min_seeds))


def report_command(root: str, out_dir: str) -> list[str]:
  """argv of the report over the finished runs under `root` (ROOT/ground_v2)."""
  out = os.path.join(out_dir, "ground_v2_report")
  return [sys.executable, "-m", "experiments.report", f"--workdirs={root}/[!_]*",
          f"--baseline={BASELINE}", f"--out={out}.md", f"--png={out}.png", f"--json={out}.json"]


if __name__ == "__main__":
  _ROOT = flags.DEFINE_string("workdir_root", "runs/sweeps", "Runs go to ROOT/ground_v2/NAME.")
  _JOBS = flags.DEFINE_integer("jobs", 2, "Runs at once after the shared SFT.", lower_bound=1)
  _OUT = flags.DEFINE_string("out_dir", "experiments/sweeps",
                             "Where ground_v2_report.{md,png,json} go.")
  _DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the commands instead of running them.")
  _REPORT_ONLY = flags.DEFINE_bool("report_only", False, "Write the report from the runs that "
                                   "have finished so far; start none.")
  _VARIANTS = flags.DEFINE_list("variants", None, "Run these variants only (default: all); the "
                                "report still reads every finished run.")

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
      sweep = get_sweep(_VARIANTS.value)
    except ValueError as e:
      raise app.UsageError(str(e)) from None
    if not _REPORT_ONLY.value:
      steps = launch.plan(sweep, BASE_CONFIG, os.path.join(_ROOT.value, "ground_v2"), True,
                          launch.base_sft_seed(BASE_CONFIG))
      launch.execute(steps, _JOBS.value, _DRY_RUN.value)
    report = report_command(os.path.join(_ROOT.value, "ground_v2"), _OUT.value)
    if _DRY_RUN.value:
      print(" ".join(report))
      return
    subprocess.run(report, check=True)
    add_gates(os.path.join(_OUT.value, "ground_v2_report"))

  app.run(main)
