"""TreePO's segment-wise tree rollouts on the proving ground, three seeds, against GRPO (issue 18).

    python -m experiments.sweeps.launch --sweep=engine \
        --base_config=experiments/configs/ladder.py --workdir_root=runs/sweeps
    python -m experiments.report --workdirs='runs/sweeps/engine/[!_]*' \
        --workdirs='runs/sweeps/ladder_baselines/grpo_g*' --baseline=grpo_g8 \
        --out=runs/sweeps/engine.md --png=runs/sweeps/engine.png

Every run starts from its seed's shared SFT checkpoint; the ladder config's RL otherwise
(75 steps of 32 prompts, G = 8 leaves per prompt). `rollout_tokens` counts a shared prefix once,
so the report compares the methods at equal rollout tokens.

Variants (ALGORITHMS.md §3.3):
  treepo        TreePO trees (2 paths from the prompt, each live path becomes 2 at every
                8-token boundary: 8 leaves from token 16 on) with TreePO's subgroup advantages.
  treepo_grpo   the same trees with plain GRPO advantages over the 8 leaves (isolates the
                advantage from the sampling).
"""

from __future__ import annotations

SEEDS = (0, 1, 2)

COMMON: dict = {}

_TREEPO = {"rl.rollout": "treepo", "rl.treepo.segment_len": 8, "rl.treepo.first_width": 2,
           "rl.treepo.branches": 2}

VARIANTS = {
    "treepo": dict(_TREEPO, **{"rl.advantage": "treepo"}),
    "treepo_grpo": dict(_TREEPO, **{"rl.advantage": "grpo"}),
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
