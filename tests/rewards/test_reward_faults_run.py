"""Reward faults in a whole run: summary.json counts them, a hanging reward costs about one limit
per batch, and rewards that all fail stop the run with a one-line error (issue 34, item 4)."""

from __future__ import annotations

import json
import os

import pytest

from rl_jax import rewards
from rl_jax import workdir as workdir_lib
from rl_jax.rewards import contained
from rl_jax.train import loop

import _fault_rewards  # pylint: disable=g-bad-import-order (a sibling helper module)

for _name, _fn in (("test_always_raises", _fault_rewards.always_raises),
                   ("test_always_hangs", _fault_rewards.always_hangs)):
  if _name not in rewards.REWARDS:
    rewards.REWARDS.register(_name)(_fn)

TIMEOUT = 0.3
# XLA optimizations off: compiling the smoke pipeline is most of these runs' time; the counts and
# the error checked here do not depend on it.
pytestmark = pytest.mark.usefixtures("fast_compiles")


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory, smoke_config_factory, fast_compiles):
  """default.py:smoke with a raising and a hanging reward component (weight 0)."""
  del fast_compiles  # Requested first: the run compiles as the second test's run does.
  config = smoke_config_factory()
  config.rl.rewards = ("task_score", "test_always_raises", "test_always_hangs")
  config.rl.reward_weights = (1.0, 0.0, 0.0)
  config.rl.reward_timeout = TIMEOUT
  config.control.enabled = False
  config.eval.temperatures = ()
  workdir = str(tmp_path_factory.mktemp("faulty"))
  summary = loop.run(config, workdir)
  return config, workdir, summary


def test_summary_counts_reward_errors_and_timeouts(faulty_run):
  config, workdir, summary = faulty_run
  calls = config.rl.steps * config.rl.prompts_per_step * config.rl.group_size
  with open(os.path.join(workdir, workdir_lib.SUMMARY_FILE)) as f:
    on_disk = json.load(f)
  assert on_disk["reward_errors"] == summary["reward_errors"] == calls
  assert on_disk["reward_timeouts"] == summary["reward_timeouts"] == calls
  # Concurrent calls: about one limit per step, not one per call (calls x TIMEOUT = 19 s).
  assert summary["rl_train_seconds"] < (calls * TIMEOUT) / 2, summary["rl_train_seconds"]


def test_rewards_that_all_fail_stop_the_run(faulty_run, smoke_config_factory, tmp_path):
  _, source, _ = faulty_run
  config = smoke_config_factory()
  config.init_from = source  # Its SFT policy: only the RL phase runs.
  config.rl.rewards = ("test_always_raises",)
  config.rl.reward_max_failed_steps = 2
  with pytest.raises(contained.RewardsFailedError,
                     match=r"rl steps 1-2: every reward call failed in 2 steps in a row"):
    loop.run(config, str(tmp_path))
