"""Reward functions that fail on purpose, in a module with no heavy imports (a 'process' isolation
worker imports it to unpickle them)."""

from __future__ import annotations

import time

SLEEP = 30.0  # Far past every limit in the tests: a call that really waited would fail the timing.


def boom(task, completion, example):
  """Raises on completions starting with 'boom'; 1.0 for '7', else 0.0."""
  del task, example
  if completion.startswith("boom"):
    raise ZeroDivisionError(f"bad completion {completion!r}")
  return 1.0 if completion == "7" else 0.0


def sleepy(task, completion, example):
  """Sleeps SLEEP seconds on 'hang'; 0.5 otherwise."""
  del task, example
  if completion == "hang":
    time.sleep(SLEEP)
  return 0.5


CALLS = []  # Completions `logged` was called on, in order.


def logged(task, completion, example):
  """Records each call; sleeps 0.5 s on 'slow'."""
  del task, example
  CALLS.append(completion)
  if completion == "slow":
    time.sleep(0.5)
  return 1.0


def always_raises(task, completion, example):
  """A broken reward: raises on every call."""
  del task, completion, example
  raise RuntimeError("this reward is broken")


def always_hangs(task, completion, example):
  """A hanging reward: sleeps SLEEP seconds on every call."""
  del task, completion, example
  time.sleep(SLEEP)
  return 0.0
