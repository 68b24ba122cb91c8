"""Tests for rl_jax.data.ladder: the step checker on worked examples, flawed demonstrations and
the stratified split of the proving ground."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rl_jax.data import ladder, make_task, tasks

# 17 + 8 - 5 + 30: running totals 25, 20, 50.
TERMS = [17, 8, -5, 30]


def _example(expression: str) -> tasks.TaskExample:
  entry = {"question": f"{expression} =", "answer": "0",
           "metadata": {"expression": expression, "num_terms": len(expression.split()) // 2 + 1}}
  return tasks.TaskExample(prompt=entry["question"], answer="0", meta={"entry": entry})


def test_all_steps_right():
  check = ladder.check_scratchpad("17+8=25\n25-5=20\n20+30=50\n50", TERMS, 50)
  assert check.steps_correct == (True, True, True)
  assert check.first_error == 3 == check.num_steps
  assert check.reward == 1.0 and check.num_wrong == 0


def test_spaces_are_allowed():
  check = ladder.check_scratchpad(" 17 + 8 = 25\n25 - 5 = 20 \n20 + 30 = 50\n 50 ", TERMS, 50)
  assert check.steps_correct == (True, True, True) and check.reward == 1.0


def test_wrong_at_step_2_of_4():
  # 5 terms, 4 steps: 17 + 8 - 5 + 30 - 12; step index 1 (the second) drops the borrow.
  terms = TERMS + [-12]
  text = "17+8=25\n25-5=30\n30+30=60\n60-12=48\n48"
  check = ladder.check_scratchpad(text, terms, 38)
  assert check.steps_correct == (True, False, True, True)  # later steps are locally right
  assert check.first_error == 1
  assert check.reward == 0.0 and check.num_wrong == 1


def test_malformed_line_is_a_wrong_step():
  check = ladder.check_scratchpad("17+8=25\nfoo bar\n20+30=50\n50", TERMS, 50)
  assert check.steps_correct == (True, False, False)  # step 2 no longer follows a parsed result
  assert check.first_error == 1
  assert check.reward == 1.0  # the final answer is still right


def test_empty_and_non_string_completions():
  for completion in ("", "\n\n", None, 17, b"17+8=25"):
    check = ladder.check_scratchpad(completion, TERMS, 50)
    assert check.steps_correct == (False, False, False)
    assert check.first_error == 0 and check.reward == 0.0


def test_correct_answer_through_a_wrong_step():
  # Step 1 writes 25-5=21 (wrong); step 2 writes 21+30=50 (wrong: 51). Answer 50 is right.
  check = ladder.check_scratchpad("17+8=25\n25-5=21\n21+30=50\n50", TERMS, 50)
  assert check.steps_correct == (True, False, False)
  assert check.first_error == 1
  assert check.reward == 1.0


def test_wrong_operand_or_operation_is_wrong():
  assert ladder.check_scratchpad("17-8=9\n9-5=4\n4+30=34\n34", TERMS, 50).steps_correct == (
      False, True, True)
  assert ladder.check_scratchpad("17+9=26\n26-5=21\n21+30=51\n51", TERMS, 50).first_error == 0


def test_missing_steps_and_missing_answer():
  check = ladder.check_scratchpad("17+8=25\n50", TERMS, 50)  # skipped two steps
  assert check.steps_correct == (True, False, False) and check.reward == 1.0
  check = ladder.check_scratchpad("17+8=25\n25-5=20\n20+30=50", TERMS, 50)  # no answer line
  assert check.steps_correct == (True, True, True) and check.reward == 0.0


def test_check_steps_reads_the_example():
  ex = _example("17 + 8 - 5 + 30")
  assert ladder.check_steps("17+8=25\n25-5=20\n20+30=50\n50", ex).reward == 1.0
  assert ladder.LadderTask.stratum(ex) == 4


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789+-= \n-x", max_size=60))
def test_checker_never_raises(text):
  check = ladder.check_scratchpad(text, TERMS, 50)
  assert check.num_steps == 3 and 0 <= check.first_error <= 3
  assert check.reward in (0.0, 1.0)


@pytest.mark.parametrize("a, b, carries, dropped", [
    (17, 8, True, 15), (25, -5, False, 20), (20, 30, False, 50), (25, -7, True, 28),
    (0, -9, True, 1), (-18, 7, True, -1), (-3, 4, False, 1),
])
def test_carry_rule_per_step(a, b, carries, dropped):
  assert ladder.carries(a, b) is carries
  assert ladder.dropped_carry(a, b) == (dropped if carries else a + b)


def test_flawed_scratchpad_continues_from_the_wrong_total():
  text, flawed = ladder.flawed_scratchpad([17, 8, -5, 30], [0.0, 0.0, 0.0], noise=0.5)
  assert flawed == [0]  # only 17 + 8 carries
  assert text == "17+8=15\n15-5=10\n10+30=40\n40"
  check = ladder.check_scratchpad(text, [17, 8, -5, 30], 50)
  assert check.steps_correct == (False, True, True) and check.reward == 0.0
  clean, none = ladder.flawed_scratchpad([17, 8, -5, 30], [0.0] * 3, noise=0.0)
  assert none == [] and clean == "17+8=25\n25-5=20\n20+30=50\n50"


@pytest.fixture(scope="module")
def task():
  return make_task("ladder", {}, seed=0, train_size=3000, eval_size=600)


def test_split_is_stratified_and_disjoint(task):
  counts = collections.Counter(task.stratum(e) for e in task.heldout)
  assert counts == {k: 100 for k in range(2, 8)}
  train = collections.Counter(task.stratum(e) for e in task.train)
  assert train == {k: 500 for k in range(2, 8)}
  assert not {e.prompt for e in task.heldout} & {e.prompt for e in task.train}
  assert len({e.prompt for e in task.heldout}) == 600
  for e in task.heldout:
    terms = ladder.signed_terms(e)
    assert all(0 <= abs(t) <= 99 for t in terms)


def test_scorer_and_clean_scratchpads(task):
  for e in task.heldout[::7]:
    terms = ladder.signed_terms(e)
    text = ladder.scratchpad(terms, list(np.cumsum(terms)[1:]))
    assert task.score(text, e) == 1.0
    assert task.check_steps(text, e).first_error == len(terms) - 1
    assert task.score(text + "1", e) == 0.0


def test_demonstrations_flaw_a_share_of_carrying_steps(task):
  demos = task.demonstrations(noise=0.6, rng=np.random.default_rng(0))
  assert [d.prompt for d in demos] == [e.prompt for e in task.train]
  carrying = flawed = wrong_answers = flawed_demos = 0
  for d in demos:
    terms = ladder.signed_terms(d)
    check = ladder.check_steps(d.answer, d)
    assert check.num_wrong == len(d.meta["flawed_steps"])
    assert check.first_error == (d.meta["flawed_steps"] or [len(terms) - 1])[0]
    if not d.meta["flawed_steps"]:
      assert check.reward == 1.0
    else:  # A dropped carry and a later dropped borrow can cancel (-10 then +10).
      wrong_answers += check.reward == 0.0
      flawed_demos += 1
    total = terms[0]
    for b in terms[1:]:
      carrying += ladder.carries(total, b)
      total += b
    flawed += len(d.meta["flawed_steps"])
  # Steps after a flaw start from a wrong total, so count carrying steps on the demos' totals:
  # the flawed share of all steps is about 0.6 x (share of carrying steps ~ 0.45).
  assert wrong_answers > 0.8 * flawed_demos  # ~15% cancel out
  share = flawed / sum(len(ladder.signed_terms(d)) - 1 for d in demos)
  assert 0.2 < share < 0.35, share
  assert task.demonstrations(noise=0.6, rng=np.random.default_rng(0))[5].answer == demos[5].answer
  rates = collections.defaultdict(list)
  for d in demos:
    rates[task.stratum(d)].append(not d.meta["flawed_steps"])
  clean = [np.mean(rates[k]) for k in sorted(rates)]
  assert clean == sorted(clean, reverse=True)  # longer chains are flawed more often


def test_bad_options_and_noise():
  with pytest.raises(ValueError, match="does not take"):
    make_task("ladder", {"max_term": 5}, 0, 100, 60)
  with pytest.raises(ValueError, match="min_terms"):
    make_task("ladder", {"min_terms": 1}, 0, 100, 60)
  with pytest.raises(ValueError, match="number of strata"):
    make_task("ladder", {}, 0, 100, 3)
  task = make_task("ladder", {"min_terms": 2, "max_terms": 3}, 0, 100, 20)
  with pytest.raises(ValueError, match="demo_noise"):
    task.demonstrations(noise=1.5, rng=np.random.default_rng(0))


def test_grade(task):
  ex = task.heldout[:2]
  texts = []
  for e in ex:
    terms = ladder.signed_terms(e)
    texts.append(ladder.scratchpad(terms, list(np.cumsum(terms)[1:])))
  texts[1] = ""
  out = ladder.grade(task, texts, ex)
  assert out["accuracy"] == 0.5
  assert out["accuracy_by_stratum"] == {"2": 0.5}
  assert out["step_error_rate"] == 0.5  # one of the two steps is missing
  assert out["first_error_step_mean"] == 0.5


def test_test_set_is_stratified_disjoint_and_deterministic(task):
  """task.test_size: a stratified test set, disjoint from dev and train; turning it on leaves
  train and dev (held-out) as they were; the same arguments give the same problems."""
  with_test = make_task("ladder", {}, seed=0, train_size=3000, eval_size=600, test_size=300)
  assert task.test == []  # off by default
  assert [e.prompt for e in with_test.heldout] == [e.prompt for e in task.heldout]
  assert [e.prompt for e in with_test.train] == [e.prompt for e in task.train]
  test = [e.prompt for e in with_test.test]
  assert len(set(test)) == 300
  assert collections.Counter(task.stratum(e) for e in with_test.test) == {k: 50
                                                                         for k in range(2, 8)}
  assert not set(test) & {e.prompt for e in task.heldout}
  assert not set(test) & {e.prompt for e in task.train}
  again = make_task("ladder", {}, seed=0, train_size=3000, eval_size=600, test_size=300)
  assert [e.prompt for e in again.test] == test
  other = make_task("ladder", {}, seed=1, train_size=3000, eval_size=600, test_size=300)
  assert [e.prompt for e in other.test] != test
  for e in with_test.test[::11]:  # scored like any problem
    terms = ladder.signed_terms(e)
    assert with_test.score(ladder.scratchpad(terms, list(np.cumsum(terms)[1:])), e) == 1.0


def test_test_size_errors_name_the_field():
  with pytest.raises(ValueError, match="test_size must be an int >= 0"):
    make_task("ladder", {}, 0, 100, 60, test_size=-1)
  with pytest.raises(ValueError, match=r"config.task.test_size=5: task 'jsonl' has no test set"):
    make_task("jsonl", {"path": "x.jsonl"}, 0, 100, 60, test_size=5)
  with pytest.raises(ValueError, match=r"test_size=200 \(config.task.test_size\) is larger"):
    make_task("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
              0, 50, 20, test_size=200)
