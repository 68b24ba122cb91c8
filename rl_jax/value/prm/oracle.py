"""The oracle process reward (`config.rl.process_reward='oracle'`): PAV with a perfect prover.

In: the RL batch's completions and a task with a step checker (`task.check_steps`, the ladder);
the row's problem is found by its prompt tokens (`Examples`), as the batch carries prompts, not
problem ids. Out: per-step progress, -1 on the first wrong item's step (a missing step or answer
is wrong; past the last step it goes on the last step) and 0 on every other step, with steps the
newline segments of `segments.segment`. docs/algorithms.md §5.1 gives the rule.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

NO_ERROR = np.iinfo(np.int32).max


class Examples:
  """The train problem of each batch row, found by the row's prompt tokens.

  Args:
    task: the run's task (`task.train[i]` is prompt row i).
    prompts, prompt_mask: [N, P] the encoded train prompts (`Experiment.train_prompts`).
  """

  def __init__(self, task, prompts: np.ndarray, prompt_mask: np.ndarray):
    self.task = task
    self.index = {_key(p, m): i for i, (p, m) in enumerate(zip(prompts, prompt_mask))}

  def __call__(self, prompts: np.ndarray, prompt_mask: np.ndarray) -> list:
    """The train examples of rows `prompts` [R, P] (ValueError for a prompt not in train)."""
    out = []
    for p, m in zip(np.asarray(prompts), np.asarray(prompt_mask)):
      i = self.index.get(_key(p, m))
      if i is None:
        raise ValueError("process_reward='oracle': a batch row's prompt is not a train prompt "
                         "of the task; the oracle grades train problems only")
      out.append(self.task.train[i])
    return out


def _key(tokens: np.ndarray, mask: np.ndarray) -> bytes:
  return np.asarray(tokens, np.int64)[np.asarray(mask, bool)].tobytes()


def first_wrong_item(check) -> int:
  """The index of the first wrong item of a `StepCheck` (steps, then the answer at index
  `num_steps`), or `NO_ERROR` when every step and the answer are right."""
  if check.first_error < check.num_steps:
    return check.first_error
  return check.num_steps if check.reward < 1.0 else NO_ERROR


def progress(checks: Sequence[Any], num_steps: np.ndarray, max_steps: int) -> np.ndarray:
  """[R, H] progress (H = `max_steps`): −1 on row r's step min(first wrong item,
  num_steps[r] − 1, H − 1), 0 elsewhere (see the module docstring); rows without a wrong item
  or without steps are all 0."""
  num_steps = np.asarray(num_steps, np.int64)
  out = np.zeros((len(checks), max_steps), np.float32)
  for r, check in enumerate(checks):
    e = first_wrong_item(check)
    if e != NO_ERROR and num_steps[r] > 0:
      out[r, min(e, num_steps[r] - 1, max_steps - 1)] = -1.0
  return out
