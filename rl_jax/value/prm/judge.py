"""Judges a PRM's step values against the true step labels of the ladder task (`check_steps`).

In: a PRM's value after each segment `q [R, H]` (sigmoid of its logits), the bare prompt's value
`v0 [R]`, the rows' `ladder.StepCheck`s and texts. Out: `judge`'s dict of step metrics
(first-wrong-step accuracy by value and by progress, step AUROC) and the best-of-N /
majority-vote accuracies. Thresholds come from the grid `TAUS`, chosen on the first half of the
problems and reported on the second. Rows whose segment count differs from their non-empty line
count are left out and counted. docs/algorithms.md §5.1 defines each metric.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

TAUS = tuple(np.round(np.arange(0.05, 0.96, 0.05), 2))


def true_labels(checks: Sequence, texts: Sequence[str], num_segments: np.ndarray, max_steps: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(labels [R, H] bool, label mask [R, H], kept [R]) from `ladder.StepCheck`s.

  Segment h < n (the n scratchpad steps) is labelled `steps_correct[h]`, segment n the reward,
  later segments False; a row is kept when its non-empty lines number `num_segments[i]` and at
  most `max_steps`."""
  r = len(checks)
  labels = np.zeros((r, max_steps), bool)
  lmask = np.zeros((r, max_steps), bool)
  kept = np.zeros(r, bool)
  for i, (c, text) in enumerate(zip(checks, texts)):
    lines = [x for x in text.split("\n") if x.strip()]
    if len(lines) != int(num_segments[i]) or len(lines) > max_steps:
      continue
    kept[i] = True
    truth = list(c.steps_correct) + [bool(c.reward)]
    for h in range(min(len(lines), len(truth))):
      labels[i, h], lmask[i, h] = truth[h], True
    for h in range(len(truth), len(lines)):  # extra lines after the expected ones: wrong
      labels[i, h], lmask[i, h] = False, True
  return labels, lmask, kept


def first_false(labels: np.ndarray, lmask: np.ndarray) -> np.ndarray:
  """[R] index of the first False among the masked labels, or the number of masked ones."""
  bad = lmask & ~labels
  n = lmask.sum(1)
  return np.where(bad.any(1), np.argmax(bad, axis=1), n)


def predicted_first(q: np.ndarray, lmask: np.ndarray, tau: float) -> np.ndarray:
  return first_false(q >= tau, lmask)


def prefix_right(labels: np.ndarray, lmask: np.ndarray) -> np.ndarray:
  """[R, H] whether every masked segment up to and including h is right (False off the mask)."""
  return np.cumprod(labels | ~lmask, axis=1).astype(bool) & lmask


def progress(q: np.ndarray, v0: np.ndarray) -> np.ndarray:
  """[R, H] q_h − q_{h−1}, with q_{−1} = v0 (the value at the bare prompt)."""
  return q - np.concatenate([np.asarray(v0)[:, None], q[:, :-1]], axis=1)


def predicted_first_progress(q: np.ndarray, v0: np.ndarray, lmask: np.ndarray, delta: float
                             ) -> np.ndarray:
  """[R] the first segment whose progress q_h − q_{h−1} (q_{−1} = v0) is below −delta, or the
  number of masked segments when none is."""
  return first_false(progress(q, v0) >= -delta, lmask)


def _calibrated(predict, f_true: np.ndarray, rows: np.ndarray) -> float:
  """The threshold of TAUS whose predictions `predict(rows, x)` hit `f_true[rows]` most often
  (ties: the one nearest 0.5)."""
  acc = {x: float(np.mean(predict(rows, x) == f_true[rows])) for x in TAUS}
  return max(acc, key=lambda x: (acc[x], -abs(x - 0.5)))


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
  """Area under the ROC curve (ties count half); nan when one class is absent."""
  scores, labels = np.asarray(scores, float), np.asarray(labels, bool)
  pos, neg = scores[labels], scores[~labels]
  if not len(pos) or not len(neg):
    return float("nan")
  order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
  allv = np.concatenate([pos, neg])[order]
  ranks = np.empty(len(allv))
  i = 0
  while i < len(allv):  # average ranks over ties
    j = i
    while j + 1 < len(allv) and allv[j + 1] == allv[i]:
      j += 1
    ranks[i:j + 1] = (i + j) / 2 + 1
    i = j + 1
  r = np.empty(len(allv))
  r[order] = ranks
  return float((r[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def judge(q: np.ndarray, v0: np.ndarray, labels: np.ndarray, lmask: np.ndarray,
          problem: np.ndarray) -> dict:
  """Step-level metrics of one PRM on the kept rows: `q [R, H]`, `v0 [R]`, labels and mask
  [R, H] from `true_labels`, `problem [R]` ids (the lower half calibrates tau and delta).
  Keys and definitions: docs/algorithms.md §5.1."""
  f_true = first_false(labels, lmask)
  half = problem < np.median(np.unique(problem)) if len(np.unique(problem)) > 1 else \
      np.ones(len(problem), bool)
  tau = _calibrated(lambda m, t: predicted_first(q[m], lmask[m], t), f_true, half)
  delta = _calibrated(lambda m, d: predicted_first_progress(q[m], v0[m], lmask[m], d), f_true,
                      half)
  test = ~half if (~half).any() else half
  hit = predicted_first(q, lmask, tau) == f_true
  wrong = f_true < lmask.sum(1)
  hit05 = predicted_first(q, lmask, 0.5) == f_true
  upto = lmask & (np.arange(lmask.shape[1])[None] <= f_true[:, None])
  const = np.bincount(f_true[half]).argmax()  # the best constant guess, for reference
  return {
      "rows": int(len(q)), "rows_with_error": int(wrong.sum()),
      "first_wrong_acc_constant": float(np.mean(f_true[test] == const)),
      "tau": float(tau), "first_wrong_acc": float(hit[test].mean()),
      "first_wrong_acc_on_wrong": float(hit[test & wrong].mean()) if (test & wrong).any() else
      float("nan"),
      "first_wrong_acc_on_correct": float(hit[test & ~wrong].mean()) if (test & ~wrong).any()
      else float("nan"),
      "first_wrong_acc_tau05": float(hit05.mean()),
      "delta": float(delta),
      "first_wrong_acc_progress": float(np.mean(
          predicted_first_progress(q[test], v0[test], lmask[test], delta) == f_true[test])),
      "auroc": auroc(q[upto], labels[upto]),
      "auroc_progress": auroc(progress(q, v0)[upto], labels[upto]),
      "auroc_all_steps_prefix": auroc(q[lmask], prefix_right(labels, lmask)[lmask]),
  }


def best_of_n(scores: np.ndarray, rewards: np.ndarray, answers: Sequence[str], group: int
              ) -> dict:
  """Accuracy of the highest-scoring of each problem's `group` samples (ties: the first)."""
  s = np.asarray(scores, float).reshape(-1, group)
  r = np.asarray(rewards, float).reshape(-1, group)
  pick = np.argmax(np.where(np.isnan(s), -np.inf, s), axis=1)
  return float(r[np.arange(len(r)), pick].mean())


def majority(rewards: np.ndarray, answers: Sequence[str], group: int) -> float:
  """Accuracy of the majority final answer of each problem (ties: the answer seen first)."""
  r = np.asarray(rewards, float).reshape(-1, group)
  out = []
  for b in range(len(r)):
    ans = list(answers[b * group:(b + 1) * group])
    counts = {a: ans.count(a) for a in ans}
    best = max(ans, key=lambda a: (counts[a], -ans.index(a)))
    out.append(r[b, ans.index(best)])
  return float(np.mean(out))


def final_answer(text: str) -> str:
  """The last non-empty line (the ladder's final answer), stripped."""
  lines = [x.strip() for x in text.split("\n") if x.strip()]
  return lines[-1] if lines else ""
