"""Tree rollouts vs independent sampling on the default experiment, two seeds each.

    python -m experiments.sweeps.launch --sweep=tree \
        --base_config=experiments/configs/default.py --workdir_root=runs/sweeps
    python -m experiments.report --workdirs='runs/sweeps/tree/*' \
        --out=runs/sweeps/tree.md --png=runs/sweeps/tree.png

Every run starts from its seed's shared SFT checkpoint and runs 200 RL steps of 32 prompts x 8
rows; `rollout_tokens` counts the tokens decoded to make each batch (a fork's shared prefix
once), so the report's accuracy-vs-rollout-tokens curves compare the methods at equal rollout
budgets.

Variants (docs/algorithms.md §3):
  iid            8 independent samples per prompt (the default experiment), GRPO.
  latr           LATR leaves + independent samples by the math mix schedule (η = 1, then 0.75
                 from step 100), GRPO over the group. The SFT policy is sharp: with the
                 reference's math thresholds (τ_abs 0.15, τ_rel 0.25) only 10 of 32 prompts
                 fork, so τ_abs = 0.02, τ_rel = 1.0 (any rank-2 token above 2%); the 5-token
                 completions make the lookahead window 4.
  eptree_grpo    EPTree (M, N, L, T) = (2, 1, 1, 3): 8 leaves per prompt, GRPO over them.
  eptree_treerl  the same trees with TreeRL's segment advantage (§3.2, paper form).
"""

from __future__ import annotations

SEEDS = (0, 1)

COMMON = {"control.enabled": False}

_LATR = {"rl.rollout": "latr", "rl.latr.tau_abs": 0.02, "rl.latr.tau_rel": 1.0,
         "rl.latr.windows": (4,)}
_EPTREE = {"rl.rollout": "eptree", "rl.eptree.num_chains": 2, "rl.eptree.forks_per_round": 1,
           "rl.eptree.rounds": 1, "rl.eptree.branches": 3}

VARIANTS = {
    "iid": {},
    "latr": _LATR,
    "eptree_grpo": dict(_EPTREE, **{"rl.advantage": "grpo"}),
    "eptree_treerl": dict(_EPTREE, **{"rl.advantage": "treerl_paper"}),
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
