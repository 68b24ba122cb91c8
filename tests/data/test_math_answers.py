"""math-verify answer checking: equivalences, non-equivalences, answer keys, the time bound."""

from __future__ import annotations

import pytest

from rl_jax.data import math_answers

EQUIVALENT = [
    ("The answer is \\boxed{1/2}.", "0.5"),
    ("So we get $\\frac{3}{4}$.", "3/4"),
    ("\\boxed{\\{1, 2, 3\\}}", "$\\{3, 2, 1\\}$"),  # sets, any order
    ("\\boxed{x + 1}", "$1 + x$"),  # symbolic
    ("\\boxed{2\\sqrt{2}}", "$\\sqrt{8}$"),
    ("She makes $18 a day, so \\boxed{18}.", "18"),  # a GSM8K gold number
]
DIFFERENT = [
    ("\\boxed{1/3}", "0.5"),
    ("\\boxed{\\{1, 2\\}}", "$\\{1, 2, 3\\}$"),
    ("\\boxed{x - 1}", "$x + 1$"),
    ("no answer here", "7"),
    ("", "7"),
]


@pytest.mark.parametrize("completion, gold", EQUIVALENT)
def test_equivalent_answers(completion, gold):
  ok, key = math_answers.check(completion, gold)
  assert ok and key


@pytest.mark.parametrize("completion, gold", DIFFERENT)
def test_different_answers(completion, gold):
  assert not math_answers.check(completion, gold)[0]


def test_answer_keys_group_equal_answers():
  assert math_answers.check("\\boxed{x+1}", "0")[1] == math_answers.check("$1+x$", "0")[1]
  assert math_answers.check("\\boxed{3}", "0")[1] != math_answers.check("\\boxed{4}", "0")[1]
  assert math_answers.check("nothing", "0")[1] == ""


def test_child_processes_match_in_process_and_time_out():
  pairs = [EQUIVALENT[0], DIFFERENT[0], EQUIVALENT[2]]
  want = [math_answers.check(c, g) for c, g in pairs]
  checker = math_answers.Checker(workers=2, timeout_s=30.0)
  assert checker(pairs) == want and checker.timeouts == 0
  # A limit no check can meet: each pair is graded wrong, counted, and its child replaced.
  strict = math_answers.Checker(workers=1, timeout_s=1e-6)
  assert strict(pairs[:2]) == [(False, ""), (False, "")] and strict.timeouts == 2


@pytest.mark.parametrize("kwargs, match", [(dict(workers=-1), "workers"),
                                           (dict(timeout_s=0), "timeout_s")])
def test_checker_rejects_bad_settings(kwargs, match):
  with pytest.raises(ValueError, match=match):
    math_answers.Checker(**kwargs)
