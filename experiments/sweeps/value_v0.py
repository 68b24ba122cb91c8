"""V0's calibration on the proving ground (issue 15, items 1 and 5): GRPO G = 8 with V0 on.

    for S in 0 1 2; do nice -n 2 python -m experiments.run --config=experiments/configs/ladder.py \
        --workdir=runs/sweeps/value_v0/grpo_g8_v0_seed$S --config.seed=$S \
        --config.init_from=runs/sweeps/ladder_baselines/_sft/seed$S \
        --config.value.v0.enabled=True; done
    python -m experiments.train_value \
        --history=runs/sweeps/value_v0/grpo_g8_v0_seed0/history.jsonl \
        --workdir=runs/sweeps/value_v0/grpo_g8_v0_seed0 --steps=300 --val_steps=15

V0 does not change GRPO's training here (its randomness and its calibration samples have their
own streams): the runs are GRPO G = 8 plus, at every evaluation (steps 25, 50, 75), V0's Brier
score, AUROC and ECE on 256 evenly spaced held-out prompts x 8 samples at T = 1, beside the
global-mean, own-past-rate and logistic-regression baselines (metrics.jsonl, `v0/*` and
`baseline_*/*`). Each run's history.jsonl then trains V0 offline (`experiments/train_value.py`),
validated on the last steps of the history.
"""

from __future__ import annotations

SEEDS = (0, 1, 2)

COMMON: dict = {"value.v0.enabled": True}

VARIANTS = {
    "grpo_g8_v0": {},
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
