"""pass@k and maj@k: worked numbers, brute force over subsets, tie-breaking, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rl_jax.evals import metrics


def test_pass_at_k_worked_numbers():
  # 1 - C(3, 2) / C(5, 2) = 1 - 3/10 (a worked example by hand).
  assert metrics.pass_at_k(5, 2, 2) == pytest.approx(0.7, abs=1e-12)
  assert metrics.pass_at_k(5, 0, 3) == 0.0
  assert metrics.pass_at_k(5, 4, 2) == 1.0  # n - c < k: every 2-subset holds a correct one
  assert metrics.pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


@pytest.mark.parametrize("n", [1, 4, 7])
def test_pass_at_k_is_the_subset_probability(n):
  for c in range(n + 1):
    graded = [1] * c + [0] * (n - c)
    for k in range(1, n + 1):
      subsets = list(itertools.combinations(graded, k))
      want = np.mean([any(s) for s in subsets])
      assert metrics.pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12), (n, c, k)


def test_pass_at_k_large_n_does_not_overflow():
  assert 0.0 < metrics.pass_at_k(2000, 3, 100) < 1.0


@pytest.mark.parametrize("n, c, k", [(4, 1, 0), (4, 1, 5), (4, 5, 2), (4, -1, 2)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
  with pytest.raises(ValueError, match="expected"):
    metrics.pass_at_k(n, c, k)


def test_majority_and_ties():
  # 'a' twice beats 'b' once wherever it sits.
  assert metrics.majority(["b", "a", "a"], [1, 0, 0]) == 0.0
  assert metrics.majority(["b", "a", "a"], [0, 1, 1]) == 1.0
  # A 2-2 tie goes to the answer seen first: 'b' here.
  assert metrics.majority(["b", "a", "a", "b"], [1, 0, 0, 1]) == 1.0
  assert metrics.majority(["a", "b", "b", "a"], [1, 0, 0, 1]) == 1.0
  assert metrics.majority(["a", "b", "b", "a"], [0, 1, 1, 0]) == 0.0
  # Samples without an answer do not vote; no answer at all scores 0.
  assert metrics.majority(["", "", "c"], [0, 0, 1]) == 1.0
  assert metrics.majority(["", ""], [0, 0]) == 0.0


def test_maj_at_k_blocks():
  keys = ["a", "a", "b", "b", "b", "c", "x", "y"]
  correct = [1, 1, 0, 0, 0, 1, 0, 1]
  # (a,a) ok, (b,b) wrong, (b,c) tie -> b wrong, (x,y) tie -> x wrong
  assert metrics.maj_at_k(keys, correct, 2) == pytest.approx(1 / 4)
  assert metrics.maj_at_k(keys, correct, 4) == pytest.approx((1 + 0) / 2)  # 2-2 tie: 'a' first
  assert metrics.maj_at_k(keys, correct, 3) == pytest.approx((1 + 0) / 2)  # 2 blocks, 2 left over
  assert metrics.maj_at_k(keys, correct, 1) == pytest.approx(np.mean(correct))
  with pytest.raises(ValueError, match="one answer key per graded sample"):
    metrics.maj_at_k(keys, correct[:3], 2)


def test_summarize():
  correct = np.array([[1, 0, 0, 1, 0], [0, 0, 0, 0, 0]])
  keys = [["3", "4", "4", "3", "5"], ["", "", "1", "1", "2"]]
  out = metrics.summarize(correct, keys, (1, 2))
  assert out["pass@1"] == pytest.approx(0.2)
  assert out["pass@2"] == pytest.approx(0.35)  # (0.7 + 0) / 2
  assert out["maj@1"] == pytest.approx((0.4 + 0.0) / 2)  # maj@1 is the first n//1 samples' mean
  assert out["maj@2"] == pytest.approx((0.5 + 0) / 2)  # blocks (3,4)->3 ok, (4,3)->4 wrong
  with pytest.raises(ValueError, match="expected"):
    metrics.summarize(correct, keys[:1], (1,))
