"""A run on the `math` task: the smoke pipeline with a JSONL math task, a correctness reward and
the two format rewards, each logged on its own in every RL step's metrics."""

from __future__ import annotations

import json
import os

import ml_collections
import pytest

from rl_jax import workdir as workdir_lib
from rl_jax.train import loop

pytestmark = pytest.mark.usefixtures("fast_compiles")


def test_math_task_run_logs_each_reward_component(tmp_path, smoke_config_factory):
  path = tmp_path / "sums.jsonl"
  with open(path, "w") as f:
    for i in range(120):
      a, b = i % 11, i // 11
      f.write(json.dumps({"question": f"{a} + {b} =", "answer": f"so #### {a + b}"}) + "\n")
  config = smoke_config_factory()
  config.task.name = "math"
  config.task.options = ml_collections.ConfigDict(dict(path=str(path), instruction=""))
  config.task.update(train_size=100, eval_size=16, demo_noise=0.0)
  config.sampling.max_new_tokens = 8
  config.rl.rewards = ("task_score", "boxed", "think_closed")
  config.rl.reward_weights = (1.0, 0.5, 0.25)
  config.rl.steps = 2
  config.control.enabled = False
  config.eval.temperatures = ()
  summary = loop.run(config, str(tmp_path / "run"))
  with open(os.path.join(tmp_path, "run", workdir_lib.METRICS_FILE)) as f:
    records = [json.loads(line) for line in f]
  rl = [r for r in records if "reward_boxed" in r]
  assert len(rl) == config.rl.steps
  rows = config.rl.prompts_per_step * config.rl.group_size
  for r in rl:
    for name in config.rl.rewards:  # the mean of one binary component over the step's rows
      value = r[f"reward_{name}"] * rows
      assert 0.0 <= r[f"reward_{name}"] <= 1.0 and abs(value - round(value)) < 1e-6
  assert 0.0 <= summary["rl_accuracy"] <= 1.0
