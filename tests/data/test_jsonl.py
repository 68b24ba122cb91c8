"""The JSONL task: split, scoring, and clear errors for a missing or malformed file."""

import json

import pytest

from rl_jax import data


def _write(path, rows):
  path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
  return str(path)


def test_split_and_score(tmp_path):
  rows = [{"question": f"{i} + 1 =", "answer": str(i + 1)} for i in range(30)]
  rows.append(rows[0])  # A duplicate question is kept once.
  path = _write(tmp_path / "d.jsonl", rows)
  task = data.make_task("jsonl", {"path": path}, 0, 100, 10)
  assert len(task.heldout) == 10 and len(task.train) == 20
  assert not {e.prompt for e in task.heldout} & {e.prompt for e in task.train}
  ex = task.heldout[0]
  assert task.score(ex.answer, ex) == 1.0
  assert task.score(ex.answer + ".0\nmore text", ex) == 1.0
  assert task.score("nonsense", ex) == 0.0 and task.score("", ex) == 0.0
  assert data.make_task("jsonl", {"path": path}, 0, 100, 10).heldout == task.heldout


def test_missing_path_names_it(tmp_path):
  missing = str(tmp_path / "nope.jsonl")
  with pytest.raises(FileNotFoundError, match="nope.jsonl"):
    data.make_task("jsonl", {"path": missing}, 0, 10, 2)
  with pytest.raises(ValueError, match="task.options.path is required"):
    data.make_task("jsonl", {}, 0, 10, 2)


def test_malformed_line_and_too_small_file(tmp_path):
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"question": "1+1=", "answer": "2"}\n{"q": 1}\n')
  with pytest.raises(ValueError, match=r"bad.jsonl:2: expected a JSON object with keys 'question'"):
    data.make_task("jsonl", {"path": str(bad)}, 0, 10, 1)
  small = _write(tmp_path / "small.jsonl", [{"question": "a", "answer": "1"}])
  with pytest.raises(ValueError, match="eval_size=1"):
    data.make_task("jsonl", {"path": small}, 0, 10, 1)
