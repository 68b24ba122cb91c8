"""Runs an experiment: python -m experiments.run --config=path.py[:variant] --workdir=DIR.

Flags `--config.a.b=value` override fields of the (locked) config; a mistyped field is an error.

Multi-host: start the same command in every process with `--distributed` (Cloud TPU pods and
SLURM: nothing else; elsewhere also `--coordinator_address=HOST:PORT` of process 0,
`--num_processes=N` and `--process_id=I`). `config.mesh.shape` then spans the devices of all
processes, `--workdir` must be shared by all of them, and only process 0 prints the summary.

A work dir belongs to the configuration of its first run: re-running into it with other
values of results-affecting fields is refused, naming them (rl_jax/fingerprint.py).
`--print_config` prints the config's fields (overrides applied) and exits.

Exit status: 0 when the run finished; 128 + the signal number (143 SIGTERM, 130 SIGINT) when a
signal stopped it after writing a checkpoint (re-run the same command to resume); 2 for a bad
flag, config file or config field name, 1 for any other error (a config value out of range, a
bad work dir, a model.path that is neither a checkpoint directory nor a fetchable hub id, too
many non-finite steps in a row), each as ONE line `error: ...` on stderr
(`--debug` or RL_JAX_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import json
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from experiments import cli
from rl_jax import experiment, parallel
from rl_jax.rewards import contained
from rl_jax.train import config_check, loop, phases, signals

__doc__ += cli.configs_help()

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file[:variant].",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, summary.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Join a multi-process run (jax.distributed.initialize); implied by "
    "--coordinator_address.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "HOST:PORT of process 0 (multi-process runs).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index, 0 .. N-1.")
_PRINT_CONFIG = flags.DEFINE_bool("print_config", False,
                                  "Print the config's fields (overrides applied) and exit.")


def main(argv):
  cli.start(argv, quiet=False)
  config = cli.config_value(_CONFIG)
  if _PRINT_CONFIG.value:
    print(config)
    return
  if not _WORKDIR.value:
    raise app.UsageError("--workdir is required (the run's directory)")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO.
  if _COORDINATOR.value and (_NUM_PROCESSES.value is None or _PROCESS_ID.value is None):
    raise app.UsageError(f"--coordinator_address={_COORDINATOR.value} needs --num_processes and "
                         "--process_id (expected e.g. --num_processes=2 --process_id=0)")
  if _DISTRIBUTED.value or _COORDINATOR.value:
    parallel.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  try:
    summary = loop.run(config, _WORKDIR.value)
  except signals.Preempted as e:
    print(f"stopped: {e}", file=sys.stderr)
    sys.exit(128 + e.signum)
  except (config_check.ConfigError, phases.NonFiniteError, contained.RewardsFailedError,
          experiment.ModelPathError) as e:
    if cli.debug():
      raise
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  if not parallel.is_primary():
    return
  print(json.dumps({k: v for k, v in summary.items() if k != "evals"}, indent=1, sort_keys=True))


if __name__ == "__main__":
  cli.run(main, required=('config',))
