"""Runs an experiment: python -m experiments.run --config=path.py[:variant] --workdir=DIR.

Flags `--config.a.b=value` override fields of the (locked) config; a mistyped field is an error.

Exit status: 0 when the run finished; 128 + the signal number (143 SIGTERM, 130 SIGINT) when a
signal stopped it after writing a checkpoint (re-run the same command to resume); 1 with a
one-line message for a config value out of range or too many non-finite steps in a row.
"""

from __future__ import annotations

import json
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from rl_jax.train import config_check, loop, phases, signals

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file[:variant].",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, summary.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO.
  try:
    summary = loop.run(_CONFIG.value, _WORKDIR.value)
  except signals.Preempted as e:
    print(f"stopped: {e}", file=sys.stderr)
    sys.exit(128 + e.signum)
  except (config_check.ConfigError, phases.NonFiniteError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  print(json.dumps({k: v for k, v in summary.items() if k != "evals"}, indent=1, sort_keys=True))


if __name__ == "__main__":
  app.run(main)
