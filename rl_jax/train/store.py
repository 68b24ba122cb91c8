"""A run's evaluations on disk (`WORKDIR/evals.json`), and what a run continued to more RL steps
drops from it.

`Store` keeps each final evaluation once computed, so a resumed run does not repeat it;
`continue_run` forgets the RL phase's final ones when `rl.steps` is raised
(`rl_jax.fingerprint.continuation`), so they are made again at the new last step.
"""

from __future__ import annotations

import json
import logging
import os

from rl_jax import fingerprint, parallel
from rl_jax import workdir as workdir_lib

_log = logging.getLogger(__name__)


class Store:
  """A JSON dict on disk, rewritten atomically on every `set` (by process 0 only; every process
  keeps the values, which the run computes the same way everywhere)."""

  def __init__(self, path: str):
    self.path = path
    self.values = {}
    self.on_set = None  # Called after every `set` (the run's wall-clock ledger).
    if os.path.exists(path):
      with open(path) as f:
        try:
          self.values = json.load(f)
        except ValueError as e:
          raise ValueError(f"{path} is not valid JSON ({e}); delete it to recompute the "
                           "evaluations it held") from None

  def get(self, key, compute):
    if key not in self.values:
      self.set(key, compute())
    return self.values[key]

  def set(self, key, value):
    self.values[key] = value
    self._write()

  def drop(self, keys) -> None:
    """Forgets `keys` (those present), so the next `get` recomputes them."""
    if any(k in self.values for k in keys):
      self.values = {k: v for k, v in self.values.items() if k not in keys}
      self._write()

  def _write(self):
    if self.on_set is not None:
      self.on_set()
    if not parallel.is_primary():
      return
    tmp = f"{self.path}.tmp"
    with open(tmp, "w") as f:
      json.dump(self.values, f, indent=1, sort_keys=True)
    os.replace(tmp, self.path)


# The evaluations of the RL phase's last step, made again when a run continues to more RL steps.
RL_FINAL_KEYS = ("rl", "rl_seconds", "rl_test")


def continue_run(config, workdir: str, store: Store, steps: tuple[int, int]) -> None:
  """Makes `workdir`'s run of `steps[0]` RL steps one of `steps[1]`: its summary and RL-final
  evaluations go, then its fingerprint records the new config (in this order, so that a crash
  in between leaves a run that a re-run continues again)."""
  _log.info("%s: continuing the run from %d to %d RL steps (config.rl.steps)", workdir, *steps)
  if parallel.is_primary():
    summary = os.path.join(workdir, workdir_lib.SUMMARY_FILE)
    if os.path.exists(summary):
      os.remove(summary)
  store.drop(RL_FINAL_KEYS)
  if parallel.is_primary():
    fingerprint.record(workdir, config, replace=True)
