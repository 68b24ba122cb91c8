"""The eval driver's pieces that need no model: prompt truncation, per-stratum tables, output."""

from __future__ import annotations

import numpy as np
import pytest

from rl_jax.data.tasks import TaskExample
from rl_jax.evals import datasets, runner


class CharTokenizer:
  """One id per character (a=1, b=2, ...); pad 0, no BOS."""

  pad_id, bos_id, eos_id, add_bos = 0, -1, 27, False

  def encode(self, text):
    return [ord(c) - 96 for c in text]


def test_prompts_keep_their_last_tokens():
  tokens, mask, cut = runner.encode_left_truncated(CharTokenizer(), ["abcdef", "ab"], 4)
  assert cut == 1
  np.testing.assert_array_equal(tokens, [[3, 4, 5, 6], [0, 0, 1, 2]])
  np.testing.assert_array_equal(mask, [[1, 1, 1, 1], [0, 0, 1, 1]])
  with pytest.raises(ValueError, match="empty"):
    runner.encode_left_truncated(CharTokenizer(), [], 4)


def _result():
  examples = [TaskExample(prompt=f"q{i}", answer="1") for i in range(4)]
  s = datasets.EvalSet(name="toy", examples=examples, grader="math",
                       strata={"level": ["2", "10", "2", "10"]})
  greedy = np.array([1.0, 0.0, 0.0, 0.0])
  correct = np.array([[1, 1], [0, 0], [0, 1], [0, 0]], np.float32)
  keys = [["1", "1"], ["2", "3"], ["4", "1"], ["", ""]]
  overall = runner.scores(greedy, correct, keys, (1, 2))
  strata = runner.stratum_tables(s, greedy, correct, keys, (1, 2))
  return dict(dataset="toy", phase="rl", grader="math", workdir_name="w", ks=[1, 2],
              num_samples=2, temperature=1.0, max_new_tokens=8, truncated_prompts=0,
              seconds=1.0, overall=overall, strata=strata)


def test_stratum_tables_and_overall():
  r = _result()
  assert r["overall"] == pytest.approx(dict(n=4, greedy=0.25, sampled=0.375, **{
      "pass@1": 0.375, "maj@1": 0.375, "pass@2": 0.5, "maj@2": 0.25}))
  assert list(r["strata"]["level"]) == ["2", "10"]  # numeric-looking labels in numeric order
  assert r["strata"]["level"]["2"]["pass@2"] == 1.0 and r["strata"]["level"]["10"]["n"] == 2


def test_markdown_and_stdout_line():
  r = _result()
  text = runner.markdown(r)
  assert "| all | 4 | 0.250 | 0.375 | 0.375 | 0.500 | 0.375 | 0.250 |" in text
  assert "By level:" in text and "| 10 | 2 |" in text
  line = runner.stdout_line(r)
  assert list(line) == ["dataset", "phase", "step", "n", "greedy", "sampled", "pass@1", "maj@1",
                        "pass@2", "maj@2", "seconds"]


def test_grader_and_sample_count_errors():
  s = datasets.EvalSet(name="toy", examples=[TaskExample("q", "1")], grader="regex")
  with pytest.raises(ValueError, match="1 problems x 2"):
    runner.grade(s, ["a"], 2)
  with pytest.raises(ValueError, match="unknown grader 'regex'"):
    runner.grade(s, ["a"], 1)
