"""Calibration of success-rate predictions: Brier score, AUROC, ECE, and the three baselines.

Targets are measured success rates r in [0, 1] (held-out prompts, >= 8 samples each);
predictions p in [0, 1].

* `brier(p, r) = mean((p - r)^2)` (soft targets: the squared error against the measured rate).
* `auroc(p, r)`: area under the ROC curve of p for the label `r >= 0.5` (Mann-Whitney U with
  midranks for ties); NaN when one class is missing.
* `ece(p, r, bins=10)`: `sum_b (n_b / N) |mean_b p - mean_b r|` over equal-width bins of p on
  [0, 1] (p = 1 in the last bin).

Baselines (`baselines`), each a prediction for the same prompts:
* `global_mean`: the mean success rate of the support set (the current policy's recent rollouts);
* `past_rate`: the prompt's own previously measured rate where it has one (`coverage` = the
  share that has one), else the global mean;
* `logreg`: an L2-regularised logistic regression with soft labels, fitted (Newton steps) on the
  support set's features and applied to the query features (the same features V0 reads).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

POSITIVE_RATE = 0.5


def brier(p, r) -> float:
  p, r = np.asarray(p, np.float64), np.asarray(r, np.float64)
  return float(np.mean((p - r) ** 2))


def _midranks(x: np.ndarray) -> np.ndarray:
  order = np.argsort(x, kind="stable")
  ranks = np.empty(len(x), np.float64)
  xs = x[order]
  i = 0
  while i < len(x):
    j = i
    while j + 1 < len(x) and xs[j + 1] == xs[i]:
      j += 1
    ranks[order[i:j + 1]] = 0.5 * (i + j) + 1.0
    i = j + 1
  return ranks


def auroc(p, r) -> float:
  p, r = np.asarray(p, np.float64), np.asarray(r, np.float64)
  pos = r >= POSITIVE_RATE
  n_pos, n_neg = int(pos.sum()), int((~pos).sum())
  if not n_pos or not n_neg:
    return float("nan")
  ranks = _midranks(p)
  return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def ece(p, r, bins: int = 10) -> float:
  p, r = np.asarray(p, np.float64), np.asarray(r, np.float64)
  b = np.minimum((p * bins).astype(int), bins - 1)
  total = 0.0
  for k in range(bins):
    sel = b == k
    if sel.any():
      total += sel.mean() * abs(p[sel].mean() - r[sel].mean())
  return float(total)


def metrics(p, r, prefix: str) -> dict:
  """{prefix/brier, prefix/auroc, prefix/ece}; no auroc where it is undefined (one class)."""
  out = {f"{prefix}/brier": brier(p, r), f"{prefix}/auroc": auroc(p, r),
         f"{prefix}/ece": ece(p, r)}
  if np.isnan(out[f"{prefix}/auroc"]):
    del out[f"{prefix}/auroc"]
  return out


def logistic_regression(x: np.ndarray, y: np.ndarray, *, l2: float = 1.0,
                        iters: int = 25) -> tuple[np.ndarray, float]:
  """(w, b) minimising soft-label cross-entropy + l2/2·|w|^2 (Newton's method); x is
  standardised inside and the returned (w, b) apply to raw x."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  mu, sd = x.mean(0), x.std(0) + 1e-6
  z = np.concatenate([(x - mu) / sd, np.ones((len(x), 1))], 1)
  theta = np.zeros(z.shape[1])
  reg = np.full(z.shape[1], l2)
  reg[-1] = 1e-6  # the intercept is (nearly) free
  for _ in range(iters):
    q = 1 / (1 + np.exp(-z @ theta))
    grad = z.T @ (q - y) + reg * theta
    hess = (z * (q * (1 - q))[:, None]).T @ z + np.diag(reg)
    theta -= np.linalg.solve(hess, grad)
  w = theta[:-1] / sd
  return w, float(theta[-1] - (mu * w).sum())


def baselines(rates, *, support_y, past_rates: Optional[np.ndarray] = None,
              support_x: Optional[np.ndarray] = None,
              query_x: Optional[np.ndarray] = None) -> dict:
  """Metrics of the three baselines against measured `rates` [Q] (module doc).

  past_rates [Q]: each prompt's earlier measured rate, NaN where it has none.
  support_x [S, F] / query_x [Q, F]: features for the logistic regression (skipped if None)."""
  rates = np.asarray(rates, np.float64)
  m = float(np.mean(support_y)) if len(support_y) else 0.5
  out = metrics(np.full(len(rates), m), rates, "baseline_global_mean")
  if past_rates is not None:
    past = np.asarray(past_rates, np.float64)
    have = ~np.isnan(past)
    out.update(metrics(np.where(have, past, m), rates, "baseline_past_rate"))
    out["baseline_past_rate/coverage"] = float(have.mean()) if len(have) else 0.0
  if support_x is not None and query_x is not None and len(support_y) > 1:
    w, b = logistic_regression(support_x, support_y)
    p = 1 / (1 + np.exp(-(np.asarray(query_x, np.float64) @ w + b)))
    out.update(metrics(p, rates, "baseline_logreg"))
  return out
