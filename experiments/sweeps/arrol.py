"""ARRoL online pruning on the proving ground, three seeds, against GRPO (issue 18, item 4).

    python -m experiments.sweeps.launch --sweep=arrol \
        --base_config=experiments/configs/ladder.py --workdir_root=runs/sweeps
    python -m experiments.report --workdirs='runs/sweeps/arrol/[!_]*' \
        --workdirs='runs/sweeps/ladder_baselines/grpo_g*' --baseline=grpo_g8 \
        --out=runs/sweeps/arrol.md --png=runs/sweeps/arrol.png

Every run starts from its seed's shared SFT checkpoint; the ladder config's RL otherwise (75 steps
of 32 prompts, G = 8 rows per prompt in the batch). ARRoL samples N0 = 12 rows per prompt and
prunes to 8 at t_p = 20 of the 80 tokens (docs/algorithms.md §6.6, keep rule reconstructed [R]);
`rollout_tokens` counts the pruned rows' prefixes, so the report compares at equal rollout tokens.

Variants:
  arrol          the 'balanced' keep rule (4 highest + 4 lowest quality-head scores).
  arrol_lowest   stop the 4 rows predicted most likely to fail (no balance).
  arrol_blind    the head never trains (updates=0: constant score, a score-blind subsample of
                 the 12 rows): ARRoL's cost without its selection.
"""

from __future__ import annotations

SEEDS = (0, 1, 2)

COMMON: dict = {"rl.rollout": "arrol", "rl.arrol.oversample": 1.5, "rl.arrol.prune_frac": 0.25}

VARIANTS = {
    "arrol": {"rl.arrol.rule": "balanced"},
    "arrol_lowest": {"rl.arrol.rule": "lowest"},
    "arrol_blind": {"rl.arrol.rule": "balanced", "rl.arrol.updates": 0},
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
