"""Trains V0 offline on a run's rollout history and reports its calibration.

    python -m experiments.train_value --history=RUN/history.jsonl --workdir=RUN \
        [--out=RUN/v0_offline] [--steps=300] [--val_steps=10] [--config.value.v0.head=...]

What it does (`rl_jax.tools.train_value.train`): rebuilds the run from RUN/run_config.json, takes
the prompt features from the run's own policy checkpoints (the SFT one for step 0, each kept RL
checkpoint for the steps after it), holds out the last `val_steps` policy steps of the history,
trains V0's adapter and head for `steps` optax steps (alpha·L_pair + (1-alpha)·L_ce) on the
others, and scores V0 on the held-out steps (each predicted from the support set of the steps
before it) beside the global-mean, own-past-rate and logistic-regression baselines. Writes
OUT/v0.safetensors, OUT/v0_config.json (load with `--config.value.v0.init=OUT` in a run) and
OUT/calibration.json; prints the pooled metrics as one JSON line.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from experiments import cli
from ml_collections import config_flags

from rl_jax import workdir as workdir_lib
from rl_jax.tools import train_value as offline
from rl_jax.value.history import RolloutHistory

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "The run's config file[:variant] (default: RUN/run_config.json).",
    lock_config=True)
_HISTORY = flags.DEFINE_string("history", None, "The rollout history (JSON lines).")
_WORKDIR = flags.DEFINE_string("workdir", None, "The run's work dir (policy checkpoints).")
_OUT = flags.DEFINE_string("out", "", "Output directory (default: WORKDIR/v0_offline).")
_STEPS = flags.DEFINE_integer("steps", 300, "Optax steps.")
_VAL_STEPS = flags.DEFINE_integer("val_steps", 10, "The last N policy steps are held out.")
_OVERRIDES = flags.DEFINE_multi_string(
    "v0", [], "config.value.v0 overrides as FIELD=VALUE (e.g. --v0=head=transformer).")


def main(argv):
  cli.start(argv)
  config = _CONFIG.value or workdir_lib.load_config(_WORKDIR.value)
  if "value" not in config:  # a run made before config.value existed
    from experiments.configs import common  # pylint: disable=import-outside-toplevel
    with config.unlocked():
      config.value = common.base().value
  try:
    offline.apply_overrides(config, _OVERRIDES.value)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  out = _OUT.value or os.path.join(_WORKDIR.value, "v0_offline")
  summary = offline.train(config, _WORKDIR.value, RolloutHistory.from_jsonl(_HISTORY.value), out,
                          steps=_STEPS.value, val_steps=_VAL_STEPS.value)
  print(json.dumps(dict(summary["metrics"], sigma0_sq=summary["sigma0_sq"], out=out)))


if __name__ == "__main__":
  cli.run(main, required=("history", "workdir"))
