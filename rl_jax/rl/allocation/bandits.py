"""Uncertainty-driven allocators: VADE (§6.5), InSight (§6.4), XRPO (§6.3) of
docs/algorithms.md, which gives each one's score and its [P]/[R] parts.

`vade` and `insight` select B of the C candidates (equal rows each); `xrpo` gives every
candidate between `min_n` and `max_n` rows. Only `vade` keeps state (its Beta posteriors, in the
allocator state the run checkpoints); `insight` and `xrpo` read the rollout history through
`PromptStats`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import special

from rl_jax.rl.allocation.base import (ALLOCATORS, Allocation, AllocationError, Allocator,
                                       spread, top_b)

# ---------------------------------------------------------------------------------------------
# InSight: Beta-Bernoulli / Beta-Binomial mutual information.


def binary_entropy(mu):
  mu = np.clip(np.asarray(mu, np.float64), 1e-300, 1.0)
  nu = np.clip(1.0 - np.asarray(mu, np.float64), 1e-300, 1.0)
  return -(mu * np.log(mu) + nu * np.log(nu))


def beta_mi(alpha, beta):
  """I(p; y) in nats for one rollout y ~ Bernoulli(p), p ~ Beta(α, β):
  `H_b(μ) − [ψ(α+β+1) − (α ψ(α+1) + β ψ(β+1))/(α+β)]`, μ = α/(α+β)."""
  a, b = np.asarray(alpha, np.float64), np.asarray(beta, np.float64)
  cond = special.digamma(a + b + 1) - (a * special.digamma(a + 1) + b * special.digamma(b + 1)
                                       ) / (a + b)
  return binary_entropy(a / (a + b)) - cond


def beta_binomial_mi(alpha: float, beta: float, n: int) -> float:
  """I(p; K) for K ~ Bin(n, p), p ~ Beta(α, β): the Beta-Binomial predictive entropy minus
  `E_p H(Bin(n, p))` (exact, a sum over k = 0..n). n = 1 equals `beta_mi`."""
  k = np.arange(n + 1, dtype=np.float64)
  log_c = special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
  log_pk = log_c + special.betaln(alpha + k, beta + n - k) - special.betaln(alpha, beta)
  pk = np.exp(log_pk)
  psi_n = special.digamma(alpha + beta + n)
  e_log = log_c + k * (special.digamma(alpha + k) - psi_n) + (n - k) * (
      special.digamma(beta + n - k) - psi_n)
  return float(-np.sum(pk * log_pk) + np.sum(pk * e_log))


@ALLOCATORS.register("insight")
@dataclasses.dataclass(frozen=True)
class InSight(Allocator):
  """InSight data selection (`insight_reconstructed`). rollouts: n of the MI (1: closed form);
  sample: draw B prompts ∝ score instead of the top B."""
  rollouts: int = 1
  sample: bool = False
  selects = True

  def score(self, stats) -> np.ndarray:
    a = 1.0 + stats.successes
    b = 1.0 + stats.attempts - stats.successes
    mi = (beta_mi(a, b) if self.rollouts <= 1 else
          np.asarray([beta_binomial_mi(x, y, self.rollouts) for x, y in zip(a, b)]))
    mu = a / (a + b)
    return mu * (1.0 - mu) * mi

  def allocate(self, stats, budget, state, rng):
    del state
    s = self.score(stats)
    if self.sample:
      keep = np.zeros(len(s), bool)
      keep[rng.choice(len(s), budget.num_prompts, replace=False, p=s / s.sum())] = True
    else:
      keep = top_b(s, budget.num_prompts)
    return _equal_rows(keep, budget)


def _equal_rows(keep: np.ndarray, budget) -> Allocation:
  n = np.zeros(len(keep), np.int64)
  n[keep] = spread(budget.total, budget.num_prompts)
  return Allocation(n, keep)


# ---------------------------------------------------------------------------------------------
# VADE: Thompson sampling over decayed Beta posteriors.

_VADE_FIELDS = ("ids", "alpha", "beta", "step")


@ALLOCATORS.register("vade")
@dataclasses.dataclass(frozen=True)
class Vade(Allocator):
  """VADE data selection (`vade_reconstructed` decay). gamma_fast γ_f, gamma_slow γ_s
  (1.0 = no decay)."""
  gamma_fast: float = 0.5
  gamma_slow: float = 0.99
  selects = True

  def __post_init__(self):
    for name in ("gamma_fast", "gamma_slow"):
      if not 0 <= getattr(self, name) <= 1:
        raise AllocationError(f"vade {name}={getattr(self, name)}; expected a value in [0, 1]")

  def init_state(self) -> dict:
    return {f: [] for f in _VADE_FIELDS}

  def posteriors(self, state: dict, prompt_ids, step: int) -> tuple[np.ndarray, np.ndarray]:
    """(α [C], β [C]) of `prompt_ids` at `step`: the stored posterior decayed by γ_s per step
    since it was stored; the prior (1, 1) for a prompt never observed."""
    ids = np.asarray(prompt_ids, np.int64)
    table = {int(i): (a, b, s) for i, a, b, s in zip(*(state[f] for f in _VADE_FIELDS))}
    alpha, beta = np.ones(len(ids)), np.ones(len(ids))
    for j, i in enumerate(ids.tolist()):
      if i in table:
        a, b, s = table[i]
        g = self.gamma_slow ** max(step - s, 0)
        alpha[j], beta[j] = 1 + g * (a - 1), 1 + g * (b - 1)
    return alpha, beta

  def allocate(self, stats, budget, state, rng):
    alpha, beta = self.posteriors(state, stats.prompt_ids, stats.step)
    p = rng.beta(alpha, beta)
    return _equal_rows(top_b(p * (1.0 - p), budget.num_prompts), budget)

  def observe(self, state, prompt_ids, attempts, successes, step):
    ids = np.asarray(prompt_ids, np.int64).reshape(-1)
    att, suc = np.asarray(attempts, np.int64), np.asarray(successes, np.int64)
    table = {int(i): (a, b, s) for i, a, b, s in zip(*(state[f] for f in _VADE_FIELDS))}
    for j, i in enumerate(ids.tolist()):
      a, b = 1.0, 1.0
      if i in table:  # Slow decay since stored, then the fast decay of a re-observed prompt.
        a0, b0, s0 = table[i]
        g = self.gamma_slow ** max(step - s0, 0) * self.gamma_fast
        a, b = 1 + g * (a0 - 1), 1 + g * (b0 - 1)
      table[i] = (a + int(suc[j]), b + int(att[j] - suc[j]), int(step))
    return {"ids": list(table), "alpha": [float(v[0]) for v in table.values()],
            "beta": [float(v[1]) for v in table.values()],
            "step": [int(v[2]) for v in table.values()]}


# ---------------------------------------------------------------------------------------------
# XRPO: phased allocation by uncertainty reduction + exploration bonus.

XRPO_FORMS = ("reconstructed", "quoted")


def half_width(n, s, a: float = 0.05):
  """`h(n) = t_{1−a/2, n−1} · s/√n` (Student-t CI half-width; n − 1 degrees of freedom, >= 1).

  The quantile is `special.stdtrit`, the function behind `scipy.stats.t.ppf` (importing
  scipy.stats costs every run a second).
  """
  n = np.asarray(n, np.float64)
  return special.stdtrit(np.maximum(n - 1.0, 1.0), 1.0 - a / 2.0) * np.asarray(s) / np.sqrt(n)


def sample_std(attempts, successes) -> np.ndarray:
  """Unbiased std of binary rewards (0.5 where fewer than 2 were observed)."""
  a, k = np.asarray(attempts, np.float64), np.asarray(successes, np.float64)
  p = k / np.maximum(a, 1)
  return np.where(a >= 2, np.sqrt(p * (1 - p) * a / np.maximum(a - 1, 1)), 0.5)


@ALLOCATORS.register("xrpo")
@dataclasses.dataclass(frozen=True)
class Xrpo(Allocator):
  """XRPO's phased explore/exploit allocation. form: 'reconstructed' | 'quoted'; lam λ of the
  bonus [R value]; ci_alpha a of the half-width; chunk: rows given per phase (one to each of
  the top-`chunk` prompts)."""
  form: str = "reconstructed"
  lam: float = 0.1
  ci_alpha: float = 0.05
  chunk: int = 1

  def __post_init__(self):
    if self.form not in XRPO_FORMS:
      raise AllocationError(f"xrpo form={self.form!r}; expected one of {XRPO_FORMS}")
    if self.chunk < 1:
      raise AllocationError(f"xrpo chunk={self.chunk}; expected >= 1")

  def priority(self, n: np.ndarray, s: np.ndarray, step: int) -> np.ndarray:
    n = np.maximum(np.asarray(n, np.float64), 1.0)
    gain = half_width(n, s, self.ci_alpha) - half_width(n + 1, s, self.ci_alpha)
    clock = np.log(max(n.sum(), 1.0)) if self.form == "reconstructed" else np.log1p(step)
    return gain + self.lam * np.sqrt(clock / n)

  def allocate(self, stats, budget, state, rng):
    del state, rng
    s = sample_std(stats.attempts, stats.successes)
    n = np.full(len(stats), budget.min_n, np.int64)
    rest = budget.total - int(n.sum())
    while rest > 0:
      pri = np.where(n < budget.max_n, self.priority(n, s, stats.step), -np.inf)
      take = np.argsort(-pri, kind="stable")[:min(self.chunk, rest, int((n < budget.max_n).sum()))]
      n[take] += 1
      rest -= len(take)
    return Allocation(n, np.ones(len(stats), bool))
