"""TFDS builders: a task and JSONL files round-trip through array_record, with no TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rl_jax import data
from rl_jax.data import tfds_builders

_CHAIN = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2, allow_negation=False)


def _write(path, rows):
  path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
  return str(path)


@pytest.mark.parametrize("name,options", [("chain_sum", _CHAIN),
                                          ("ladder", dict(min_terms=2, max_terms=4))])
def test_task_round_trip(tmp_path, name, options):
  task = data.make_task(name, options, 3, 60, 12)
  spec = tfds_builders.task_spec(name, options, 3, 60, 12)
  sources = tfds_builders.prepare_task(spec, str(tmp_path))  # Built from the spec alone.
  assert sorted(sources) == ["heldout", "train"]
  for split, want in (("train", task.train), ("heldout", task.heldout)):
    got = tfds_builders.examples(sources[split])
    assert [(e.prompt, e.answer) for e in got] == [(e.prompt, e.answer) for e in want], split
    # meta goes through JSON (tuples come back as lists): equal as JSON, and the task scores
    # the stored examples as it scores its own.
    assert [e.meta for e in got] == [json.loads(json.dumps(e.meta)) for e in want]
    assert [task.score(w.answer, g) for g, w in zip(got[:5], want[:5])] == [1.0] * 5
    assert task.score("no answer", got[0]) == 0.0
  assert "tensorflow" not in sys.modules  # Written and read without TensorFlow.


def test_task_spec_names_the_content(tmp_path):
  a = tfds_builders.task_spec("chain_sum", _CHAIN, 0, 60, 12)
  assert a.name == tfds_builders.task_spec("chain_sum", dict(_CHAIN), 0, 60, 12).name
  assert a.name != tfds_builders.task_spec("chain_sum", _CHAIN, 1, 60, 12).name
  assert a.name != tfds_builders.task_spec("chain_sum", _CHAIN, 0, 61, 12).name
  task = data.make_task("chain_sum", _CHAIN, 0, 60, 12)
  first = tfds_builders.prepare_task(a, str(tmp_path), task=task)
  files = sorted(os.listdir(first["train"].dataset_info.data_dir))
  again = tfds_builders.prepare_task(a, str(tmp_path))  # Reused, not rebuilt.
  assert sorted(os.listdir(again["train"].dataset_info.data_dir)) == files
  assert len(again["train"]) == len(task.train) and len(again["heldout"]) == 12


def test_jsonl_round_trip_gsm8k_and_math_layouts(tmp_path):
  gsm = [{"question": "Tom has 3 apples and buys 4. How many?",
          "answer": "He has 3 + 4 = <<3+4=7>>7.\n#### 7"},
         {"question": "What is 1,000 + 234?", "answer": "#### 1,234"}]
  math_rows = [{"problem": "Compute $\\frac{1}{2}+\\frac{1}{4}$.",
                "solution": "We get $\\boxed{\\frac{3}{4}}$."},
               {"problem": "Solve $x+1=3$.", "solution": "x = 2", "level": "Level 1"}]
  files = {"train": _write(tmp_path / "gsm.jsonl", gsm[:1] + [""] + gsm[1:]),
           "test": _write(tmp_path / "math.jsonl", math_rows)}
  sources = tfds_builders.prepare_jsonl(files, str(tmp_path / "tfds"))
  got = {split: tfds_builders.problems(sources[split]) for split in ("train", "test")}
  assert [r["question"] for r in got["train"]] == [r["question"] for r in gsm]
  assert [r["answer"] for r in got["train"]] == [r["answer"] for r in gsm]
  assert [r["line"] for r in got["train"]] == [1, 3]  # The blank line 2 is skipped.
  assert [r["reference"] for r in got["train"]] == ["7", "1234"]
  assert [r["question"] for r in got["test"]] == [r["problem"] for r in math_rows]
  assert [r["reference"] for r in got["test"]] == ["\\frac{3}{4}", "x = 2"]
  # A changed file is a new dataset, not a stale read.
  _write(tmp_path / "math.jsonl", math_rows[:1])
  changed = tfds_builders.prepare_jsonl(files, str(tmp_path / "tfds"))
  assert len(changed["test"]) == 1


def test_reference_answer_balances_braces():
  assert tfds_builders.reference_answer("so $\\boxed{\\{1, 2\\}}$ and \\boxed{x^{2}}") == "x^{2}"
  assert tfds_builders.reference_answer(" 42 ") == "42"


def test_jsonl_errors_name_file_and_line(tmp_path):
  missing = str(tmp_path / "nope.jsonl")
  with pytest.raises(FileNotFoundError, match=r"split 'test'.*nope.jsonl"):
    tfds_builders.prepare_jsonl({"test": missing}, str(tmp_path / "tfds"))
  with pytest.raises(FileNotFoundError, match="nope.jsonl"):
    tfds_builders.read_problems(missing)
  cases = [('{"question": "q", "answer": "1"}\n{"question": "q2"\n', r"bad.jsonl:2: not valid JSON"),
           ('{"question": "q", "answer": "1"}\n\n{"q": "x", "a": "y"}\n',
            r"bad.jsonl:3: expected keys 'question' or 'problem' and 'answer' or 'solution'; "
            r"the row has \['a', 'q'\]"),
           ('[1, 2]\n', r"bad.jsonl:1: expected a JSON object, got list"),
           ('{"question": "q", "answer": null}\n', r"bad.jsonl:1: 'answer' must be a string"),
           ('\n\n', r"bad.jsonl' holds no rows")]
  for text, match in cases:
    (tmp_path / "bad.jsonl").write_text(text)
    with pytest.raises(ValueError, match=match):
      tfds_builders.prepare_jsonl({"train": str(tmp_path / "bad.jsonl")}, str(tmp_path / "t2"))
  assert not os.path.exists(tmp_path / "t2" / "rl_jax_jsonl")  # Nothing half-written is kept.
  with pytest.raises(ValueError, match="split name 'bad-name'"):
    tfds_builders.jsonl_spec({"bad-name": str(tmp_path / "bad.jsonl")})


def test_memory_path_imports_no_data_extra():
  """The default run path (data.source='memory') imports neither TFDS nor grain (the [data]
  extra), and nothing imports TensorFlow."""
  code = ("import sys; import rl_jax.train.loop, experiments.run; "
          "print(sorted(m for m in ('tensorflow', 'tensorflow_datasets', 'grain') "
          "if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
  assert out.stdout.strip().splitlines()[-1] == "[]"
