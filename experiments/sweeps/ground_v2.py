"""Proving ground v2 (experiments/configs/ladder2.py): GRPO's budget axis and each family's oracle.

One command runs every variant on 5 seeds from one shared SFT, two runs at a time, and writes the
report (experiments/sweeps/ground_v2_report.{md,png,json}):

    python -m experiments.sweeps.ground_v2 --workdir_root=runs/sweeps --jobs=2

It is `experiments.sweeps.launch --sweep=ground_v2 --base_config=experiments/configs/ladder2.py`
followed by `experiments.report` on the finished runs with `--baseline=grpo_g4` (paired
differences over seeds on the test set). A method measured here later names its family's oracle
(`--oracle=METHOD:oracle_prm`) for the share of the oracle's gain it recovers. Re-running the command continues an interrupted sweep (finished runs
are skipped, half-finished ones resume from their checkpoints).

Variants (every one 100 RL steps of 32 prompts; the tables read the test set):
  grpo_g4          GRPO, G = 4 (the ground's baseline).
  grpo_g8          GRPO, G = 8: twice the rollout tokens per step.
  grpo_g16         GRPO, G = 16: four times.
  oracle_prm       PAV with a perfect prover at G = 4: the step checker's labels as progress
                   (`rl.process_reward=oracle`), alpha = 1 (the PAV sweep's setting).
  oracle_knapsack  Knapsack RL at G = 4's budget (128 rows, 2 to 16 a prompt) with the oracle
                   prior: each prompt's success rate under the current policy from 16 Monte
                   Carlo samples (`oracle/mc_tokens`, not rollout tokens).
  oracle_treepo    TreePO at G = 4 with segments cut at the scratchpad's newlines
                   (`rl.treepo.segment=newline`): forks at step boundaries.
"""

from __future__ import annotations

import os
import subprocess
import sys

from absl import app, flags

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
                        "rl.allocator_prior": "oracle", "rl.allocation.min_n": 2},
    "oracle_treepo": {"rl.rollout": "treepo", "rl.treepo.segment": "newline"},
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  # Seed by seed: an interrupted sweep leaves whole seeds, which pair across variants.
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for seed in SEEDS for variant, overrides in VARIANTS.items()]


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

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    launch = [sys.executable, "-m", "experiments.sweeps.launch", "--sweep=ground_v2",
              f"--base_config={BASE_CONFIG}", f"--workdir_root={_ROOT.value}",
              f"--jobs={_JOBS.value}"] + (["--dry_run"] if _DRY_RUN.value else [])
    subprocess.run(launch, check=True)
    report = report_command(os.path.join(_ROOT.value, "ground_v2"), _OUT.value)
    if _DRY_RUN.value:
      print(" ".join(report))
      return
    subprocess.run(report, check=True)

  app.run(main)
