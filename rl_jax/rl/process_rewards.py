"""Dense (process) advantages: outcome rewards + per-step rewards -> per-token advantages.

docs/algorithms.md §5.1 (PAV), §5.2 (PRIME, with the public-code corrections), §5.3 (OPRL in the
public iStar form). Every estimator is registered in `PROCESS_ADVANTAGES` with the signature

    fn(rewards [B, G], valid [B, G], *, outcome_adv [B, G], step_rewards [B, G, T],
       step_of [B, G, T], mask [B, G, T], **options) -> (adv [B, G, T], weight [B, G])

Step rewards in the batch (`types.Rollout.step_rewards`, `step_of`): the reward of step h of a
row is the sum of `step_rewards` over the tokens with `step_of == h`. PAV puts each step's
progress on its end token; OPRL puts β·(log π_φ − log π_old) on every token (the sum is the
step's β·log-ratio); PRIME's steps are tokens (`step_of[t] = t`) with the raw log-ratio
`log π_φ − log π_ref` on each. `outcome_adv` is the registered outcome estimator's advantage
(`config.rl.advantage`); PAV and OPRL add to it, PRIME replaces it (RLOO per reward source).
Everything is jittable; adv is 0 off the mask and wrapped in `stop_gradient`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl_jax.registry import Registry
from rl_jax.rl.advantages.base import masked_whiten

PROCESS_ADVANTAGES = Registry("process advantage")

# What an entry declares (an attribute of its function; False when absent), read instead of
# naming the methods: `online`: its PRM trains during RL (checkpointed beside the policy);
# `adds_progress`: adds α x a per-step progress to a per-row outcome advantage (needs alpha);
# `per_row_outcome`: builds on a per-row outcome advantage.
TRAITS = ("online", "adds_progress", "per_row_outcome")


def declares(name: str, trait: str) -> bool:
  """Whether process advantage `name` declares `trait` (one of `TRAITS`); False for a name
  that is not registered ('none')."""
  if trait not in TRAITS:
    raise ValueError(f"unknown process-advantage trait {trait!r}; expected one of {TRAITS}")
  return name in PROCESS_ADVANTAGES and bool(getattr(PROCESS_ADVANTAGES.get(name), trait, False))
Array = jax.Array


def step_sums(step_rewards: Array, step_of: Array, mask: Array) -> Array:
  """[..., T] token rewards -> [..., T] step sums: the reward of each step (its max T slots
  indexed by step id)."""
  t = step_rewards.shape[-1]
  onehot = jax.nn.one_hot(step_of, t, dtype=jnp.float32) * mask[..., None]
  return jnp.einsum("...t,...th->...h", jnp.where(mask, step_rewards, 0.0), onehot)


def broadcast_steps(per_step: Array, step_of: Array, mask: Array) -> Array:
  """[..., H] per-step values -> [..., T] on every token of the step (0 off the mask)."""
  return jnp.where(mask, jnp.take_along_axis(per_step, step_of, axis=-1), 0.0)


def _finish(adv: Array, valid: Array, mask: Array) -> tuple[Array, Array]:
  m = mask & valid[..., None]
  return jax.lax.stop_gradient(jnp.where(m, adv, 0.0)), valid.astype(jnp.float32)


@PROCESS_ADVANTAGES.register("pav")
def pav(rewards: Array, valid: Array, *, outcome_adv: Array, step_rewards: Array, step_of: Array,
        mask: Array, alpha: float) -> tuple[Array, Array]:
  """§5.1: token advantage `A^outcome_i + α·Â^μ(s_h, a_h)` for tokens of step h.

  `step_rewards` holds the progress `Q̂^μ(s_h, a_h) − Q̂^μ(s_{h−1}, a_{h−1})` on step h's tokens
  (summed per step). α has no default (the paper's RL value is not known): α = 0 gives the
  outcome advantage on every token.
  """
  del rewards
  mask, valid = jnp.asarray(mask, bool), jnp.asarray(valid, bool)
  prog = broadcast_steps(step_sums(step_rewards, step_of, mask), step_of, mask)
  adv = jnp.asarray(outcome_adv, jnp.float32)[..., None] + alpha * prog
  return _finish(adv, valid, mask)


# 'oracle' (`value.prm.oracle`): PAV with a perfect prover, the true step labels' progress in
# `step_rewards`; the estimator is PAV's.
PROCESS_ADVANTAGES.register("oracle")(pav)


def _group_n(valid: Array) -> Array:
  return jnp.sum(valid, axis=1, keepdims=True).astype(jnp.float32)


def rloo_tokens(token_r: Array, mask: Array, valid: Array) -> Array:
  """PRIME's `masked_rloo` [V]: each counted reward of row i becomes `r·n/(n−1) − Σ_j r̄_j/(n−1)`,
  r̄_j = the mean counted reward of row j of the group (n = the group's valid rows)."""
  m = (mask & valid[..., None]).astype(jnp.float32)
  r = token_r * m
  mean_j = r.sum(-1) / jnp.maximum(m.sum(-1), 1.0)  # [B, G]
  n = _group_n(valid)
  base = jnp.sum(mean_j * valid, axis=1, keepdims=True) / jnp.maximum(n - 1, 1.0)
  return jnp.where(m > 0, r * (n / jnp.maximum(n - 1, 1.0))[..., None] - base[..., None], 0.0)


def reverse_cumsum(x: Array) -> Array:
  """Returns-to-go with γ = 1 along the last axis."""
  return jnp.flip(jnp.cumsum(jnp.flip(x, -1), -1), -1)


def prime_token_rewards(log_ratio: Array, mask: Array, norm: str = "batch") -> Array:
  """§5.2 (corrected) [V]: raw `q_t = log π_φ − log π_ref`, divided (norm='batch') by
  `max_{rows, t} |Σ_{s≥t} q_s| + 1e-6`; norm='none' leaves them raw."""
  q = jnp.where(mask, log_ratio, 0.0)
  if norm == "none":
    return q
  if norm != "batch":
    raise ValueError(f"prime norm={norm!r}; expected 'batch' or 'none'")
  scale = jnp.max(jnp.abs(jnp.where(mask, reverse_cumsum(q), 0.0))) + 1e-6
  return q / scale


@PROCESS_ADVANTAGES.register("prime")
def prime(rewards: Array, valid: Array, *, outcome_adv: Array, step_rewards: Array,
          step_of: Array, mask: Array, norm: str = "batch") -> tuple[Array, Array]:
  """§5.2 [V]: RLOO per reward source (the verifier's outcome on the last token, the implicit
  PRM's normalised log-ratio on every token), returns-to-go with γ = 1 per source, summed, then
  `masked_whiten` over the batch's tokens. `outcome_adv` is not used (PRIME has its own), nor
  `step_of` (its steps are tokens)."""
  del outcome_adv, step_of
  mask, valid = jnp.asarray(mask, bool), jnp.asarray(valid, bool)
  m = mask & valid[..., None]
  last = jnp.cumsum(mask, -1) == jnp.sum(mask, -1, keepdims=True)
  last = last & mask
  outcome = jnp.where(last, jnp.asarray(rewards, jnp.float32)[..., None], 0.0)
  src_v = rloo_tokens(outcome, last, valid)
  src_p = rloo_tokens(prime_token_rewards(step_rewards, m, norm), mask, valid)
  returns = reverse_cumsum(src_v) + reverse_cumsum(src_p)
  return _finish(masked_whiten(returns, m.astype(jnp.float32)), valid, mask)


def prime_prm_loss(log_ratio_sum: Array, outcome: Array, valid: Array,
                   beta: float = 0.05) -> Array:
  """PRIME's PRM loss [V]: mean over valid rows of `BCE(σ(β·Σ_t (log π_φ − log π_ref)), r)`.

  As softplus(z) − z·r: the form max(z, 0) − z·r + log1p(e^{−|z|}) has the same value but the
  gradient −r instead of σ(0) − r at exactly z = 0, which is where every row starts (π_φ = π_ref
  at the first update): under jit an all-failure batch then gave the PRM a zero gradient."""
  z = beta * log_ratio_sum
  bce = jax.nn.softplus(z) - z * outcome
  v = valid.astype(jnp.float32)
  return jnp.sum(bce * v) / jnp.maximum(jnp.sum(v), 1.0)


def oprl_step_rewards(log_ratio_sums: Array, beta: float) -> Array:
  """§5.3 [P/iStar]: step reward `β·Σ_{t∈step}(log π_φ − log π_old)` (before normalisation)."""
  return beta * log_ratio_sums


@PROCESS_ADVANTAGES.register("oprl")
def oprl(rewards: Array, valid: Array, *, outcome_adv: Array, step_rewards: Array,
         step_of: Array, mask: Array, weight: float = 1.0, baseline: str = "rloo",
         normalize: bool = True) -> tuple[Array, Array]:
  """§5.3, the iStar public-code form: `A = A^outcome + w·(s_h − b)` on the tokens of step h.

  s_h is the step's reward (the sum of `step_rewards` over its tokens, already β·log-ratio),
  divided by the batch's largest |s_h| when `normalize`. The baseline b uses each trajectory's
  *first* step reward: 'rloo' the mean over the other valid rows of the group (`istar_rloo`),
  'mean' the group mean (`istar_grpo`). For the iStar form set `config.rl.advantage='rloo'`.
  """
  del rewards
  mask, valid = jnp.asarray(mask, bool), jnp.asarray(valid, bool)
  m = mask & valid[..., None]
  s = step_sums(step_rewards, step_of, m)  # [B, G, H]
  steps_present = jnp.any(jax.nn.one_hot(step_of, s.shape[-1], dtype=bool) & m[..., None],
                          axis=-2)
  if normalize:
    s = s / (jnp.max(jnp.abs(jnp.where(steps_present, s, 0.0))) + 1e-6)
  first = s[..., 0] * valid
  n = _group_n(valid)
  total = jnp.sum(first, axis=1, keepdims=True)
  if baseline == "rloo":
    b = (total - first) / jnp.maximum(n - 1, 1.0)
  elif baseline == "mean":
    b = total / jnp.maximum(n, 1.0)
  else:
    raise ValueError(f"oprl baseline={baseline!r}; expected 'rloo' or 'mean'")
  step_adv = broadcast_steps(s - b[..., None], step_of, m)
  adv = jnp.asarray(outcome_adv, jnp.float32)[..., None] + weight * step_adv
  return _finish(adv, valid, mask)


def oprl_prm_loss(step_log_ratio_sums: Array, step_mask: Array, outcome: Array, valid: Array,
                  beta: float = 0.05) -> Array:
  """iStar's `eto` PRM loss: a trajectory's score is `Q = β·mean_h(Σ_{t∈h} log π_φ/π_old)`;
  over all (success, failure) pairs (i, j) of a group, mean of `−log σ(Q_i − Q_j)`.

  Args:
    step_log_ratio_sums: [B, G, H]; step_mask [B, G, H]; outcome [B, G]: (i, j) is a pair
      when r_i > r_j (binary rewards: success vs failure); valid [B, G].
  Returns the scalar loss (0 when no group has a pair).
  """
  sm = step_mask.astype(jnp.float32)
  q = beta * jnp.sum(step_log_ratio_sums * sm, -1) / jnp.maximum(jnp.sum(sm, -1), 1.0)
  v = jnp.asarray(valid, bool)
  pair = (outcome[:, :, None] > outcome[:, None, :]) & v[:, :, None] & v[:, None, :]
  d = q[:, :, None] - q[:, None, :]
  # −log σ(d) as softplus(−d): the max/|.| form's gradient is 0 instead of −1/2 at d = 0, where
  # every pair starts (π_φ = π_old before the first update).
  nll = jax.nn.softplus(-d)
  pf = pair.astype(jnp.float32)
  return jnp.sum(nll * pf) / jnp.maximum(jnp.sum(pf), 1.0)


# Declared traits (`TRAITS`); 'oracle' is PAV's function.
pav.adds_progress = pav.per_row_outcome = True
prime.online = True
oprl.online = oprl.per_row_outcome = True
