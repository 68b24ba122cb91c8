"""`task.answer_extraction`: the last number of a chain-of-thought completion, on gsm_symbolic."""

from __future__ import annotations

import json

import pytest

from rl_jax import data  # Registers the 'jsonl' task.
from rl_jax.data import tasks


@pytest.mark.parametrize("completion, want", [
    ("John has 35 + 93 = 128 apples, so the total is 288.", "288"),
    ("The answer is 1,234 coins", "1234"),
    ("It drops by -5, then 2.5 remain", "2.5"),
    ("5, 6, and 7,", "7"),
    ("no digits here", ""),
    (None, ""),
])
def test_last_number(completion, want):
  assert tasks.last_number(completion) == want


@pytest.fixture(scope="module")
def gsm():
  return tasks.make_task("gsm_symbolic", {}, seed=0, train_size=4, eval_size=4,
                         answer_extraction="last_number")


def test_gsm_symbolic_scores_the_last_number(gsm):
  ex = gsm.heldout[0]
  reasoning = f"First, 3 times 35 is 105. Then we add {int(ex.answer) + 1} - 1.\nSo {ex.answer}."
  assert gsm.score(reasoning, ex) == 1.0
  assert gsm.score(f"{ex.answer} at first, then 7", ex) == 0.0
  first_line = tasks.make_task("gsm_symbolic", {}, seed=0, train_size=4, eval_size=4)
  assert first_line.heldout[0].prompt == ex.prompt  # Same data; only the extraction differs.
  assert first_line.score(reasoning, ex) == 0.0  # '3' on the first line is wrong.
  assert first_line.score(f"{ex.answer}\nbecause ...", ex) == 1.0


def test_bad_answer_extraction_names_the_field(tmp_path):
  with pytest.raises(ValueError, match=r"config.task.answer_extraction\) must be one of"):
    tasks.make_task("gsm_symbolic", {}, seed=0, train_size=4, eval_size=4,
                    answer_extraction="last_line")
  path = tmp_path / "qa.jsonl"
  path.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n"
                          for i in range(5)))
  assert "jsonl" in data.TASKS
  with pytest.raises(ValueError, match="applies to reasoning-gym tasks only"):
    tasks.make_task("jsonl", {"path": str(path)}, seed=0, train_size=2, eval_size=2,
                    answer_extraction="last_number")
