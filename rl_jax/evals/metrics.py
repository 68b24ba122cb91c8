"""pass@k (the unbiased estimator) and maj@k (majority vote) over per-sample grades.

pass@k of one problem with n samples of which c are correct is the probability that a random
subset of k of the n samples holds a correct one: 1 - C(n - c, k) / C(n, k) (Chen et al. 2021),
computed as a product so that large n does not overflow. n = 5, c = 2, k = 2 gives
1 - C(3, 2) / C(5, 2) = 1 - 3/10 = 0.7.

maj@k: the samples are cut into floor(n / k) consecutive blocks of k; in each block the answer
given most often wins, and the block scores the winner's correctness; maj@k of the problem is the
mean over its blocks. Samples with no answer (empty key) do not vote; a block without any answer
scores 0. Ties go to the tied answer that appears first in the block (sample order), so the
result is deterministic.
"""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np


def _check_k(k: int, n: int) -> int:
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
    raise ValueError(f"k={k!r}: expected an int in [1, n] where n={n} is the number of samples "
                     "per problem (raise --num_samples or lower --k)")
  return int(k)


def pass_at_k(n: int, c: int, k: int) -> float:
  """The unbiased pass@k of one problem: n samples, c of them correct.

  Raises:
    ValueError: k is not in [1, n] or c is not in [0, n].
  """
  k = _check_k(k, n)
  if not 0 <= c <= n:
    raise ValueError(f"c={c}: expected the number of correct samples in [0, n={n}]")
  if n - c < k:
    return 1.0
  # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
  return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def majority(keys: Sequence[str], correct: Sequence[float]) -> float:
  """Correctness (0/1) of the majority answer among `keys` (one block); ties: first seen wins."""
  counts: Dict[str, int] = {}
  first: Dict[str, int] = {}
  for i, key in enumerate(keys):
    if key:
      counts[key] = counts.get(key, 0) + 1
      first.setdefault(key, i)
  if not counts:
    return 0.0
  best = max(counts, key=lambda key: (counts[key], -first[key]))
  return float(correct[first[best]])


def maj_at_k(keys: Sequence[str], correct: Sequence[float], k: int) -> float:
  """maj@k of one problem from its n samples' answer keys and grades (module docstring)."""
  if len(keys) != len(correct):
    raise ValueError(f"keys has {len(keys)} items but correct has {len(correct)}; expected one "
                     "answer key per graded sample")
  k = _check_k(k, len(keys))
  blocks = len(keys) // k
  return float(np.mean([majority(keys[b * k:(b + 1) * k], correct[b * k:(b + 1) * k])
                        for b in range(blocks)]))


def summarize(correct: np.ndarray, keys: Sequence[Sequence[str]], ks: Sequence[int]) -> dict:
  """Mean `pass@k` and `maj@k` for every k over problems: correct [N, n] 0/1, keys N lists of n."""
  correct = np.asarray(correct, np.float64)
  if correct.ndim != 2 or len(keys) != correct.shape[0]:
    raise ValueError(f"correct has shape {correct.shape} and keys {len(keys)} rows; expected "
                     "[N, n] grades and N rows of n answer keys")
  n = correct.shape[1]
  out = {}
  for k in ks:
    out[f"pass@{k}"] = float(np.mean([pass_at_k(n, int(row.sum()), k) for row in correct]))
    out[f"maj@{k}"] = float(np.mean([maj_at_k(list(kr), list(row), k)
                                     for kr, row in zip(keys, correct)]))
  return out
