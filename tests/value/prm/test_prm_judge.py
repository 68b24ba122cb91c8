"""PRM judging metrics against true step labels (rl_jax/value/prm/judge.py)."""

import numpy as np
import pytest

from rl_jax.data import ladder
from rl_jax.data.tasks import TaskExample
from rl_jax.value.prm import judge as prm_eval


def test_auroc_hand_numbers():
  assert prm_eval.auroc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
  assert prm_eval.auroc([0.1, 0.9], [True, False]) == 0.0
  assert prm_eval.auroc([0.5, 0.5, 0.2, 0.7], [True, False, False, True]) == pytest.approx(
      (1 + 1 + 0.5 + 1) / 4)
  assert np.isnan(prm_eval.auroc([0.5], [True]))


def test_true_labels_from_the_step_checker():
  ex = TaskExample(prompt="17+8-5 =", answer="20",
                   meta={"entry": {"metadata": {"expression": "17 + 8 - 5"}}})
  assert ladder.signed_terms(ex) == [17, 8, -5]
  texts = ["17+8=25\n25-5=20\n20", "17+8=15\n15-5=10\n10", "17+8=25\n\n25-5=20\n21",
           "17+8=25"]
  checks = [ladder.check_steps(t, ex) for t in texts]
  labels, lmask, kept = prm_eval.true_labels(checks, texts, np.array([3, 3, 3, 2]), 4)
  assert kept.tolist() == [True, True, True, False]  # row 3: 1 line but 2 segments
  assert labels[:3].tolist() == [[True, True, True, False], [False, True, False, False],
                                 [True, True, False, False]]
  assert prm_eval.first_false(labels[:3], lmask[:3]).tolist() == [3, 0, 2]


def test_judge_perfect_and_inverted_prms():
  labels = np.array([[True, True, True], [True, False, False], [False, False, False],
                     [True, True, False]])
  lmask = np.ones_like(labels)
  problem = np.array([0, 0, 1, 1])
  good = np.where(np.cumprod(labels, axis=1) > 0, 0.9, 0.1)
  m = prm_eval.judge(good, np.full(4, 0.5), labels, lmask, problem)
  assert m["first_wrong_acc"] == 1.0 and m["first_wrong_acc_tau05"] == 1.0
  assert m["auroc"] == 1.0
  bad = prm_eval.judge(1 - good, np.full(4, 0.5), labels, lmask, problem)
  assert bad["auroc"] == 0.0 and bad["first_wrong_acc_tau05"] == 0.0


def test_best_of_n_and_majority():
  rewards = np.array([0, 1, 1, 0, 0, 0], float)
  answers = ["3", "4", "4", "7", "7", "8"]
  assert prm_eval.best_of_n(np.array([0.1, 0.9, 0.2, 0.5, 0.4, 0.3]), rewards, answers, 3) == 0.5
  assert prm_eval.majority(rewards, answers, 3) == 0.5
  assert prm_eval.final_answer("1+2=3\n3\n") == "3"


def test_progress_rule_finds_a_drop_that_an_absolute_threshold_misses():
  """A value model whose correct prefixes of a hard problem sit low (0.3) and of an easy one high
  (0.9): no tau on q finds both first wrong steps, the drop q_h − q_{h−1} does."""
  labels = np.array([[True, True, False], [True, False, False]] * 4)
  lmask = np.ones_like(labels)
  v0 = np.array([0.3, 0.9] * 4)
  q = np.array([[0.3, 0.3, 0.02], [0.9, 0.35, 0.3]] * 4)
  problem = np.repeat(np.arange(4), 2)
  assert prm_eval.predicted_first_progress(q, v0, lmask, 0.2).tolist() == [2, 1] * 4
  m = prm_eval.judge(q, v0, labels, lmask, problem)
  assert m["first_wrong_acc_progress"] == 1.0 and 0.05 <= m["delta"] <= 0.25
  assert m["first_wrong_acc"] < 1.0  # tau <= 0.3 misses row 1's drop, tau > 0.3 flags row 0


def test_judge_names_prms_by_directory_and_parent_when_base_names_repeat():
  from rl_jax.tools import judge_prm  # pylint: disable=import-outside-toplevel
  dirs = ["out/a/truth", "out/b/truth/", "out/a/pav"]
  assert [judge_prm._name(d, dirs) for d in dirs] == ["a/truth", "b/truth", "pav"]
