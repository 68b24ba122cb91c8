"""experiments/configs/ladder.py: the proving ground's `:smoke` variant end to end, and its
summary fields (per-stratum accuracy, success-rate histogram, step error rates)."""

from __future__ import annotations

import json
import os

import pytest

from experiments.configs import ladder as ladder_config
from rl_jax import data
from rl_jax import experiment
from rl_jax.train import loop


# XLA optimizations off: compiling the pipeline is most of the run's time; the summary's fields
# and bounds checked here do not depend on it.
@pytest.mark.usefixtures("fast_compiles")
def test_ladder_smoke_end_to_end(tmp_path):
  config = ladder_config.get_config("smoke")
  summary = loop.run(config, str(tmp_path))
  strata = [str(k) for k in range(2, 8)]
  for phase in ("sft", "rl"):
    by_stratum = summary[f"{phase}_accuracy_by_stratum"]
    assert sorted(by_stratum) == strata
    assert all(0.0 <= v <= 1.0 for v in by_stratum.values())
    assert 0.0 <= summary[f"{phase}_step_error_rate"] <= 1.0
    hist = summary[f"{phase}_success_rate_histogram"]
    assert len(hist) == 10 and sum(hist) == config.task.eval_size
  shares = summary["sft_success_rate_shares"]
  assert sum(shares.values()) == pytest.approx(1.0)
  assert summary["success_rate_samples"] == config.eval.num_samples >= 8
  records = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  assert any("heldout_step_error_rate" in r for r in records if r["phase"] == "rl")
  assert any(r.get("rollout_tokens", 0) > 0 for r in records if r["phase"] == "rl")
  assert os.path.getsize(tmp_path / "curves.png") > 5_000


def test_ladder_config_variants():
  with pytest.raises(ValueError, match="unknown variant"):
    ladder_config.get_config("big")
  c = ladder_config.get_config()
  assert c.task.name == "ladder" and c.task.eval_size >= 1000
  assert c.eval.num_samples >= 8  # the SFT success-rate histogram needs 8 samples per prompt
  # One SFT policy for every training seed: the gate's seed spread is RL's own.
  assert c.sft.seed == 0 and experiment.sft_seed(_with(c, seed=2)) == 0
  assert experiment.sft_seed(_with(c, seed=2, sft_seed=-1)) == 2
  assert experiment.phase_seed(_with(c, seed=2), "rl") == 2
  with pytest.raises(AttributeError):
    c.rl.stepz = 3  # locked


def _heldout(config):
  tc = config.task
  task = data.make_task(tc.name, tc.options.to_dict(), experiment.task_seed(config), 60,
                        tc.eval_size)
  return [e.prompt for e in task.heldout]


def _with(config, **fields):
  config = config.copy_and_resolve_references()
  config.unlock()
  for key, value in fields.items():
    target, name = ((config.task, key[5:]) if key.startswith("task_") else
                    (config.sft, key[4:]) if key.startswith("sft_") else (config, key))
    target[name] = value
  return config


def test_task_seed_pins_the_heldout_set_across_training_seeds():
  config = ladder_config.get_config("smoke")
  # The ladder pins its problems: every training seed is measured on one held-out set.
  assert config.task.seed == 0
  assert _heldout(_with(config, seed=0)) == _heldout(_with(config, seed=2))
  # -1: the problems follow config.seed.
  assert (_heldout(_with(config, seed=0, task_seed=-1))
          != _heldout(_with(config, seed=1, task_seed=-1)))
  assert (_heldout(_with(config, seed=0, task_seed=3))
          == _heldout(_with(config, seed=1, task_seed=3))
          == _heldout(_with(config, seed=3, task_seed=-1)))
  with pytest.raises(ValueError, match=r"config.task.seed=-2"):
    experiment.task_seed(_with(config, task_seed=-2))
