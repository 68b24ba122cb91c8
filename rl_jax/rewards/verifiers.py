"""Verifiers: completion text -> scalar reward, registered by name.

Every registered reward has the signature `fn(task, completion, example) -> float` and never
raises on malformed completions. `score_batch` applies one to a batch; `score_components`
stacks several into the `[R, K]` reward matrix the RL step consumes; the RL step logs each
component's batch mean on its own (`reward_<name>`, rl_jax/rollout/collect.py) and weighs them
by `config.rl.reward_weights`.

Math rewards: `math_verify` is correctness under `rl_jax.data.math_answers.check` (the checker of
`experiments.eval`; the `math` task's `task_score` is the same), and two format rewards combine
with it: `boxed` (the answer after the thinking block is boxed) and `think_closed` (a thinking
block is closed and an answer follows it).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from rl_jax.data import math_answers
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


def boxed(completion: Any) -> float:
  """1.0 iff the answer part (`math_answers.after_thinking`) holds a `\\boxed{...}` whose braces
  close, else 0.0."""
  text = math_answers.after_thinking(completion)
  start = text.rfind("\\boxed{")
  if start < 0:
    return 0.0
  depth = 0
  for ch in text[start + len("\\boxed"):]:
    depth += {"{": 1, "}": -1}.get(ch, 0)
    if depth == 0:
      return 1.0
  return 0.0


def think_closed(completion: Any) -> float:
  """1.0 iff the completion closes a thinking block (`</think>`, with any `<think>` before the
  last `</think>`) and non-blank text follows it, else 0.0. A template that opens the block in
  the prompt (Qwen3 with `enable_thinking`) leaves the completion without `<think>`."""
  if not isinstance(completion, str) or math_answers.THINK_CLOSE not in completion:
    return 0.0
  tail = completion.rsplit(math_answers.THINK_CLOSE, 1)[1]
  if math_answers.THINK_OPEN in tail or not tail.strip():
    return 0.0
  return 1.0


@REWARDS.register("math_verify")
def math_verify_reward(task, completion: str, example: TaskExample) -> float:
  """1.0 iff `math_answers.check(completion, example.answer)` holds; `task` is unused."""
  del task
  return 1.0 if math_answers.check(completion, example.answer)[0] else 0.0


@REWARDS.register("boxed")
def boxed_reward(task, completion: str, example: TaskExample) -> float:
  """`boxed(completion)`; `task` and `example` are unused."""
  del task, example
  return boxed(completion)


@REWARDS.register("think_closed")
def think_closed_reward(task, completion: str, example: TaskExample) -> float:
  """`think_closed(completion)`; `task` and `example` are unused."""
  del task, example
  return think_closed(completion)


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
