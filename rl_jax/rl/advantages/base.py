"""The advantage registry and the statistics every estimator shares.

The estimators live in `group` (flat groups), `tree` (recorded trees) and `v05` (V0.5 fusion);
`rl_jax.rl.advantages` imports them all, so `advantages.get(name)` finds every one.

Every estimator is registered in `ADVANTAGES` (docs/algorithms.md §1) and has the
signature

    fn(rewards, valid, **options) -> (adv, weight)

- `rewards` [B, G] float (`gdpo`, `gdpo_verl`: [B, G, K]); `valid` [B, G] bool
  (the rollout exists). Ragged groups are expressed only through `valid`
  (§0 pattern 1): shapes stay static and every function is jittable.
- `adv` [B, G] float32, 0 where invalid, wrapped in `lax.stop_gradient`.
  Token-level estimators (`reinforce_pp`, `reinforce_pp_baseline`,
  `gdpo_verl`) take a required keyword `mask` [B, G, T] and return
  `adv` [B, G, T], already multiplied by the mask.
- `weight` [B, G] float32 loss weight: 0 for rows that must not contribute to
  the loss (invalid rows, the MC-GRPO pivot), 1 otherwise. Multiply it into the
  token mask before aggregating, so such rows also leave the normalisers.

Options are Python scalars, strings or tuples, so they can be bound with
`functools.partial` before `jax.jit`. Statistics follow verl: unbiased std
(ddof=1); a group with one valid member has mean 0 and std 1.
"""

from __future__ import annotations

from typing import Callable, Tuple

import chex
import jax
import jax.numpy as jnp
from jax import lax

from rl_jax.registry import Registry

ADVANTAGES = Registry('advantage')

Array = jax.Array
AdvOut = Tuple[Array, Array]


def get(name: str) -> Callable[..., AdvOut]:
  """Returns the advantage estimator registered as `name`."""
  return ADVANTAGES.get(name)


# What an entry declares at `ADVANTAGES.register(name, ...)` (False when absent), read by the
# rollout and train code instead of naming estimators:
#   group_relative: compares a row with the other rows of its group (one row per group gives 0);
#   multi_reward: takes every reward component [B, G, K], not the weighted scalar [B, G];
#   token_level: returns adv [B, G, T] (needs `mask`), not one advantage per row;
#   per_row_prior: reads the batch's per-row prior (p0, w) [B, G, 2], which the round rule that
#     declares it wanted (`rollout.rules`) computes and writes;
#   extra_rounds: draws extra generation rounds of its own (that round rule).
# Entries may also declare `check(config)` (its config check) and `config_options(config)` (its
# keyword options from its config section).
TRAITS = ("group_relative", "multi_reward", "token_level", "per_row_prior", "extra_rounds")


def declares(name: str, trait: str) -> bool:
  """Whether advantage `name` declares `trait` (one of `TRAITS`); False for an unregistered
  name (the config check names it)."""
  if trait not in TRAITS:
    raise ValueError(f"unknown advantage trait {trait!r}; expected one of {TRAITS}")
  return bool(ADVANTAGES.declared(name, trait, False))


# ----------------------------------------------------------------------------
# Shared statistics.


def prep(rewards: Array, valid: Array) -> Tuple[Array, Array]:
  """rewards as float32 (0 where invalid, so NaN padding is harmless) and
  valid as a {0,1} float32 mask of the same rank. Asserts (chex, at trace time) rewards [B, G]
  or [B, G, K] and valid [B, G]."""
  chex.assert_rank(rewards, {2, 3})
  chex.assert_shape(valid, tuple(jnp.shape(rewards)[:2]))
  v = jnp.asarray(valid, bool)
  r = jnp.asarray(rewards, jnp.float32)
  v = v.reshape(v.shape + (1,) * (r.ndim - v.ndim))
  return jnp.where(v, r, 0.0), v.astype(jnp.float32)


def group_stats(r: Array, v: Array) -> Tuple[Array, Array, Array]:
  """n, μ, σ over the group axis 1 (kept), with the verl singleton rule.

  `n = Σ_i v_i`, `μ = Σ r v / max(n,1)`, `σ² = Σ (r−μ)² v / max(n−1,1)`;
  where n == 1, μ := 0 and σ := 1.
  """
  n = jnp.sum(v, axis=1, keepdims=True)
  mu = jnp.sum(r * v, axis=1, keepdims=True) / jnp.maximum(n, 1.0)
  var = jnp.sum(jnp.square(r - mu) * v, axis=1, keepdims=True)
  std = jnp.sqrt(var / jnp.maximum(n - 1.0, 1.0))
  single = n == 1
  return n, jnp.where(single, 0.0, mu), jnp.where(single, 1.0, std)


def all_stats(x: Array, m: Array) -> Tuple[Array, Array]:
  """Mean and unbiased std of x over every entry where m is 1."""
  n = jnp.sum(m)
  mu = jnp.sum(x * m) / jnp.maximum(n, 1.0)
  var = jnp.sum(jnp.square(x - mu) * m) / jnp.maximum(n - 1.0, 1.0)
  return mu, jnp.sqrt(var)


def masked_whiten(x: Array, mask: Array) -> Array:
  """verl `masked_whiten` over all entries: `(x − μ)·rsqrt(var + 1e-8)`.

  μ and the unbiased var are taken over entries with mask 1, so with a token
  mask long responses weigh more (docs/algorithms.md §0).
  """
  m = jnp.asarray(mask, jnp.float32)
  n = jnp.sum(m)
  mu = jnp.sum(x * m) / jnp.maximum(n, 1.0)
  var = jnp.sum(jnp.square(x - mu) * m) / jnp.maximum(n - 1.0, 1.0)
  return (x - mu) * lax.rsqrt(var + 1e-8)


def finish(adv: Array, v: Array) -> AdvOut:
  """Zeroes invalid rows, stops gradients, returns (adv, weight)."""
  adv = lax.stop_gradient(jnp.where(v > 0, adv, 0.0))
  return adv, v


def token_advantages(adv: Array, mask: Array) -> Array:
  """Broadcasts sequence advantages to tokens: `A[b,i,t] = A[b,i]·m[b,i,t]`."""
  return adv[..., None] * jnp.asarray(mask, adv.dtype)


def token_mask(mask: Array, v: Array) -> Array:
  """The token mask [B, G, T] as float32, zeroed on invalid rows (`v` [B, G])."""
  return jnp.asarray(mask, jnp.float32) * v[..., None]
