"""Verifiers: completion text -> scalar reward, registered by name.

Every registered reward has the signature `fn(task, completion, example) -> float` and never
raises on malformed completions. `score_batch` applies one to a batch; `score_components`
stacks several into the `[R, K]` reward matrix the RL step consumes.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from rl_jax.data.tasks import TaskExample, extract_answer
from rl_jax.registry import Registry

REWARDS = Registry("reward")

_INTEGER = re.compile(r"[+-]?[0-9]+")


def exact_match(completion: Any, answer: str) -> float:
  """1.0 iff the extracted answer (stripped, first line) equals `answer.strip()`, else 0.0."""
  if not isinstance(answer, str):
    return 0.0
  return 1.0 if extract_answer(completion) == answer.strip() else 0.0


def is_integer(completion: Any) -> float:
  """1.0 iff the extracted answer is an ASCII integer literal (optional sign), else 0.0."""
  return 1.0 if _INTEGER.fullmatch(extract_answer(completion)) else 0.0


@REWARDS.register("task_score")
def task_score(task, completion: str, example: TaskExample) -> float:
  """The task's own binary scorer (`task.score`)."""
  return task.score(completion, example)


@REWARDS.register("exact_match")
def exact_match_reward(task, completion: str, example: TaskExample) -> float:
  """`exact_match` against `example.answer`; `task` is unused."""
  del task
  return exact_match(completion, example.answer)


@REWARDS.register("format")
def format_reward(task, completion: str, example: TaskExample) -> float:
  """1.0 iff the completion's answer parses as an integer; `task` and `example` are unused."""
  del task, example
  return is_integer(completion)


def score_batch(task, completions: Sequence[str], examples: Sequence[TaskExample],
                reward: str = "task_score") -> np.ndarray:
  """Rewards `[R]` (float32) of completions[i] against examples[i] under the named reward."""
  if len(completions) != len(examples):
    raise ValueError(f"completions has {len(completions)} items but examples has "
                     f"{len(examples)}; expected one example per completion")
  fn = REWARDS.get(reward)
  return np.asarray([fn(task, c, e) for c, e in zip(completions, examples)], np.float32)


def score_components(task, completions: Sequence[str], examples: Sequence[TaskExample],
                     rewards: Sequence[str]) -> np.ndarray:
  """Reward matrix `[R, K]` (float32), column k from the reward named rewards[k]."""
  if not rewards:
    raise ValueError("rewards is empty; expected at least one reward name")
  cols = [score_batch(task, completions, examples, name) for name in rewards]
  return np.stack(cols, axis=1)
