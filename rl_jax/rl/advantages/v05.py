"""V0.5: a value prior fused with sparse rollouts (docs/algorithms.md §4.2, its steps 1-6).

RECONSTRUCTED (`v05_reconstructed`): the paper's code is not public; the test statistic, the
significance level, the fusion weight, the extra-round schedule and n_max are ours.

Host side: `reject` (step 3) and `fusion_weight` (step 5) decide each prompt's prior p0 and
weight w, from p0 and sigma0^2 of a `rl_jax.value.priors` prior; the round rule
`rollout.rules.V05Extra` draws the extra rounds of rejected prompts (step 4). Device side: the
estimator `v05` (registered in `rl.advantages.base.ADVANTAGES`) takes the per-row `(p0, w)`
[B, G, 2] (w = 0 where the prior was rejected) and is elementwise: A = r - (w p0 + (1 - w) r̄).
"""

from __future__ import annotations

import math
import statistics

import jax.numpy as jnp
import numpy as np
from jax import lax

from rl_jax.rl.advantages.base import ADVANTAGES, prep

TESTS = ("z", "binomial")
FUSIONS = ("variance", "beta")


def _clip(p0, clip=(0.02, 0.98)):
  return np.clip(np.asarray(p0, np.float64), clip[0], clip[1])


def z_statistic(k, n, p0, clip=(0.02, 0.98)) -> np.ndarray:
  """z = (k/n − p0')/sqrt(p0'(1−p0')/n), p0' = clip(p0) (§4.2 step 3)."""
  p = _clip(p0, clip)
  n = np.asarray(n, np.float64)
  return (np.asarray(k, np.float64) / n - p) / np.sqrt(p * (1.0 - p) / n)


def binomial_tail(k, n, p0, clip=(0.02, 0.98)) -> np.ndarray:
  """Two-sided exact tail P_{Bin(n,p0')}(|K − n p0'| >= |k − n p0'|)."""
  p = _clip(p0, clip)
  k, n = np.broadcast_arrays(np.asarray(k, np.int64), np.asarray(n, np.int64))
  p = np.broadcast_to(p, k.shape)
  out = np.empty(k.shape, np.float64)
  for i in np.ndindex(k.shape):
    m, q = int(n[i]), float(p[i])
    cut = abs(int(k[i]) - m * q) - 1e-9
    out[i] = sum(math.comb(m, j) * q ** j * (1.0 - q) ** (m - j)
                 for j in range(m + 1) if abs(j - m * q) >= cut)
  return out


def reject(k, n, p0, *, alpha: float = 0.05, test: str = "z",
           clip=(0.02, 0.98)) -> np.ndarray:
  """bool: the rollouts (k successes of n) reject the prior p0 at level alpha."""
  if test == "z":
    return np.abs(z_statistic(k, n, p0, clip)) > critical_z(alpha)
  if test == "binomial":
    return binomial_tail(k, n, p0, clip) <= alpha
  raise ValueError(f"config.rl.v05.test={test!r}; expected one of {TESTS}")


def fusion_weight(p0, sigma0_sq, n, *, form: str = "variance", clip=(0.02, 0.98)) -> np.ndarray:
  """w of the prior in b = w p0 + (1 − w) r̄ (§4.2 step 5), in [0, 1]."""
  p = _clip(p0, clip)
  s2 = np.maximum(np.asarray(sigma0_sq, np.float64), 1e-12)
  n = np.asarray(n, np.float64)
  if form == "variance":
    var = p * (1.0 - p) / n
    return var / (var + s2)
  if form == "beta":
    kappa = np.maximum(p * (1.0 - p) / s2 - 1.0, 0.0)
    return kappa / (kappa + n)
  raise ValueError(f"config.rl.v05.fusion={form!r}; expected one of {FUSIONS}")


def fused_baseline(p0, rbar, w) -> np.ndarray:
  """b = w p0 + (1 − w) r̄."""
  w = np.asarray(w, np.float64)
  return w * np.asarray(p0, np.float64) + (1.0 - w) * np.asarray(rbar, np.float64)


def next_size(n: int, n_max: int) -> int:
  """The group size after a rejection: doubled, at most n_max."""
  return min(2 * int(n), int(n_max))


def check_config(config) -> None:
  """ValueError naming the field for a `config.rl` V0.5 cannot run with: it needs ragged
  groups that hold n_max rows, draws its own extra rounds (no dynamic_sampling), and clips p0
  into (0, 1)."""
  rl, v = config.rl, config.rl.v05
  if not rl.group_size <= v.n_max <= rl.max_group_size:
    raise ValueError(f"config.rl.advantage='v05' with group_size={rl.group_size}, "
                     f"v05.n_max={v.n_max}, max_group_size={rl.max_group_size}; expected "
                     "group_size <= v05.n_max <= max_group_size (ragged groups, e.g. "
                     "--config.rl.max_group_size=16 --config.rl.rows=2*B*G)")
  if rl.dynamic_sampling:
    raise ValueError("config.rl.advantage='v05' with dynamic_sampling=True; expected "
                     "dynamic_sampling=False (V0.5 draws its own extra rounds)")
  if not 0 < v.p0_clip[0] < v.p0_clip[1] < 1:
    raise ValueError(f"config.rl.v05.p0_clip={tuple(v.p0_clip)}; expected (lo, hi) with "
                     "0 < lo < hi < 1")


def config_options(config) -> dict:
  """The estimator's keyword options from `config.rl.v05` (`rl.advantage_options` wins)."""
  return {"scale_by_std": bool(config.rl.v05.scale_by_std), "eps": float(config.rl.v05.std_eps)}


# Declared: its config check, its options from the config, that it draws extra rounds of its
# own (a round rule of `rollout.rules`), compares a row with its group and reads a per-row prior.
@ADVANTAGES.register("v05", check=check_config, config_options=config_options,
                     extra_rounds=True, group_relative=True, per_row_prior=True)
def v05(rewards, valid, *, prior, scale_by_std: bool = False, eps: float = 1e-6):
  """V0.5 advantages [B, G]: A_i = r_i − b, b = w p0 + (1 − w) r̄ (docs/algorithms.md §4.2, [R]).

  Args:
    rewards: [B, G] (the scalar reward; binary success for the fusion to be meaningful).
    valid: [B, G] bool (ragged groups).
    prior: [B, G, 2] per-row (p0, w) of the row's prompt (equal within a group; w = 0 where the
      test rejected the prior).
    scale_by_std: divide by the group's unbiased std + eps where the group's rewards vary; a
      group of equal rewards (or one row) is not scaled (its b != r̄ would otherwise be divided
      by eps).
  """
  r, v = prep(rewards, valid)
  prior = jnp.asarray(prior, jnp.float32)
  n = jnp.sum(v, axis=1, keepdims=True)
  rbar = jnp.sum(r * v, axis=1, keepdims=True) / jnp.maximum(n, 1.0)
  p0 = jnp.sum(prior[..., 0] * v, axis=1, keepdims=True) / jnp.maximum(n, 1.0)
  w = jnp.sum(prior[..., 1] * v, axis=1, keepdims=True) / jnp.maximum(n, 1.0)
  b = w * p0 + (1.0 - w) * rbar
  adv = r - b
  if scale_by_std:
    var = jnp.sum(jnp.square(r - rbar) * v, axis=1, keepdims=True) / jnp.maximum(n - 1.0, 1.0)
    adv = adv / jnp.where((n > 1) & (var > 0), jnp.sqrt(var) + eps, 1.0)
  adv = lax.stop_gradient(jnp.where(v > 0, adv, 0.0))
  return adv, v


def critical_z(alpha: float) -> float:
  """z_{1−α/2} (1.96 at α = 0.05)."""
  if not 0 < alpha < 1:
    raise ValueError(f"config.rl.v05.alpha={alpha}; expected a level in (0, 1)")
  return statistics.NormalDist().inv_cdf(1.0 - alpha / 2.0)
