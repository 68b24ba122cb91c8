"""experiments/train_value.py on a tiny finished run: V0 trained offline from a history file."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments.configs import common
from rl_jax.tools import train_value as offline
from rl_jax.train import loop
from rl_jax.value.history import RolloutHistory
from rl_jax.value.v0 import io as v0_io

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, smoke_config_factory):
  config = smoke_config_factory()
  config.control.enabled = False
  config.eval.temperatures = ()
  config.rl.update(steps=0, eval_every=0)  # SFT only: its checkpoint is step 0
  workdir = str(tmp_path_factory.mktemp("run"))
  loop.run(config, workdir)
  rng = np.random.default_rng(0)
  h = RolloutHistory()
  for s in range(4):
    ids = rng.choice(config.task.train_size, 6, replace=False)
    h.record(s, ids, np.full(6, 4), rng.integers(0, 5, 6))
  path = os.path.join(workdir, "history.jsonl")
  h.to_jsonl(path)
  return workdir, path


def test_offline_cli_writes_params_and_calibration(tiny_run):
  workdir, history = tiny_run
  out = os.path.join(workdir, "v0")
  cmd = [sys.executable, "-m", "experiments.train_value", f"--history={history}",
         f"--workdir={workdir}", f"--out={out}", "--steps=3", "--val_steps=2",
         "--v0=num_queries=4", "--v0=head_dim=8", "--v0=support_size=16"]
  # XLA optimizations off: the command compiles the run's policy and V0's programs on tiny
  # shapes, and what is checked (the files it writes, their keys and shapes) does not depend on it.
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_DISABLE_MOST_OPTIMIZATIONS="1")
  res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, env=env)
  assert res.returncode == 0, res.stderr[-2000:]
  line = json.loads(res.stdout.strip().splitlines()[-1])
  for key in ("v0/brier", "v0/auroc", "v0/ece", "baseline_global_mean/brier",
              "baseline_past_rate/brier", "baseline_logreg/brier", "sigma0_sq"):
    assert key in line
  with open(os.path.join(out, "calibration.json")) as f:
    summary = json.load(f)
  assert summary["val_steps"] == [2, 3] and summary["train_steps"] == [0, 1]
  assert summary["checkpoints"] == [0]  # the SFT policy
  assert summary["optimizer_steps"] == 3 and summary["val_rows"] == 12
  cfg, params = v0_io.load(out)
  assert cfg.num_queries == 4 and params["encoder"]["q_static"].shape == (4, 6)


def test_overrides_are_typed_and_unknown_fields_named():
  config = common.base()
  offline.apply_overrides(config, ["head=ridge", "support_size=16",
                                       "estimate_sigma0=false", "alpha=0.5"])
  v = config.value.v0
  assert (v.head, v.support_size, v.estimate_sigma0, v.alpha) == ("ridge", 16, False, 0.5)
  with pytest.raises(ValueError, match="no_such"):
    offline.apply_overrides(config, ["no_such=1"])


def test_history_steps_take_the_features_of_the_policy_that_sampled_them():
  assert [offline.checkpoint_for(s, [50, 0, 25]) for s in (0, 1, 24, 25, 49, 74)] == [
      0, 0, 0, 25, 25, 50]
  assert offline.checkpoint_for(3, [25, 50]) == 25  # no older checkpoint: the oldest kept
