"""The child process of `rl_jax.rewards.contained` ('process' isolation).

Kept apart from the rewards package, which imports the task libraries: the child imports only
this module, the modules defining the reward functions it is sent, and the task's (unpickling it).
"""

from __future__ import annotations


def describe(exc: BaseException) -> str:
  """'Type: message', at most 300 characters."""
  text = f"{type(exc).__name__}: {exc}"
  return text if len(text) <= 300 else text[:297] + "..."


def serve(conn, task):
  """Child process: receives ({name: fn}, [(i, item), ...]) batches, sends (i, value, error) per
  call. The functions are pickled by reference, so the child imports the modules defining them
  (and registering them). Sends "ready" once started and "got" once a batch is unpickled, so
neither is charged to a call's time limit."""
  conn.send("ready")
  while True:
    msg = conn.recv()
    if msg is None:
      return
    fns, calls = msg
    conn.send("got")  # Unpickling (which may import the task's modules) is not a call either.
    for i, (name, completion, example) in calls:
      try:
        conn.send((i, float(fns[name](task, completion, example)), None))
      except Exception as e:  # pylint: disable=broad-except
        conn.send((i, 0.0, describe(e)))
