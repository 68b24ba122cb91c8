"""Rollout engines on the proving ground, three seeds, against GRPO G=8 (issue 18).

    python -m experiments.sweeps.launch --sweep=engine \
        --base_config=experiments/configs/ladder.py --workdir_root=runs/pg
    python -m experiments.report --workdirs='runs/pg/engine/[!_]*' \
        --workdirs='runs/pg/ladder_baselines/grpo_g8_seed*' --baseline=grpo_g8 \
        --out=experiments/sweeps/engine_report.md --png=experiments/sweeps/engine_report.png

The ladder config pins the SFT seed, so every run starts RL from the one shared SFT policy; the
ladder's RL otherwise (75 steps of 32 prompts, G = 8 rows or leaves per prompt). The final
sampled evaluation is one sample per problem (`eval.num_samples=1`); greedy accuracy is what is
compared. `rollout_tokens` counts a tree's shared prefix once and ARRoL's pruned prefixes, so
the report compares the methods at equal rollout tokens.

Variants:
  treepo  TreePO trees (docs/algorithms.md §3.3): 2 paths from the prompt, each live path becomes 2
          at every 8-token boundary (8 leaves from token 16 on), TreePO's subgroup advantages.
  arrol   ARRoL (§6.6): 12 rows per prompt, pruned to 8 at 25% of T by the online quality head
          (the balanced keep rule, reconstructed [R]).
  echo    ECHO trees (§3.5) with thresholds that branch (entropy_high 1.0, entropy_low 0.0,
          branch_threshold 10: the reference's own thresholds never branch, echo_rules.py),
          TreePO's tree advantages.
  april   APRIL partial rollouts (§7): 2B groups launched, the batch is the first B complete,
          the rest carried; truncated importance sampling with cap 2.
"""

from __future__ import annotations

SEEDS = (0, 1, 2)

COMMON: dict = {"eval.num_samples": 1}

VARIANTS = {
    "treepo": {"rl.rollout": "treepo", "rl.treepo.segment_len": 8, "rl.treepo.first_width": 2,
               "rl.treepo.branches": 2, "rl.advantage": "treepo"},
    "arrol": {"rl.rollout": "arrol", "rl.arrol.oversample": 1.5, "rl.arrol.prune_frac": 0.25,
              "rl.arrol.rule": "balanced"},
    "echo": {"rl.rollout": "echo", "rl.advantage": "treepo", "rl.echo.entropy_high": 1.0,
             "rl.echo.entropy_low": 0.0, "rl.echo.branch_threshold": 10.0},
    "april": {"rl.partial.enabled": True, "rl.tis_cap": 2.0},
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
