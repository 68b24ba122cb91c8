"""Process rewards on the ladder: PAV, PRIME and OPRL against GRPO G=8, three seeds each.

    # 1. a PAV per seed from that seed's shared SFT policy (Monte Carlo labels of its rollouts):
    python -m experiments.train_prm --workdir=runs/sweeps/ladder_baselines/_sft/seed$S \
        --out=runs/sweeps/process_rewards/_prm/seed$S --kinds=pav,orm
    # 2. judge it against the step checker (first wrong step, AUROC, best-of-8):
    python -m experiments.eval_prm --workdir=runs/sweeps/ladder_baselines/_sft/seed$S \
        --prm=runs/sweeps/process_rewards/_prm/seed$S/pav,runs/sweeps/process_rewards/_prm/seed$S/orm \
        --out=runs/sweeps/process_rewards/_prm/seed$S
    # 3. RL with each process reward, from the shared SFT of each seed:
    python -m experiments.sweeps.launch --sweep=process_rewards \
        --base_config=experiments/configs/ladder.py --workdir_root=runs/sweeps
    python -m experiments.report --workdirs='runs/sweeps/process_rewards/[!_]*' \
        --workdirs='runs/sweeps/ladder_baselines/grpo_g8_seed*' --baseline=grpo_g8

Variants (G = 8 as the GRPO baseline):
  pav_a1   GRPO outcome advantage + alpha x PAV progress, alpha = 1.0 (ALGORITHMS.md §5.1 has
           no value for alpha; 1.0 is our guess, not the paper's), PRM from step 1.
  prime    PRIME's implicit PRM (beta 0.05, PRM lr 1e-6), RLOO per reward source, whitened.
  oprl     iStar form: RLOO outcome advantage + 1.0 x (step reward - first-step RLOO baseline).
The shared SFT checkpoints must exist first (the ladder_baselines sweep writes them); step 1
must have written runs/sweeps/process_rewards/_prm/seed$S/pav for pav_a1.
"""

from __future__ import annotations

SEEDS = (0, 1, 2)
PRM_ROOT = "runs/sweeps/process_rewards/_prm"
SFT_ROOT = "runs/sweeps/ladder_baselines/_sft"

VARIANTS = {
    "pav_a1": {"rl.process_reward": "pav", "rl.process.alpha": 1.0},
    "prime": {"rl.process_reward": "prime"},
    "oprl": {"rl.process_reward": "oprl", "rl.advantage": "rloo"},
}


def get_sweep() -> list[dict]:
  """One dict per run: config overrides, plus 'name' (the run's directory name)."""
  runs = []
  for variant, overrides in VARIANTS.items():
    for seed in SEEDS:
      run = dict(overrides, seed=seed, name=f"{variant}_seed{seed}",
                 init_from=f"{SFT_ROOT}/seed{seed}")
      if overrides.get("rl.process_reward") == "pav":
        run["rl.process.prm_dir"] = f"{PRM_ROOT}/seed{seed}/pav"
      runs.append(run)
  return runs
