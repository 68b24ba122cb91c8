"""The process-rewards and rollout-engine sweeps are data that apply to the ladder config, pass
its checks, and start every run from the one shared SFT policy."""

import pytest

from experiments.configs import ladder as ladder_config
from experiments.sweeps import engine, launch, process_rewards
from rl_jax.train import config_check


@pytest.mark.parametrize("sweep", [process_rewards, engine])
def test_sweep_applies_to_the_ladder_config_from_one_sft(sweep):
  runs = sweep.get_sweep()
  assert len(runs) == len(sweep.VARIANTS) * 3
  for run in runs:
    config = ladder_config.get_config()
    config.update_from_flattened_dict({k: v for k, v in run.items() if k != "name"})
    config_check.check(config)  # alpha set for pav, known names, options in range
  steps = launch.plan(runs, "experiments/configs/ladder.py", "runs/pg/x", True,
                      launch.base_sft_seed("experiments/configs/ladder.py"))
  assert [w for w, _ in steps[:1]] == ["runs/pg/x/_sft/seed0"] and len(steps) == len(runs) + 1
  assert all("--config.init_from=runs/pg/x/_sft/seed0" in argv for _, argv in steps[1:])
  if sweep is process_rewards:
    pav = next(r for r in runs if r["name"] == "pav_a1_seed2")
    assert pav["rl.process.prm_dir"].endswith("_prm/seed0/pav")  # one PAV for every seed
