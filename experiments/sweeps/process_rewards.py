"""Process rewards on the ladder: PAV and PRIME against GRPO G=8, three seeds each (issue 16).

    # 1. PRMs of the shared SFT policy (the ladder pins sft.seed=0), one per PRM seed S = 0, 1, 2
    #    (Monte Carlo / EPTree labels of its rollouts), judged against the step checker:
    python -m experiments.train_prm --workdir=runs/pg/process_rewards/_sft/seed0 \
        --out=runs/pg/process_rewards/_prm/seed$S --kinds=pav,orm,pav_tree --seed=$S \
        --num_prompts=256 --samples=4 --n_mc=4 --steps=300 --batch_size=64
    python -m experiments.eval_prm --workdir=runs/pg/process_rewards/_sft/seed0 \
        --prm=runs/pg/process_rewards/_prm/seed$S/pav,runs/pg/process_rewards/_prm/seed$S/orm,runs/pg/process_rewards/_prm/seed$S/pav_tree \
        --out=runs/pg/process_rewards/_prm/seed$S --num_prompts=300 --samples=8 --seed=$S
    # 2. RL with each process reward from the shared SFT (step 1 needs its _sft/seed0 first:
    #    the launcher writes it; or run the launcher once, then step 1, then the launcher again):
    python -m experiments.sweeps.launch --sweep=process_rewards \
        --base_config=experiments/configs/ladder.py --workdir_root=runs/pg
    python -m experiments.report --workdirs='runs/pg/process_rewards/[!_]*' \
        --workdirs='runs/pg/ladder_baselines/grpo_g8_seed*' --baseline=grpo_g8 \
        --out=experiments/sweeps/process_rewards_report.md

Variants (G = 8 as the GRPO baseline; every run starts from the one shared SFT policy):
  pav_a1   GRPO outcome advantage + alpha x PAV progress, alpha = 1.0 (docs/algorithms.md §5.1 has
           no value for alpha; 1.0 is our guess, not the paper's), the seed-0 PAV for every seed.
  prime    PRIME's implicit PRM (beta 0.05, PRM lr 1e-6), RLOO per reward source, whitened.
OPRL (`rl.process_reward=oprl`, `rl.advantage=rloo`) is built and tested but not in this sweep.
"""

from __future__ import annotations

SEEDS = (0, 1, 2)
PRM_ROOT = "runs/pg/process_rewards/_prm"

COMMON: dict = {"eval.num_samples": 1}

VARIANTS = {
    "pav_a1": {"rl.process_reward": "pav", "rl.process.alpha": 1.0,
               "rl.process.prm_dir": f"{PRM_ROOT}/seed0/pav"},
    "prime": {"rl.process_reward": "prime"},
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  return [dict(COMMON, **overrides, seed=seed, name=f"{variant}_seed{seed}")
          for variant, overrides in VARIANTS.items() for seed in SEEDS]
