"""The report's extra tables: the first proving ground's gate (`--ladder`) and V0's calibration
(`--calibration`), each from finished work dirs (experiments/report.py adds them)."""

from __future__ import annotations

import json
import os

import numpy as np

from experiments.report_stats import interval
from experiments.report_stats import pm as _pm
from rl_jax.metrics import read_metrics


# The proving ground's gate for the GRPO baseline (issue "A proving ground where methods differ").
GATE = dict(min_gain=0.10, max_final=0.85, min_mid_share=0.25, min_low_share=0.10,
            min_high_share=0.10, max_seed_std=0.02)


def ladder_tables(workdirs: list[str]) -> str:
  """The ladder's per-run gate table, the gate's verdicts and the per-stratum table (markdown).

  Reads each work dir's summary.json (runs of experiments/configs/ladder.py or a variant).
  """
  rows = []
  for d in workdirs:
    with open(os.path.join(d, "summary.json")) as f:
      rows.append((os.path.basename(os.path.normpath(d)), json.load(f)))
  missing = [n for n, s in rows if "sft_accuracy_by_stratum" not in s]
  if missing:
    raise ValueError(f"work dirs {missing} have no per-stratum results; expected runs of a task "
                     "with a step checker (experiments/configs/ladder.py)")
  lines = ["| run | seed | SFT greedy | RL greedy | gain | SFT rate < 0.1 | in [0.1, 0.9] | > 0.9 | "
           "SFT sampled | RL sampled | step error SFT -> RL | wall s |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for name, s in rows:
    sh = s["sft_success_rate_shares"]
    lines.append(
        f"| {name} | {s['seed']} | {s['sft_accuracy']:.3f} | {s['rl_accuracy']:.3f} | "
        f"{s['rl_accuracy'] - s['sft_accuracy']:+.3f} | {sh['share_below_0.1']:.3f} | "
        f"{sh['share_0.1_to_0.9']:.3f} | {sh['share_above_0.9']:.3f} | "
        f"{s['sft_sampled_accuracy']:.3f} | {s['rl_sampled_accuracy']:.3f} | "
        f"{s['sft_step_error_rate']:.3f} -> {s['rl_step_error_rate']:.3f} | "
        f"{s['wall_seconds']:.0f} |")
  final = np.array([s["rl_accuracy"] for _, s in rows])
  gain = np.array([s["rl_accuracy"] - s["sft_accuracy"] for _, s in rows])
  shares = [s["sft_success_rate_shares"] for _, s in rows]
  std = float(final.std(ddof=1)) if len(final) > 1 else float("nan")
  checks = [
      (f"RL gain >= {GATE['min_gain']} (every run)", gain.min() >= GATE["min_gain"]),
      (f"RL final <= {GATE['max_final']} (every run)", final.max() <= GATE["max_final"]),
      (f"SFT rates in [0.1, 0.9] >= {GATE['min_mid_share']}",
       min(x["share_0.1_to_0.9"] for x in shares) >= GATE["min_mid_share"]),
      (f"SFT rates < 0.1 >= {GATE['min_low_share']}",
       min(x["share_below_0.1"] for x in shares) >= GATE["min_low_share"]),
      (f"SFT rates > 0.9 >= {GATE['min_high_share']}",
       min(x["share_above_0.9"] for x in shares) >= GATE["min_high_share"]),
      (f"seed std of RL final <= {GATE['max_seed_std']} (is {std:.4f})",
       len(final) >= 3 and std <= GATE["max_seed_std"]),
  ]
  mean, half = interval(final)
  lines += ["", f"RL greedy accuracy over {len(final)} runs: {_pm(mean, half)} (95% t interval); "
            f"seed std {std:.4f}. SFT greedy: {_pm(*interval([s['sft_accuracy'] for _, s in rows]))}.",
            "", "| gate | met |", "|---|---|"]
  lines += [f"| {text} | {'yes' if ok else '**no**'} |" for text, ok in checks]
  strata = sorted(rows[0][1]["sft_accuracy_by_stratum"], key=int)
  lines += ["", "| terms | " + " | ".join(strata) + " |", "|---|" + "---:|" * len(strata)]
  for phase in ("sft", "rl"):
    cells = [_pm(*interval([s[f"{phase}_accuracy_by_stratum"][k] for _, s in rows]))
             for k in strata]
    lines.append(f"| {phase.upper()} greedy | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


CALIBRATION_PREDICTORS = (("v0", "V0"), ("baseline_global_mean", "global mean"),
                          ("baseline_past_rate", "own past rate (coverage)"),
                          ("baseline_logreg", "logistic regression"))


def calibration_table(workdirs: list[str]) -> str:
  """V0's in-run calibration (`v0/brier`, `v0/auroc`, `v0/ece` at every evaluation) beside its
  three baselines: mean ± 95% t interval over the runs, per RL step. Empty without V0 metrics."""
  by_step: dict[int, list[dict]] = {}
  for workdir in workdirs:
    for r in read_metrics(workdir):
      if r.get("phase") == "rl" and "v0/brier" in r:
        by_step.setdefault(r["step"], []).append(r)
  if not by_step:
    return ""
  lines = ["| step | runs | metric | " + " | ".join(n for _, n in CALIBRATION_PREDICTORS) + " |",
           "|---:|---:|---|" + "---:|" * len(CALIBRATION_PREDICTORS)]
  for step in sorted(by_step):
    records = by_step[step]
    for metric in ("brier", "auroc", "ece"):
      cells = []
      for key, _ in CALIBRATION_PREDICTORS:
        values = [r[f"{key}/{metric}"] for r in records
                  if np.isfinite(r.get(f"{key}/{metric}", np.nan))]
        cells.append(_pm(*interval(values)) if values else "-")
      coverage = np.mean([r.get("baseline_past_rate/coverage", 0.0) for r in records])
      cells[2] += f" ({coverage:.2f})"
      lines.append(f"| {step} | {len(records)} | {metric} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"
