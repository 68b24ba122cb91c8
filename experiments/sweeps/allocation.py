"""Budget allocation across prompts on the proving ground, against uniform GRPO (3 seeds).

    python -m experiments.sweeps.launch --sweep=allocation \
        --base_config=experiments/configs/ladder.py --workdir_root=runs/sweeps
    python -m experiments.report --workdirs='runs/sweeps/allocation/[!_]*' \
        --workdirs='runs/sweeps/ladder_baselines/grpo_g[48]_seed*' --baseline=grpo_g8 \
        --out=runs/sweeps/allocation.md --png=runs/sweeps/allocation.png

Every run starts from the shared SFT checkpoint and runs the ladder's 75 RL steps of 32
prompts. Budget: 128 rows per step (32 x 4 on average, half of GRPO G=8's 256 rows).

Budget and baselines. The pitfall: the ladder draws 32 fresh prompts per step from 30,000 train problems, so a prompt's
history is almost always empty. The `*_probe2` variants allocate within the step (two-stage,
`rl.allocation.probe`): 2 rows per prompt first, then the other 64 rows by the allocator from
those outcomes. The prompt distribution is unchanged, so the uniform baselines of
`ladder_baselines` (grpo_g8, grpo_g4) are the fair comparison and no extra uniform run is needed.
The `*_pool*` variants draw from a fixed random pool of 1,000 train problems (`rl.prompt_pool`) so
that prompts repeat and selection has history; they are compared with uniform runs on the same
pool (`uniform_g8_pool1k`, `uniform_g4_pool1k`).

Run on 2026-11-25 (docs/research/allocation.md): every
variant but uniform_g8_pool1k on seeds 0-2, all from the ladder's one SFT policy (`sft.seed = 0`; the launcher shares
it), with `--config.eval.num_samples=1`.

Variants:
  knapsack_probe2   Knapsack RL (public-code objective) on the probe's outcomes; prompts whose 2
                    probe rows agree keep 2 rows (fallback off), at most 8 rows per prompt.
  xrpo_probe2       XRPO's phased priorities (reconstructed form) on the probe's outcomes.
  dars_probe2       DARS (HW schedule) on the probe's outcomes.
  vade_pool1k       VADE (Thompson sampling over Beta posteriors) picks 32 of 128 candidates
                    from the 1,000-problem pool, 4 rows each.
  insight_pool1k    InSight (weighted mutual information, reconstructed score) picks 32 of 128
                    candidates from the same pool, 4 rows each.
  uniform_g8_pool1k, uniform_g4_pool1k   GRPO on the same pool.
"""

from __future__ import annotations

SEEDS = (0, 1, 2)

COMMON: dict = {}

_BUDGET = {"rl.group_size": 4, "rl.max_group_size": 8}  # B x 4 = 128 rows, <= 8 a prompt.
_PROBE = dict(_BUDGET, **{"rl.allocation.probe": 2, "rl.allocation.min_n": 2})
_POOL = {"rl.prompt_pool": 1000}

VARIANTS = {
    "knapsack_probe2": dict(_PROBE, **{"rl.allocator": "knapsack",
                                       "rl.allocation.knapsack.min_obs": 2,
                                       "rl.allocation.knapsack.fallback": False}),
    "xrpo_probe2": dict(_PROBE, **{"rl.allocator": "xrpo"}),
    "dars_probe2": dict(_PROBE, **{"rl.allocator": "dars"}),
    "vade_pool1k": dict(_BUDGET, **_POOL, **{"rl.allocator": "vade",
                                             "rl.allocation.candidates": 128}),
    "insight_pool1k": dict(_BUDGET, **_POOL, **{"rl.allocator": "insight",
                                                "rl.allocation.candidates": 128}),
    "uniform_g8_pool1k": dict(_POOL),
    "uniform_g4_pool1k": dict(_POOL, **{"rl.group_size": 4}),
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
