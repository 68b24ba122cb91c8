"""SIGTERM / SIGINT as a request to stop at the next step boundary with a checkpoint.

A preempted TPU VM gets SIGTERM shortly before it goes away; Ctrl-C sends SIGINT. Inside
`catch()` (which `loop.run` enters) either signal only records the request; the training loop
checks `requested()` after every step, force-saves a checkpoint of that step and raises
`Preempted`, and `loop.run` checks between phases and evaluations. Re-running the same command
resumes from that checkpoint and reproduces the uninterrupted run. A second signal while the
first is being honoured raises `KeyboardInterrupt` at once (the usual "press Ctrl-C twice").

`experiments/run.py` turns `Preempted` into a one-line message and exit status 128 + the signal
number (143 for SIGTERM, 130 for SIGINT), the shell's convention, so a wrapper can tell a stopped
run (re-run it) from a finished one (0).
"""

from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_requested: list[int] = []


class Preempted(Exception):
  """A SIGTERM or SIGINT stopped the run after a checkpoint was written (`signum` says which)."""

  def __init__(self, message: str, signum: int):
    super().__init__(message)
    self.signum = signum


def requested() -> int | None:
  """The number of the first signal received inside `catch()`, or None."""
  return _requested[0] if _requested else None


def check(where: str) -> None:
  """Raises `Preempted` if a signal was received (`where` says what had finished)."""
  signum = requested()
  if signum is not None:
    raise Preempted(f"{signal.Signals(signum).name} received; stopped after {where}. "
                    "Re-run the same command to resume.", signum)


def _handler(signum, frame):
  del frame
  if _requested:
    raise KeyboardInterrupt(f"second signal ({signal.Signals(signum).name}) while stopping")
  _requested.append(signum)


@contextlib.contextmanager
def catch():
  """Installs the handlers for the block (main thread only; elsewhere a no-op) and restores the
  previous ones after it; the request is cleared on entry and exit."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = {s: signal.getsignal(s) for s in SIGNALS}
  _requested.clear()
  try:
    for s in SIGNALS:
      signal.signal(s, _handler)
    yield
  finally:
    for s, h in previous.items():
      signal.signal(s, h)
    _requested.clear()
