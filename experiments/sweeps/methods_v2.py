"""Methods on the proving ground v2 (issue 33), each placed between GRPO G = 4 and its family's
oracle (ground_v2's runs): one command trains the PRMs the process-reward presets need, then
runs the presets from ground_v2's shared SFT, two runs at a time:

    python -m experiments.sweeps.methods_v2 --workdir_root=runs/sweeps --jobs=2 [--split=dev]

`--split=dev` runs the screening seeds (0, 1, 2) whose dev accuracy picks each family's setting
and writes experiments/sweeps/methods_v2_dev_report.{md,png,json} (dev accuracy); the default
runs the table's 5 seeds and writes methods_v2_report.{md,png,json} (test accuracy), each JSON
variant with its `family`, `oracle`, `recovered_share` and `recovered_share_ci95`.
`--report_only` writes the report from the runs finished so far.

The runs go to ROOT/methods_v2/NAME; the PRMs to
ROOT/methods_v2/_prm/{pav,truth}. The SFT policy is ground_v2's (`sft.seed = 0` pins it; a link
from ROOT/methods_v2/_sft to ROOT/ground_v2/_sft saves its 7 minutes, else the launcher trains it
again, bit for bit the same), so every run pairs with ground_v2's `grpo_g4` and `oracle_prm` of
the same seed. The report is `experiments.report` over both directories with each variant's
family oracle (`--oracle=METHOD:ORACLE`, the share of the oracle's gain recovered);
experiments/README, "Which method helps, and how much", has the table.

Process rewards (oracle: `oracle_prm`, PAV with a perfect prover):
  pav_bok4_a1, pav_bok4_a2  PAV (ALGORITHMS.md §5.1) with a PRM fitted on Monte Carlo labels of
                     the best-of-4 prover (`prover_k` 4, within the issue's 4-8), 16
                     continuations per step prefix, from 4,096 completions of the SFT policy
                     (1,024 train problems x 4); alpha 1 or 2 (the paper sweeps alpha and gives
                     no value): the dev screen picked 1, so alpha 2 runs on seeds 0-2 only.
  pav_truth_a1       PAV with a PRM of the same size fitted on the step checker's own labels
                     (`train_prm --kinds=truth`, 16,384 completions): the best a learned PRM of
                     this size reaches here, so a PAV row between it and the oracle says how much
                     of the gap is the labels and how much the model.
  prime_ratio        PRIME (§5.2) with the reference's PRM-to-policy learning-rate ratio (1e-6
                     against 5e-7: 2) at ladder2's policy rate, 8e-5 against 4e-5 (the earlier
                     ladder run kept PRIME's absolute 1e-6 against 1e-4, a ratio of 1/100, and its
                     PRM did not learn), and the reference's normalisation (`process.norm`
                     'batch': the token rewards divided by the batch's largest |return|).

Rollout engines (oracle: `oracle_treepo`, TreePO cut at step boundaries):
  echo_measured      ECHO (§3.5) with its branch thresholds set from the entropies measured at this
                     task's decisions (`experiments.echo_survey` on the shared SFT policy,
                     experiments/README "ECHO's thresholds, measured"): the policy's result tokens
                     of carrying steps have a median entropy near 0.7 nats (a 0.6/0.4 choice) and
                     its copying tokens below 0.01, so H_high 0.3 (H_low 0); its windowed
                     confidence C^G does not separate the two, so the confidence test is off
                     (c_b 20.8, above any C_t: -log 1e-9 = 20.7); a carry is a choice of two, so
                     at most 2 branches, and children may branch at their own next decision
                     (`nested`); the prune rule cut right and wrong completions alike, so it is off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from absl import app, flags

from experiments.sweeps import ground_v2, launch

BASE_CONFIG = ground_v2.BASE_CONFIG
TEST_SEEDS = ground_v2.SEEDS
DEV_SEEDS = (0, 1, 2)
POLICY_LR = 4e-5  # ladder2.py's RL learning rate

# ECHO's thresholds from `experiments.echo_survey` (see the module docstring).
ECHO_MEASURED = {"entropy_high": 0.3, "entropy_low": 0.0, "branch_threshold": 20.8,
                 "max_branches": 2, "prune": False, "nested": True}

# How each PRM is trained (`experiments.train_prm` flags), from the shared SFT policy.
PRMS = {
    "pav": dict(kinds="pav", num_prompts=1024, samples=4, n_mc=16, prover_k=4, steps=600),
    "truth": dict(kinds="truth", num_prompts=4096, samples=4, steps=2000),
}


def prm_dir(root: str, name: str) -> str:
  """Where PRM `name` is saved: ROOT/methods_v2/_prm/NAME/KIND."""
  return os.path.join(root, "methods_v2", "_prm", name, PRMS[name]["kinds"])


def variants(root: str = "runs/sweeps") -> dict:
  """Variant name -> config overrides (the PRM paths under `root`)."""
  pav = lambda name, alpha: {"rl.process_reward": "pav", "rl.process.alpha": alpha,
                             "rl.process.prm_dir": prm_dir(root, name)}
  return {
      "pav_bok4_a1": pav("pav", 1.0),
      "pav_bok4_a2": pav("pav", 2.0),
      "pav_truth_a1": pav("truth", 1.0),
      "prime_ratio": {"rl.process_reward": "prime", "rl.process.prm_lr": 2 * POLICY_LR,
                      "rl.process.norm": "batch"},
      "echo_measured": dict({"rl.rollout": "echo"},
                            **{f"rl.echo.{k}": v for k, v in ECHO_MEASURED.items()}),
  }


# Each variant's family and the ground_v2 oracle it is placed against.
FAMILIES = {
    "pav_bok4_a1": ("process reward", "oracle_prm"),
    "pav_bok4_a2": ("process reward", "oracle_prm"),
    "pav_truth_a1": ("process reward", "oracle_prm"),
    "prime_ratio": ("process reward", "oracle_prm"),
    "echo_measured": ("rollout engine", "oracle_treepo"),
}
# ground_v2's runs every table reads beside these: the baseline, G = 8 (the tokens target) and
# the oracles.
GROUND = ("grpo_g4", "grpo_g8", "oracle_prm", "oracle_treepo")


# Settings the dev screen did not pick (seeds 0-2 only; experiments/README has their numbers).
SCREENED_OUT = ("pav_bok4_a2",)


def get_sweep(root: str = "runs/sweeps", split: str = "test") -> list[dict]:
  """One dict per run (overrides plus 'name'), seed by seed; the table's seeds beyond the
  screen's skip the settings the screen left out."""
  seeds = DEV_SEEDS if split == "dev" else TEST_SEEDS
  return [dict(overrides, seed=seed, name=f"{variant}_seed{seed}")
          for seed in seeds for variant, overrides in variants(root).items()
          if seed in DEV_SEEDS or variant not in SCREENED_OUT]


def prm_command(root: str, name: str) -> list[str]:
  """argv of `experiments.train_prm` for PRM `name` on the shared SFT policy."""
  sft = os.path.join(root, "methods_v2", "_sft", "seed0")
  out = os.path.dirname(prm_dir(root, name))
  return [sys.executable, "-m", "experiments.train_prm", f"--workdir={sft}", f"--out={out}"] + [
      f"--{k}={v}" for k, v in PRMS[name].items()]


def report_command(root: str, out: str, split: str = "test") -> list[str]:
  """argv of `experiments.report` over the finished runs and ground_v2's (OUT.{md,png,json})."""
  ground = [f"--workdirs={root}/ground_v2/{name}_seed*" for name in GROUND]
  oracles = ",".join(f"{v}:{o}" for v, (_, o) in FAMILIES.items())
  return [sys.executable, "-m", "experiments.report", f"--workdirs={root}/methods_v2/[!_]*",
          *ground, f"--baseline={ground_v2.BASELINE}", f"--oracle={oracles}", f"--split={split}",
          f"--out={out}.md", f"--png={out}.png", f"--json={out}.json"]


def add_families(json_path: str) -> None:
  """Adds `family` to each variant object of the report's JSON (the ground's own variants:
  'baseline', 'budget' or 'oracle'), and its `oracle`, `recovered_share` and
  `recovered_share_ci95` as plain fields (report.py's object, with its seeds and whether the
  oracle's gain is resolved, moves to `recovered`; null where the variant has no oracle)."""
  with open(json_path) as f:
    data = json.load(f)
  for v in data["variants"]:
    name = v["name"]
    v["family"] = (FAMILIES[name][0] if name in FAMILIES else "baseline"
                   if name == ground_v2.BASELINE else "oracle" if name.startswith("oracle_")
                   else "budget")
    rec = v.pop("recovered_share", None) or {}
    v.update(oracle=rec.get("oracle"), recovered_share=rec.get("share"),
             recovered_share_ci95=rec.get("ci95"), recovered=rec or None)
  with open(json_path, "w") as f:
    json.dump(data, f, indent=1)


if __name__ == "__main__":
  _ROOT = flags.DEFINE_string("workdir_root", "runs/sweeps", "Runs go to ROOT/methods_v2/NAME.")
  _JOBS = flags.DEFINE_integer("jobs", 2, "Runs at once after the shared SFT.", lower_bound=1)
  _SPLIT = flags.DEFINE_enum("split", "test", ["dev", "test"],
                             "dev: the screening seeds 0-2; test: the table's seeds 0-4.")
  _DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the commands instead of running them.")
  _OUT = flags.DEFINE_string("out_dir", "experiments/sweeps",
                             "Where methods_v2_report.{md,png,json} go (the dev screen: "
                             "methods_v2_dev_report).")
  _REPORT_ONLY = flags.DEFINE_bool("report_only", False, "Write the report from the runs that "
                                   "have finished so far; start none.")

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    root = _ROOT.value
    if not _REPORT_ONLY.value:
      steps = launch.plan(get_sweep(root, _SPLIT.value), BASE_CONFIG,
                          os.path.join(root, "methods_v2"), True,
                          launch.base_sft_seed(BASE_CONFIG))
      launch.execute(steps[:1], 1, _DRY_RUN.value)  # the shared SFT
      for name in PRMS:
        cmd = prm_command(root, name)
        if _DRY_RUN.value:
          print(" ".join(cmd))
        elif not os.path.exists(os.path.join(prm_dir(root, name), "prm.json")):
          subprocess.run(cmd, check=True)
      launch.execute(steps[1:], _JOBS.value, _DRY_RUN.value)
    out = os.path.join(_OUT.value, "methods_v2_report" if _SPLIT.value == "test" else
                       "methods_v2_dev_report")
    report = report_command(root, out, _SPLIT.value)
    if _DRY_RUN.value:
      print(" ".join(report))
      return
    subprocess.run(report, check=True)
    add_families(out + ".json")

  app.run(main)
