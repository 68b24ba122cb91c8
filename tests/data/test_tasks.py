"""Tests for rl_jax.data.tasks: splits, scorer robustness, the dropped-carry error."""

from __future__ import annotations

import numpy as np
import pytest

from rl_jax.data import tasks

CHAIN_SUM = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2)


@pytest.fixture(scope="module")
def task():
  return tasks.make_task("chain_sum", CHAIN_SUM, seed=0, train_size=2000, eval_size=600)


def _example(expression: str) -> tasks.TaskExample:
  terms = expression.split()
  value = int(terms[0])
  for op, t in zip(terms[1::2], terms[2::2]):
    value += int(t) if op == "+" else -int(t)
  entry = {"question": f"{expression} =", "answer": str(value),
           "metadata": {"expression": expression}}
  return tasks.TaskExample(prompt=entry["question"], answer=entry["answer"],
                           meta={"entry": entry})


def test_split_sizes_and_disjointness(task):
  assert len(task.train) == 2000
  assert len(task.heldout) == 600
  heldout = {ex.prompt for ex in task.heldout}
  assert len(heldout) == 600  # distinct
  assert not heldout & {ex.prompt for ex in task.train}
  assert all(ex.prompt.startswith("State the final answer") for ex in task.train[:5])


def test_split_is_deterministic_per_seed(task):
  again = tasks.make_task("chain_sum", CHAIN_SUM, seed=0, train_size=2000, eval_size=600)
  assert [e.prompt for e in again.heldout] == [e.prompt for e in task.heldout]
  assert [e.answer for e in again.train] == [e.answer for e in task.train]
  other = tasks.make_task("chain_sum", CHAIN_SUM, seed=1, train_size=2000, eval_size=600)
  assert [e.prompt for e in other.heldout] != [e.prompt for e in task.heldout]


@pytest.mark.parametrize("expression, is_carry, dropped", [
    ("27 + 15", True, "32"),
    ("23 - 60", False, "-37"),
    ("5 - 9", True, "6"),
    ("12 + 34", False, "46"),
    ("98 + 93", True, "181"),
    ("40 - 13", True, "37"),
    ("0 - 0", False, "0"),
    ("-23 + 5", False, "-18"),  # units -3 + 5 = 2
])
def test_carry_class_and_dropped_answer(expression, is_carry, dropped):
  ex = _example(expression)
  assert tasks.carry_class(ex) is is_carry
  assert tasks.dropped_carry_answer(ex) == dropped


def test_dropped_answer_keeps_units_digit(task):
  for ex in task.heldout:
    dropped, correct = int(tasks.dropped_carry_answer(ex)), int(ex.answer)
    assert (dropped != correct) == tasks.carry_class(ex)
    assert (dropped - correct) % 10 == 0


def test_carry_class_needs_an_expression():
  with pytest.raises(ValueError, match="expression"):
    tasks.carry_class(tasks.TaskExample("p", "1", {}))
  with pytest.raises(ValueError, match="expression"):
    tasks.carry_class(_example_raw("3 * 4"))


def _example_raw(expression):
  return tasks.TaskExample("p", "0", {"entry": {"metadata": {"expression": expression}}})


def test_demonstrations_noise_rate(task):
  demos = tasks.demonstrations(task.train, noise=0.3, rng=np.random.default_rng(0))
  carry = np.array([tasks.carry_class(ex) for ex in task.train])
  changed = np.array([d.answer != ex.answer for d, ex in zip(demos, task.train)])
  assert 0.3 < carry.mean() < 0.6
  assert not changed[~carry].any()
  assert abs(changed[carry].mean() - 0.3) < 0.06
  assert [d.meta["dropped_carry"] for d in demos] == changed.tolist()
  assert [d.prompt for d in demos] == [ex.prompt for ex in task.train]
  # The scorer still checks the true answer, not the demonstrated one.
  d = next(d for d in demos if d.meta["dropped_carry"])
  assert task.score(d.answer, d) == 0.0


def test_demonstrations_clean_full_and_deterministic(task):
  clean = tasks.demonstrations(task.train, noise=0.0, rng=np.random.default_rng(0))
  assert [d.answer for d in clean] == [ex.answer for ex in task.train]
  full = tasks.demonstrations(task.train, noise=1.0, rng=np.random.default_rng(0))
  assert all((d.answer != ex.answer) == tasks.carry_class(ex) for d, ex in zip(full, task.train))
  a = tasks.demonstrations(task.train, noise=0.5, rng=np.random.default_rng(7))
  b = tasks.demonstrations(task.train, noise=0.5, rng=np.random.default_rng(7))
  assert a == b


@pytest.mark.parametrize("noise", [-0.1, 1.5, float("nan"), "0.5"])
def test_demonstrations_rejects_bad_noise(task, noise):
  with pytest.raises(ValueError, match="noise"):
    tasks.demonstrations(task.train[:3], noise=noise, rng=np.random.default_rng(0))


def test_score_right_and_wrong(task):
  ex = next(e for e in task.heldout if int(e.answer) > 9)
  assert task.score(ex.answer, ex) == 1.0
  assert task.score(f"  {ex.answer}\nmore text", ex) == 1.0
  assert task.score("-" + ex.answer, ex) == 0.0  # partial credit 2/3 is binarized away
  assert task.score(ex.answer + "0", ex) == 0.0


def test_score_of_minus_12_for_12(task):
  entry = {"question": "q", "answer": "12", "metadata": {"expression": "5 + 7"}}
  ex = tasks.TaskExample("q", "12", {"entry": entry})
  assert task.score("12", ex) == 1.0
  assert task.score("-12", ex) == 0.0


@pytest.mark.parametrize("garbage", [
    "", " ", "\n12", None, 12, b"12", "\x00\x00", "\udcff\ud800", "١٢٣٤٥٦٧٨٩" * 50,
    "NaN", "sNaN", "inf", "1e999999999", "🤖" * 1000, "12" * 10000,
])
def test_score_never_raises(task, garbage):
  ex = task.heldout[0]
  assert task.score(garbage, ex) == 0.0


def test_score_survives_a_broken_example(task):
  assert task.score("12", tasks.TaskExample("q", "12", {})) == 0.0
  assert task.score("12", tasks.TaskExample("q", "12", {"entry": {"no_answer": 1}})) == 0.0


def test_error_unknown_name():
  with pytest.raises(ValueError, match=r"task name 'chain_summ'.*closest: \['chain_sum'"):
    tasks.make_task("chain_summ", {}, seed=0, train_size=10, eval_size=10)


@pytest.mark.parametrize("field", ["train_size", "eval_size"])
@pytest.mark.parametrize("value", [0, -3])
def test_error_nonpositive_sizes(field, value):
  sizes = dict(train_size=10, eval_size=10)
  sizes[field] = value
  with pytest.raises(ValueError, match=field):
    tasks.make_task("chain_sum", CHAIN_SUM, seed=0, **sizes)


def test_error_bad_seed_and_options():
  with pytest.raises(ValueError, match="seed"):
    tasks.make_task("chain_sum", CHAIN_SUM, seed=-1, train_size=10, eval_size=10)
  with pytest.raises(ValueError, match="options"):
    tasks.make_task("chain_sum", {"min_termz": 2}, seed=0, train_size=10, eval_size=10)


# One term of one digit: only ten distinct problems exist.
TINY = dict(min_terms=1, max_terms=1, min_digits=1, max_digits=1)


def test_error_eval_size_exceeds_distinct_problems():
  with pytest.raises(ValueError, match=r"eval_size=11 .*distinct.*found 10"):
    tasks.make_task("chain_sum", TINY, seed=0, train_size=10, eval_size=11)


def test_error_empty_train_after_dedup():
  with pytest.raises(ValueError, match="train set is empty after de-duplication"):
    tasks.make_task("chain_sum", TINY, seed=0, train_size=10, eval_size=10)


def test_other_reasoning_gym_tasks_build():
  task = tasks.make_task("basic_arithmetic", {}, seed=0, train_size=5, eval_size=5)
  ex = task.heldout[0]
  assert task.score(ex.answer, ex) == 1.0
