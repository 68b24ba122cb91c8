"""A run directory (a work dir): where each file of a run lives, and the run's stored config.

    WORKDIR/
      run_config.json          the run's config (`save_config` / `load_config`)
      summary.json             the finished run's summary (train/loop.py)
      evals.json               finished evaluations, kept across restarts (train/loop.py)
      metrics.jsonl, tb/       metrics (rl_jax.metrics.MetricsWriter)
      history.jsonl            the RL phase's rollout history (value.history), written at its end
      checkpoints/<phase>/     orbax checkpoints of a phase: sft, rl, sft_more, rl_prm
      eval/                    post-run evaluations (evals/runner.py)

The names never change: experiments.eval / export, train_value, init_from and resumed runs read
the files of runs made earlier.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import ml_collections

RUN_CONFIG_FILE = "run_config.json"
SUMMARY_FILE = "summary.json"
EVALS_FILE = "evals.json"
METRICS_FILE = "metrics.jsonl"
HISTORY_FILE = "history.jsonl"
# Wall seconds of every process that ran the work dir (`WallClock` below).
WALL_CLOCK_FILE = "wall_clock.json"
CHECKPOINTS_DIR = "checkpoints"
EVAL_DIR = "eval"


def checkpoint_dir(workdir: str, phase: str) -> str:
  """Where a run keeps the checkpoints of `phase` (`config.init_from` reads the 'sft' ones)."""
  return os.path.join(workdir, CHECKPOINTS_DIR, phase)


def save_config(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Writes `config` to `WORKDIR/run_config.json` (what `load_config` reads)."""
  os.makedirs(workdir, exist_ok=True)
  tmp = os.path.join(workdir, RUN_CONFIG_FILE + ".tmp")
  with open(tmp, "w") as f:
    f.write(config.to_json(indent=1, sort_keys=True))
  os.replace(tmp, os.path.join(workdir, RUN_CONFIG_FILE))


def _tuples(x: Any) -> Any:
  if isinstance(x, dict):
    return {k: _tuples(v) for k, v in x.items()}
  if isinstance(x, list):  # configs hold tuples; JSON turned them into lists
    return tuple(_tuples(v) for v in x)
  return x


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a run stored in `WORKDIR/run_config.json`.

  Raises:
    FileNotFoundError: the file is missing (runs made before it existed: pass the run's
      `--config` and overrides instead).
  """
  path = os.path.join(workdir, RUN_CONFIG_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} does not exist; expected the run_config.json that "
                            "experiments.run writes into its work dir (for an older run pass its "
                            "--config=FILE[:variant] and --config.* overrides)")
  with open(path) as f:
    return ml_collections.ConfigDict(_tuples(json.load(f)))


class WallClock:
  """The run's wall seconds over every process that ran it, killed ones included.

  Each process keeps its own elapsed time in `workdir/wall_clock.json` (one entry per process
  start), rewritten atomically after every metrics record and evaluation (`tick`), so a process
  killed mid-phase leaves its time up to its last record. `total()` is their sum. A work dir from
  before the ledger seeds it with the store's `previous_wall_seconds` (the finished processes').
  """

  def __init__(self, workdir: str, previous: float = 0.0, *, primary: bool = True,
               start: float | None = None):
    self.path = os.path.join(workdir, WALL_CLOCK_FILE)
    self.primary = primary  # Only the primary process writes (multi-host runs).
    self.start = time.time() if start is None else start  # This process's start (time.time()).
    self.entries = {}
    if os.path.exists(self.path):
      with open(self.path) as f:
        try:
          self.entries = json.load(f)
        except ValueError as e:
          raise ValueError(f"{self.path} is not valid JSON ({e}); delete it (the run's wall "
                           "seconds then count from this process)") from None
    elif previous:
      self.entries["before_the_ledger"] = float(previous)
    self.key = f"process_{len(self.entries)}"

  def tick(self) -> None:
    self.entries[self.key] = time.time() - self.start
    if not self.primary:
      return
    tmp = f"{self.path}.tmp"
    with open(tmp, "w") as f:
      json.dump(self.entries, f, indent=1)
    os.replace(tmp, self.path)

  def total(self) -> float:
    self.tick()
    return float(sum(self.entries.values()))
