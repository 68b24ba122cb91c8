"""Value priors on the proving ground (issue 15): V0.5 at G = 4 against GRPO at G = 4 and 8.

Each run starts RL from its seed's shared SFT of the ladder baselines, so it compares directly
with runs/sweeps/ladder_baselines/grpo_g{4,8}_seed*:

    for S in 0 1 2; do nice -n 2 python -m experiments.run --config=experiments/configs/ladder.py \
        --workdir=runs/sweeps/value_priors/v05_g4_seed$S --config.seed=$S \
        --config.init_from=runs/sweeps/ladder_baselines/_sft/seed$S \
        --config.rl.advantage=v05 --config.rl.group_size=4 --config.rl.max_group_size=16 \
        --config.rl.rows=256 --config.rl.v05.prior=v0; done
    python -m experiments.report --workdirs='runs/sweeps/value_priors/*' \
        --workdirs='runs/sweeps/ladder_baselines/grpo_g*' --baseline=grpo_g8

(or `python -m experiments.sweeps.launch --sweep=value_priors
--base_config=experiments/configs/ladder.py`, which trains its own SFT per seed).

V0.5 (rl_jax/value/v05.py, reconstructed): n0 = G = 4 rows per prompt; a prompt whose rollouts
reject the prior (z-test, α = 0.05) gets its group doubled up to n_max = 16 rows; the batch holds
R_max = 256 rows (the rows of GRPO G = 8: what the trainer processes is the same size), so the
extra rows are bounded by 128 per step. Variants differ in the prior p0 (rl_jax/value/priors.py):

  v05_g4          v0: V0's in-context prediction from the policy's own prompt features and the
                  run's history (rl_jax/value/run_v0.py), trained during the run.
  v05_g4_global   global_mean: the running mean success rate of the run's history.
  v05_g4_history  history: the prompt's own past rate shrunk to the global mean (on the ladder
                  few of the 30,000 train problems repeat within 75 x 32 draws, so it is close
                  to global_mean).
"""

from __future__ import annotations

SEEDS = (0, 1, 2)

COMMON: dict = {"rl.advantage": "v05", "rl.group_size": 4, "rl.max_group_size": 16,
                "rl.rows": 256}

VARIANTS = {
    "v05_g4": {"rl.v05.prior": "v0"},
    "v05_g4_global": {"rl.v05.prior": "global_mean"},
    "v05_g4_history": {"rl.v05.prior": "history"},
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
