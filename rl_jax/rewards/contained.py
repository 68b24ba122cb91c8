"""Contained reward calls: a per-call time limit, and a raise or a timeout scores 0.

Reward functions are user code. `ContainedScorer` runs them so that a verifier that raises or
hangs never stops a run: the call scores 0.0, is counted (`reward/errors`, `reward/timeouts` in
the step's metrics) and the first few messages are logged.

Isolation modes (`config.rl.reward_isolation`):

* 'thread' (the default): the batch's calls run one after another on a daemon worker thread while
  the caller waits with a deadline for the call in progress. A call past `timeout` seconds is
  abandoned (Python cannot stop a thread; a daemon thread does not keep the process alive);
  from then on (the rest of the batch and every later batch) each call runs on its own daemon
  thread, up to MAX_CONCURRENT at once under one deadline, so a reward that hangs costs about
  one time limit per batch, not one per call.
* 'process': the calls run in a child process (spawned; the task and examples are pickled to
  it). A call past its limit kills the child, which is restarted for the remaining calls (one
  limit per hanging call: calls are not concurrent here): hard isolation (a reward that never
  returns to the interpreter, or corrupts it, is stopped), at the price of pickling every batch
  and a restart after each timeout.
* 'inline': the calls run in the caller's thread; a raise still scores 0 but there is no time
  limit (for debugging, and the baseline of `benchmarks/faults.py --overhead`).

Results do not depend on the clock unless a call actually exceeds its limit.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import threading
import time
from typing import Any, Sequence

import numpy as np

from rl_jax import _reward_worker
from rl_jax.rewards import verifiers

ISOLATIONS = ("thread", "process", "inline")
MAX_CONCURRENT = 64  # Threads of one wave of concurrent calls ('thread' isolation).
_STARTUP_SECONDS = 120.0
_log = logging.getLogger(__name__)


@dataclasses.dataclass
class ScoreStats:
  """Counts of one `score` call: calls that raised, calls that ran past the time limit, and
  all calls."""

  errors: int = 0
  timeouts: int = 0
  calls: int = 0

  def as_metrics(self) -> dict:
    """{'reward/errors': n, 'reward/timeouts': m, 'reward/calls': c}, the names the step's
    metrics use."""
    return {"reward/errors": self.errors, "reward/timeouts": self.timeouts,
            "reward/calls": self.calls}


class RewardsFailedError(RuntimeError):
  """Every reward call failed (raised or timed out) in `config.rl.reward_max_failed_steps`
  steps in a row: the rewards are broken, not the completions."""


class FailureStreak:
  """Counts steps in a row whose every reward call failed; `update` raises RewardsFailedError
  when they reach `limit` (0 = never). Steps without reward calls (SFT) are ignored."""

  def __init__(self, limit: int):
    self.limit = int(limit)
    self.in_a_row = 0

  @classmethod
  def from_config(cls, config) -> "FailureStreak":
    rl = getattr(config, "rl", None)
    return cls(rl.get("reward_max_failed_steps", 0) if rl is not None else 0)

  def update(self, phase: str, step: int, metrics: dict) -> None:
    calls = metrics.get("reward/calls", 0)
    if not calls:
      return
    errors, timeouts = metrics.get("reward/errors", 0), metrics.get("reward/timeouts", 0)
    self.in_a_row = self.in_a_row + 1 if errors + timeouts >= calls else 0
    if self.limit and self.in_a_row >= self.limit:
      raise RewardsFailedError(
          f"{phase} steps {step + 1 - self.in_a_row}-{step}: every reward call failed in "
          f"{self.in_a_row} steps in a row (last step: {int(errors)} raised, {int(timeouts)} "
          f"timed out of {int(calls)}; config.rl.reward_max_failed_steps={self.limit}); the log "
          "holds the first messages (config.rl.reward_max_logged)")


_describe = _reward_worker.describe


def _call_one(fn, task, item, out):
  """One call (concurrent mode's thread body): appends (value, error message or None)."""
  _, completion, example = item
  try:
    out.append((float(fn(task, completion, example)), None))
  except Exception as e:  # pylint: disable=broad-except
    out.append((0.0, _describe(e)))


def _call_all(fns, task, items, start, results, errors, progress):
  """Runs the calls items[start:] in order (worker body); errors[i] holds a raise's message.

  progress = [(calls done, when the last one ended), abandoned], the pair written in one
  assignment; an abandoned worker whose call returns late makes no further calls."""
  for i in range(start, len(items)):
    if progress[1]:
      return
    name, completion, example = items[i]
    try:
      results[i] = float(fns[name](task, completion, example))
    except Exception as e:  # pylint: disable=broad-except
      errors[i] = _describe(e)
    progress[0] = (i + 1, time.monotonic())


class ContainedScorer:
  """Scores completions with registered rewards under a per-call time limit.

  Args:
    task: passed to every reward function.
    timeout: seconds one call may take (> 0).
    isolation: 'thread', 'process' or 'inline' (see the module docstring).
    max_logged: how many error / timeout messages are logged in all (later ones are counted only).
  """

  def __init__(self, task: Any, *, timeout: float, isolation: str = "thread",
               max_logged: int = 5):
    if isolation not in ISOLATIONS:
      raise ValueError(f"reward isolation must be one of {list(ISOLATIONS)}, got {isolation!r}")
    if not timeout > 0:
      raise ValueError(f"reward timeout must be > 0 seconds, got {timeout!r}")
    self.task = task
    self.timeout = float(timeout)
    self.isolation = isolation
    self.max_logged = max_logged
    self.logged = 0
    self.totals = ScoreStats()
    self._proc = None
    self._conn = None
    self._concurrent = False  # 'thread': after a first timeout, calls run concurrently.

  # -- public -------------------------------------------------------------------------------

  def score_components(self, completions: Sequence[str], examples: Sequence[Any],
                       rewards: Sequence[str]) -> tuple[np.ndarray, ScoreStats]:
    """Reward matrix `[R, K]` (float32; column k from rewards[k]) and this call's counts.

    Like `verifiers.score_components`, but a call that raises or runs past the limit scores 0.
    """
    if not rewards:
      raise ValueError("rewards is empty; expected at least one reward name")
    if len(completions) != len(examples):
      raise ValueError(f"completions has {len(completions)} items but examples has "
                       f"{len(examples)}; expected one example per completion")
    fns = {name: verifiers.REWARDS.get(name) for name in rewards}
    items = [(name, c, e) for name in rewards for c, e in zip(completions, examples)]
    run = {"thread": self._run_threads, "process": self._run_process,
           "inline": self._run_inline}[self.isolation]
    values, errors, timeouts = run(fns, items)
    stats = ScoreStats(errors=sum(e is not None for e in errors), timeouts=len(timeouts),
                       calls=len(items))
    for i, message in enumerate(errors):
      if message is not None:
        self._log(f"reward {items[i][0]!r} raised on completion {items[i][1]!r}: {message}")
    for i in timeouts:
      self._log(f"reward {items[i][0]!r} ran past its {self.timeout:g} s limit on completion "
                f"{items[i][1]!r}; scored 0")
    self.totals.errors += stats.errors
    self.totals.timeouts += stats.timeouts
    self.totals.calls += stats.calls
    out = np.asarray(values, np.float32).reshape(len(rewards), len(completions)).T
    return np.ascontiguousarray(out), stats

  def close(self) -> None:
    """Stops the child process of 'process' isolation (no-op otherwise)."""
    if self._proc is not None:
      try:
        self._conn.send(None)
      except (OSError, ValueError):
        pass
      self._proc.join(timeout=1.0)
      if self._proc.is_alive():
        self._proc.kill()
        self._proc.join()
      self._proc = self._conn = None

  # -- internals ----------------------------------------------------------------------------

  def _log(self, message: str) -> None:
    if self.logged < self.max_logged:
      self.logged += 1
      more = " (later reward errors are counted, not logged)" if self.logged == self.max_logged \
          else ""
      _log.warning("%s%s", message, more)

  def _run_inline(self, fns, items):
    results, errors = [0.0] * len(items), [None] * len(items)
    _call_all(fns, self.task, items, 0, results, errors, [(0, 0.0), False])
    return results, errors, []

  def _run_threads(self, fns, items):
    n = len(items)
    results, errors, timeouts = [0.0] * n, [None] * n, []
    start = 0
    if not self._concurrent:
      results, errors, start = self._run_sequential(fns, items, results, errors, timeouts)
    if start < n:  # A call timed out (now or in an earlier batch): the rest run concurrently.
      self._concurrent = True
      self._run_concurrent(fns, items, range(start, n), results, errors, timeouts)
    return results, errors, timeouts

  def _run_sequential(self, fns, items, results, errors, timeouts):
    """All calls in order on one worker; returns (results, errors, n) or, at the first call past
    its limit, (results, errors, the index after it) with that call counted in `timeouts`."""
    n = len(items)
    progress = [(0, time.monotonic()), False]  # See _call_all.
    worker = threading.Thread(target=_call_all, daemon=True, name="reward-worker",
                              args=(fns, self.task, items, 0, results, errors, progress))
    worker.start()
    while True:
      done, since = progress[0]
      worker.join(max(0.0, since + self.timeout - time.monotonic()))
      if not worker.is_alive():
        return results, errors, n
      if progress[0] == (done, since) and time.monotonic() - since >= self.timeout:
        # Call `done` is still running past its limit: abandon this worker. Its result slots
        # are not read again (a late write to results[done] is overwritten below).
        progress[1] = True  # Abandoned: if its call ever returns, it stops there.
        timeouts.append(done)
        results, errors = list(results), list(errors)  # The abandoned worker keeps the old.
        results[done], errors[done] = 0.0, None
        return results, errors, done + 1

  def _run_concurrent(self, fns, items, indices, results, errors, timeouts):
    """Each call of `indices` on its own daemon thread (at most MAX_CONCURRENT at once), all
    with one deadline: a batch with hanging calls costs about one time limit per wave."""
    indices = list(indices)
    for w in range(0, len(indices), MAX_CONCURRENT):
      wave = indices[w:w + MAX_CONCURRENT]
      outs = [[] for _ in wave]
      threads = [threading.Thread(target=_call_one, daemon=True, name="reward-call",
                                  args=(fns[items[i][0]], self.task, items[i], out))
                 for i, out in zip(wave, outs)]
      for t in threads:
        t.start()
      deadline = time.monotonic() + self.timeout
      for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
      for i, out in zip(wave, outs):
        if out:  # Finished in time (a late finisher appends to a list no one reads again).
          results[i], errors[i] = out[0]
        else:
          timeouts.append(i)

  def _start_process(self):
    ctx = multiprocessing.get_context("spawn")
    self._conn, child = ctx.Pipe()
    self._proc = ctx.Process(target=_reward_worker.serve, args=(child, self.task), daemon=True,
                             name="reward-worker")
    self._proc.start()
    child.close()
    # Start-up (spawn + imports) is not a reward call: wait for it with its own, generous limit.
    if not self._conn.poll(_STARTUP_SECONDS) or self._conn.recv() != "ready":
      self._kill_process()
      raise RuntimeError(f"the reward worker process did not start in {_STARTUP_SECONDS:g} s")

  def _kill_process(self):
    self._proc.kill()
    self._proc.join()
    self._conn.close()
    self._proc = self._conn = None

  def _run_process(self, fns, items):
    n = len(items)
    results, errors, timeouts = [0.0] * n, [None] * n, []
    start = 0
    while start < n:
      if self._proc is None:
        self._start_process()
      self._conn.send((fns, list(enumerate(items))[start:]))
      if not self._conn.poll(_STARTUP_SECONDS) or self._conn.recv() != "got":
        self._kill_process()
        raise RuntimeError(f"the reward worker process did not take a batch in "
                           f"{_STARTUP_SECONDS:g} s")
      deadline = None
      while start < n:
        if deadline is None:
          deadline = time.monotonic() + self.timeout
        if not self._conn.poll(max(0.0, deadline - time.monotonic())):
          timeouts.append(start)
          self._kill_process()
          start += 1
          break
        try:
          i, value, error = self._conn.recv()
        except EOFError:  # The child died (e.g. a reward called os._exit): that call errs.
          errors[start] = "the reward process exited"
          self._kill_process()
          start += 1
          break
        results[i], errors[i] = value, error
        start, deadline = i + 1, None
    return results, errors, timeouts


def scorer_from_config(task: Any, config) -> ContainedScorer:
  """The `ContainedScorer` of `config.rl` (`reward_timeout`, `reward_isolation`,
  `reward_max_logged`)."""
  rl = config.rl
  return ContainedScorer(task, timeout=rl.reward_timeout, isolation=rl.reward_isolation,
                         max_logged=rl.reward_max_logged)

