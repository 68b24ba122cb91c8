"""The process-rewards sweep is data that applies to the ladder config and passes its checks."""

from experiments.configs import ladder as ladder_config
from experiments.sweeps import process_rewards
from rl_jax.train import config_check


def test_process_rewards_sweep_applies_to_the_ladder_config():
  runs = process_rewards.get_sweep()
  assert len(runs) == len(process_rewards.VARIANTS) * 3
  for run in runs:
    config = ladder_config.get_config()
    config.update_from_flattened_dict({k: v for k, v in run.items() if k != "name"})
    config_check.check(config)  # alpha set for pav, known names, options in range
    assert config.init_from.endswith(f"_sft/seed{run['seed']}")
  pav = next(r for r in runs if r["name"] == "pav_a1_seed2")
  assert pav["rl.process.prm_dir"].endswith("_prm/seed2/pav")
