"""Value priors on the proving ground (issue 15): V0.5 at G = 4 against GRPO at G = 4 and 8.

The ladder pins its SFT policy (`sft.seed = 0`), so the launcher trains one SFT and starts every
run of every seed from it, like the GRPO baselines:

    python -m experiments.sweeps.launch --sweep=value_priors \
        --base_config=experiments/configs/ladder.py --workdir_root=runs/pg
    python -m experiments.report --workdirs='runs/pg/value_priors/[!_]*' \
        --workdirs='runs/pg/ladder_baselines/grpo_g[48]_seed*' --baseline=grpo_g4 --calibration \
        --out=runs/pg/value_priors.md

V0.5 (rl/advantages/v05.py, reconstructed): n0 = G = 4 rows per prompt; a prompt whose rollouts
reject the prior (z-test, α = 0.05) gets its group doubled up to n_max = 16 rows; the batch holds
R_max = 256 rows (the rows of GRPO G = 8: what the trainer processes is the same size), so the
extra rows are bounded by 128 per step. Variants differ in the prior p0 (rl_jax/value/priors.py)
and in the extra rounds:

  v05_g4          v0: V0's in-context prediction from the policy's own prompt features and the
                  run's history (rl_jax/value/v0/run.py), trained during the run.
  v05_nmax4_g4    v0 prior, n_max = 4: the fused baseline alone, no extra rounds (128 rows, the
                  rows of GRPO G = 4); the ablation that separates the fusion from the rounds.
  v05_g4_global   global_mean: the running mean success rate of the run's history.
  v05_g4_history  history: the prompt's own past rate shrunk to the global mean (on the ladder
                  few of the 30,000 train problems repeat within 75 x 32 draws, so it is close
                  to global_mean).

Run on 2026-11-25 (docs/research/value-priors.md): v05_g4 and v05_nmax4_g4 on seeds 0-2,
v05_g4_global on seed 0; v05_g4_history not run.
"""

from __future__ import annotations

SEEDS = (0, 1, 2)

COMMON: dict = {"rl.advantage": "v05", "rl.group_size": 4, "rl.max_group_size": 16,
                "rl.rows": 256}

VARIANTS = {
    "v05_g4": {"rl.v05.prior": "v0"},
    "v05_nmax4_g4": {"rl.v05.prior": "v0", "rl.v05.n_max": 4, "rl.rows": 128},
    "v05_g4_global": {"rl.v05.prior": "global_mean"},
    "v05_g4_history": {"rl.v05.prior": "history"},
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
