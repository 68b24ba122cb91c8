"""The proving ground's baselines: GRPO and its peers on the ladder, three seeds each.

    python -m experiments.sweeps.launch --sweep=ladder_baselines \
        --base_config=experiments/configs/ladder.py --workdir_root=runs/sweeps
    python -m experiments.report --workdirs='runs/sweeps/ladder_baselines/[!_]*' \
        --baseline=grpo_g8 --out=runs/sweeps/ladder_baselines.md \
        --png=runs/sweeps/ladder_baselines.png

Every run starts from its seed's shared SFT checkpoint (the launcher runs one SFT per seed), so
the variants differ only in RL; each runs the config's RL steps and prompts per step. The
report compares them with `grpo_g8` at equal rollout tokens (accuracy against tokens, tokens to
reach GRPO G=8's final accuracy, area under the curve).

Variants:
  grpo_g8     GRPO, 8 rows per prompt (the ladder config's RL).
  grpo_g4     GRPO, 4 rows per prompt: half the rollout tokens per step.
  rloo        leave-one-out baseline, G = 8.
  mc_grpo     median-centred GRPO, G = 4 (+1 pivot row) = group_size 5.
  latr        LATR leaves + independent samples by the math mix schedule, G = 8.
  eptree      EPTree (M, N, L, T) = (2, 1, 1, 3): 8 leaves per prompt, GRPO over them, fork
              points in the second half of each chain (min_prefix_fraction 0.5, where forks
              share the longest prefixes; docs/research/tree-bench.md).
"""

from __future__ import annotations

SEEDS = (0, 1, 2)

COMMON: dict = {}

VARIANTS = {
    "grpo_g8": {},
    "grpo_g4": {"rl.group_size": 4},
    "rloo": {"rl.advantage": "rloo"},
    "mc_grpo": {"rl.advantage": "mc_grpo", "rl.group_size": 5},
    "latr": {"rl.rollout": "latr"},
    "eptree": {"rl.rollout": "eptree", "rl.eptree.num_chains": 2, "rl.eptree.forks_per_round": 1,
               "rl.eptree.rounds": 1, "rl.eptree.branches": 3,
               "rl.eptree.min_prefix_fraction": 0.5},
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
