"""A task read from a local JSONL file: one {"question": ..., "answer": ...} object per line.

For GSM8K / MATH-style files exported to disk (no network at run time). The answer is checked by
exact match of the completion's first line after stripping (and, when both parse as numbers, by
numeric equality, so '42' matches '42.0').
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

from rl_jax.data.tasks import SplitTask, TaskExample, check_positive, extract_answer


def read_objects(path: str) -> list[tuple[int, dict]]:
  """(line number, object) of every non-blank line of a JSONL file, in order.

  The one JSONL reader of the package (the `jsonl` task, the TFDS JSONL builder, the evaluation
  sets).

  Raises:
    FileNotFoundError: `path` is not a file.
    ValueError: a line is not valid JSON or not a JSON object (the message names file and line),
      or the file holds no rows.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path!r} does not exist; expected a JSONL file (one JSON object a "
                            "line)")
  rows = []
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except ValueError as e:
        raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from None
      if not isinstance(row, dict):
        raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
      rows.append((lineno, row))
  if not rows:
    raise ValueError(f"{path!r} holds no rows")
  return rows


def _number(text: str):
  try:
    return float(text.replace(",", ""))
  except ValueError:
    return None


class JsonlTask(SplitTask):
  """Train / held-out split of a JSONL file, with an exact-match scorer.

  Args:
    name: 'jsonl' (kept for symmetry with other task builders).
    options: {'path': file, 'question_key': 'question', 'answer_key': 'answer'}.
    seed: shuffles the file's distinct questions before splitting.
    train_size: at most this many train examples (the rest of the file after held-out).
    eval_size: number of held-out examples.
  """

  def __init__(self, name: str, options: Mapping[str, Any] | None, seed: int, train_size: int,
               eval_size: int):
    options = dict(options or {})
    path = options.get("path")
    if not path:
      raise ValueError("task.options.path is required for the 'jsonl' task (a JSONL file with "
                       "one {\"question\": ..., \"answer\": ...} object per line)")
    if not os.path.isfile(path):
      raise FileNotFoundError(f"task.options.path {path!r} does not exist; expected a JSONL file")
    qk, ak = options.get("question_key", "question"), options.get("answer_key", "answer")
    train_size = check_positive("train_size", train_size)
    eval_size = check_positive("eval_size", eval_size)
    examples, seen = [], set()
    for lineno, row in read_objects(path):
      try:
        q, a = str(row[qk]), str(row[ak])
      except KeyError as e:
        raise ValueError(f"{path}:{lineno}: expected a JSON object with keys {qk!r} and {ak!r} "
                         f"({e!r})") from None
      if q not in seen:
        seen.add(q)
        examples.append(TaskExample(prompt=q, answer=a, meta={}))
    if len(examples) <= eval_size:
      raise ValueError(f"{path} holds {len(examples)} distinct questions; expected more than "
                       f"eval_size={eval_size} so that some are left to train on")
    order = np.random.default_rng(seed).permutation(len(examples))
    self.name = name
    self._heldout = [examples[i] for i in order[:eval_size]]
    self._train = [examples[i] for i in order[eval_size:eval_size + train_size]]

  def score(self, completion: str, example: TaskExample) -> float:
    """1.0 iff the extracted answer equals the reference (as text or as a number); never raises."""
    got, want = extract_answer(completion), example.answer.strip()
    if not got:
      return 0.0
    if got == want:
      return 1.0
    a, b = _number(got), _number(want)
    return float(a is not None and b is not None and a == b)
