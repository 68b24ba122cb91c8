"""Advantage-estimator ablation on the default experiment, two seeds each.

    python -m experiments.sweeps.launch --sweep=estimators \
        --base_config=experiments/configs/default.py --workdir_root=runs/sweeps
    python -m experiments.report --workdirs='runs/sweeps/estimators/*' \
        --out=runs/sweeps/estimators.md --png=runs/sweeps/estimators.png

Every run starts from its seed's shared SFT checkpoint (the launcher runs one SFT per seed and
passes `init_from`), so the variants differ only in RL. The more-SFT control is off.

Variants (the estimators of docs/algorithms.md §1):
  grpo        mean/std-normalized group advantage, G = 8 (the default config).
  drgrpo      r − mean, with a constant loss normalizer (TRL `dr_grpo`: Σ ℓm / (N·T_max)).
  rloo        leave-one-out baseline, G = 8.
  mc_grpo_g2  median-centred, MAD-scaled, pivot dropped: G = 2 (+1 pivot) = group_size 3.
  grpo_g3     GRPO at the same 3 rows per prompt, the fair baseline for mc_grpo_g2.
  gdpo_format GDPO over two rewards, the task score and an integer-format reward (§1.6).
"""

from __future__ import annotations

SEEDS = (0, 1)

# Overrides every run of this sweep shares.
COMMON = {"control.enabled": False}

VARIANTS = {
    "grpo": {"rl.advantage": "grpo"},
    "drgrpo": {"rl.advantage": "drgrpo", "rl.aggregation": "dr-grpo"},
    "rloo": {"rl.advantage": "rloo"},
    "mc_grpo_g2": {"rl.advantage": "mc_grpo", "rl.group_size": 3},
    "grpo_g3": {"rl.advantage": "grpo", "rl.group_size": 3},
    "gdpo_format": {"rl.advantage": "gdpo", "rl.rewards": ("task_score", "format")},
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
