"""Tests for rl_jax.rewards.verifiers."""

from __future__ import annotations

import numpy as np
import pytest

from rl_jax.data import make_task
from rl_jax.rewards import REWARDS, exact_match, is_integer, score_batch, score_components

CHAIN_SUM = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2)


@pytest.fixture(scope="module")
def task():
  return make_task("chain_sum", CHAIN_SUM, seed=0, train_size=20, eval_size=20)


@pytest.mark.parametrize("completion, answer, expected", [
    ("12", "12", 1.0), (" 12 \n", "12", 1.0), ("12\n13", "12", 1.0), ("12", " 12 ", 1.0),
    ("-12", "12", 0.0), ("+12", "12", 0.0), ("012", "12", 0.0), ("", "12", 0.0),
    (None, "12", 0.0), ("12", None, 0.0), ("1 2", "12", 0.0),
])
def test_exact_match(completion, answer, expected):
  assert exact_match(completion, answer) == expected


@pytest.mark.parametrize("completion, expected", [
    ("12", 1.0), ("-7\n", 1.0), ("+3", 1.0), (" 0 ", 1.0), ("12\nfoo", 1.0),
    ("", 0.0), ("-", 0.0), ("1.5", 0.0), ("1_2", 0.0), ("١٢", 0.0), ("twelve", 0.0),
    ("1 2", 0.0), (None, 0.0),
])
def test_format(completion, expected):
  assert is_integer(completion) == expected


def test_registry_names():
  assert {"task_score", "exact_match", "format"} <= set(REWARDS.names())
  with pytest.raises(KeyError, match="reward"):
    REWARDS.get("nope")


def test_score_batch(task):
  examples = task.heldout[:4]
  completions = [examples[0].answer, "garbage", "-" + examples[2].answer + "1", None]
  r = score_batch(task, completions, examples)
  assert r.dtype == np.float32 and r.shape == (4,)
  np.testing.assert_array_equal(r, [1, 0, 0, 0])
  r = score_batch(task, [ex.answer for ex in examples], examples, reward="exact_match")
  np.testing.assert_array_equal(r, [1, 1, 1, 1])


def test_task_score_delegates_to_task(task):
  ex = task.heldout[0]
  assert REWARDS.get("task_score")(task, "+" + ex.answer, ex) == task.score("+" + ex.answer, ex)


def test_score_components(task):
  examples = task.heldout[:3]
  completions = [examples[0].answer, "7", "x"]
  r = score_components(task, completions, examples, ["task_score", "format"])
  assert r.dtype == np.float32 and r.shape == (3, 2)
  assert r[:, 1].tolist() == [1.0, 1.0, 0.0]
  assert r[0, 0] == 1.0 and r[2, 0] == 0.0


def test_errors(task):
  with pytest.raises(ValueError, match="completions"):
    score_batch(task, ["1"], task.heldout[:2])
  with pytest.raises(ValueError, match="rewards"):
    score_components(task, ["1"], task.heldout[:1], [])
