"""PRM kind 'truth' (`value.prm.data.truth_labels`): the step checker's prefix labels, on the
hand-worked scratchpads of 17 + 8 - 5 (tokens are characters; '\n' ends a step)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from rl_jax.data import ladder
from rl_jax.data.tasks import TaskExample
from rl_jax.value.prm import data as prm_data
from rl_jax.value.prm import segments as steps_lib

EX = TaskExample(prompt="17+8-5 =", answer="20",
                 meta={"entry": {"metadata": {"expression": "17 + 8 - 5"}}})
# text -> the label after each line (1 while every item so far is right)
WORKED = {
    "17+8=25\n25-5=20\n20": [1, 1, 1],
    "17+8=35\n35-5=30\n30": [0, 0, 0],
    "17+8=25\n25-5=30\n30": [1, 0, 0],
    "17+8=25\n25-5=20\n21": [1, 1, 0],
    "17+8=35\n35-5=20\n20": [0, 0, 0],  # right answer through a wrong step
    "17+8=25\n20": [1, 0],  # step skipped
    "17+8=25\n25-5=20": [1, 0],  # stopped before the answer: the last prefix ended wrong
}
EOS = 1


def _comps(texts):
  t = max(len(x) for x in texts) + 1
  tokens = np.zeros((len(texts), t), np.int32)
  mask = np.zeros((len(texts), t), bool)
  for i, x in enumerate(texts):
    tokens[i, :len(x) + 1] = [ord(c) for c in x] + [EOS]
    mask[i, :len(x) + 1] = True
  rewards = np.array([ladder.check_steps(x, EX).reward for x in texts], np.float32)
  return prm_data.Completions(split="train", ids=np.zeros(len(texts), np.int64), group=1,
                              prompt=np.zeros((len(texts), 1), np.int32),
                              prompt_mask=np.ones((len(texts), 1), bool), tokens=tokens,
                              mask=mask, texts=list(texts), rewards=rewards)


def _exp(task):
  return types.SimpleNamespace(task=task, config=types.SimpleNamespace(
      task=types.SimpleNamespace(name="fake")))


def test_truth_labels_of_hand_worked_scratchpads():
  texts = list(WORKED)
  comps = _comps(texts)
  steps = steps_lib.segment(comps.tokens, comps.mask, (ord("\n"),), max_steps=4,
                            ignore_ids=(EOS,), eos_id=EOS)
  task = types.SimpleNamespace(train=[EX], check_steps=ladder.check_steps)
  labels, weights = prm_data.truth_labels(_exp(task), comps, steps)
  assert labels.shape == (len(texts), comps.tokens.shape[1] + 1)
  assert (labels[:, 0] == 1).all() and (weights[:, 0] == 1).all()  # the perfect prover's V
  v0, q = steps_lib.gather_steps(labels, steps)
  for i, want in enumerate(WORKED.values()):
    assert np.asarray(q)[i, :len(want)].tolist() == want, texts[i]
    assert weights[i].sum() == len(want) + 1  # the prompt and every step end, nothing else
    ends = np.asarray(steps.end_pos)[i, :len(want)] + 1
    assert (weights[i, ends] == 1).all()


def test_rows_whose_lines_do_not_match_their_segments_get_no_weight():
  comps = _comps(["17+8=25\n25-5=20\n20"])
  steps = steps_lib.segment(comps.tokens, comps.mask, (ord("\n"),), max_steps=2,
                            ignore_ids=(EOS,), eos_id=EOS)  # 3 lines, 2 slots: left out
  task = types.SimpleNamespace(train=[EX], check_steps=ladder.check_steps)
  _, weights = prm_data.truth_labels(_exp(task), comps, steps)
  assert not weights.any()


def test_a_task_without_a_step_checker_is_refused():
  comps = _comps(["20"])
  steps = steps_lib.segment(comps.tokens, comps.mask, (ord("\n"),), max_steps=2)
  with pytest.raises(ValueError, match="PRM kind 'truth' needs a task with a step checker"):
    prm_data.truth_labels(_exp(types.SimpleNamespace(train=[EX])), comps, steps)
