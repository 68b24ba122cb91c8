"""Flat-group advantage estimators: outcome rewards -> per-rollout advantages.

Registered in `base.ADVANTAGES` (docs/algorithms.md §1): grpo, drgrpo, rloo, opo, grpo_passk,
mc_grpo, gdpo (sequence level) and gdpo_verl, reinforce_pp, reinforce_pp_baseline (token
level). The signature and conventions are in `rl_jax.rl.advantages.base`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
from jax import lax

from kernels import grouped_advantage
from rl_jax.rl.advantages.base import (ADVANTAGES, AdvOut, Array, all_stats, finish,
                                       group_stats, masked_whiten, prep, token_advantages,
                                       token_mask)


# ----------------------------------------------------------------------------
# Sequence-level estimators, [B, G] -> [B, G].


def _grouped(r: Array, v: Array, mode: str, eps: float, impl: str) -> Array:
  """[B, G] advantages of one grouped-statistics `mode` from `kernels.grouped_advantage`.

  impl 'auto' lowers to the Pallas kernel on TPU and GPU and to the XLA reference elsewhere
  (chosen at lowering time, so a TPU program compiled on a CPU host gets the kernel too).
  """
  b, g = r.shape
  adv, _ = grouped_advantage.grouped_advantage(r.reshape(-1), v.reshape(-1) > 0, group_size=g,
                                               mode=mode, eps=eps, impl=impl)
  return adv.reshape(b, g)


@ADVANTAGES.register('grpo', group_relative=True)
def grpo(rewards: Array, valid: Array, *, eps: float = 1e-6,
         scale: str = 'group', impl: str = 'auto') -> AdvOut:
  """GRPO: `A_i = (r_i − mean_j r_j) / (std_j r_j + ε)` (§1.1).

  Args:
    rewards: [B, G] outcome rewards r.
    valid: [B, G] bool.
    eps: ε added to the std (verl 1e-6, TRL 1e-4).
    scale: 'group' divides by the group std; 'batch' by the std of all valid
      rewards in the batch (TRL `scale_rewards='batch'`); 'none' does not
      divide (Dr.GRPO).
    impl: how 'group' and 'none' compute the group statistics
      (`kernels.grouped_advantage` impl: 'auto' | 'pallas' | 'xla' | 'interpret').
  """
  r, v = prep(rewards, valid)
  if scale in ('group', 'none'):
    mode = 'mean_std' if scale == 'group' else 'mean'
    return finish(_grouped(r, v, mode, eps, impl), v)
  if scale != 'batch':
    raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
  _, mu, _ = group_stats(r, v)
  return finish((r - mu) / (all_stats(r, v)[1] + eps), v)


@ADVANTAGES.register('drgrpo', group_relative=True)
def drgrpo(rewards: Array, valid: Array) -> AdvOut:
  """Dr.GRPO: `A_i = r_i − mean_j r_j` (§1.2); pair with a constant-normaliser
  aggregation ('seq-mean-token-sum-norm' or 'dr-grpo')."""
  return grpo(rewards, valid, scale='none')


@ADVANTAGES.register('rloo', group_relative=True)
def rloo(rewards: Array, valid: Array, *, impl: str = 'auto') -> AdvOut:
  """RLOO: `A_i = r_i − 1/(n−1) Σ_{j≠i} r_j = (n r_i − Σ_j r_j)/(n−1)` (§1.3).

  n is the number of valid members; a singleton gets `A_i = r_i`. `impl` as in `grpo`.
  """
  r, v = prep(rewards, valid)
  return finish(_grouped(r, v, 'loo', 0.0, impl), v)


@ADVANTAGES.register('opo', group_relative=True)
def opo(rewards: Array, valid: Array, *, lengths: Array) -> AdvOut:
  """OPO: `A_i = r_i − b`, `b = Σ_j L_j r_j / Σ_j L_j` (§1.7, verl).

  Args:
    rewards: [B, G].
    valid: [B, G] bool.
    lengths: [B, G] response lengths L (required keyword). A singleton group
      (or one whose lengths sum to 0) has b = 0, as in verl.
  """
  r, v = prep(rewards, valid)
  lv = jnp.asarray(lengths, jnp.float32) * v
  n = jnp.sum(v, axis=1, keepdims=True)
  tot = jnp.sum(lv, axis=1, keepdims=True)
  b = jnp.sum(lv * r, axis=1, keepdims=True) / jnp.where(tot > 0, tot, 1.0)
  b = jnp.where((n > 1) & (tot > 0), b, 0.0)
  return finish(r - b, v)


@ADVANTAGES.register('grpo_passk', group_relative=True)
def grpo_passk(rewards: Array, valid: Array, *, eps: float = 1e-6,
               norm_by_std: bool = True) -> AdvOut:
  """GRPO pass@k (verl): only the best member gets `r_max − r_second` (§1.7).

  Optionally divided by `std_j r_j + ε`. Ties go to the lowest index
  (`lax.top_k` order); groups with fewer than 2 valid members get 0
  (verl raises there).
  """
  r, v = prep(rewards, valid)
  if r.shape[1] < 2:
    raise ValueError('grpo_passk needs G >= 2')
  n, _, std = group_stats(r, v)
  top, idx = lax.top_k(jnp.where(v > 0, r, -jnp.inf), 2)
  gap = top[:, :1] - top[:, 1:2]
  if norm_by_std:
    gap = gap / (std + eps)
  gap = jnp.where(n >= 2, gap, 0.0)
  a = jax.nn.one_hot(idx[:, 0], r.shape[1], dtype=jnp.float32) * gap
  return finish(a, v)


@ADVANTAGES.register('mc_grpo', group_relative=True)
def mc_grpo(rewards: Array, valid: Array, *, mad_eps: float = 1e-3,
            rescale_nonzero: bool = False) -> AdvOut:
  """MC-GRPO: median-centred, MAD-scaled, pivot excluded (§1.5).

  Rows are the G+1 rollouts of each prompt. With n valid members sorted by a
  stable ascending argsort, the pivot p is the member at sorted position
  ⌊(n−1)/2⌋ (= G/2 when all G+1 are valid; the lower median for even n, as
  `torch.median`), `med = r_p`, `MAD = median_i |r_i − med| + mad_eps` and
  `A_i = (r_i − med)/MAD` (no std scaling). The pivot gets weight 0; other
  members equal to `med` get A = 0 but keep weight 1.

  Args:
    rewards: [B, G+1].
    valid: [B, G+1] bool.
    mad_eps: added to the MAD (1e-3 in the reference code).
    rescale_nonzero: GSM8K trainer variant: within a group the non-zero
      advantages (|A| > 1e-6) are multiplied by n/#nonzero (n = G+1 when the
      group is full).
  """
  r, v = prep(rewards, valid)
  ok = v > 0
  n = jnp.sum(v, axis=1, keepdims=True)
  k = (jnp.maximum(n, 1.0).astype(jnp.int32) - 1) // 2           # [B, 1]
  order = jnp.argsort(jnp.where(ok, r, jnp.inf), axis=1, stable=True)
  piv = jnp.take_along_axis(order, k, axis=1)                      # [B, 1]
  med = jnp.take_along_axis(r, piv, axis=1)
  dev = jnp.sort(jnp.where(ok, jnp.abs(r - med), jnp.inf), axis=1)
  mad = jnp.take_along_axis(dev, k, axis=1) + mad_eps
  a = (r - med) / mad
  keep = ok & (jnp.arange(r.shape[1])[None, :] != piv)
  if rescale_nonzero:
    nonzero = keep & (jnp.abs(a) > 1e-6)
    cnt = jnp.sum(nonzero, axis=1, keepdims=True)
    a = jnp.where(nonzero, a * n / jnp.maximum(cnt, 1), a)
  w = keep.astype(jnp.float32)
  return finish(a, w)


def _gdpo_pre(r: Array, v: Array, weights: Optional[Sequence[float]],
              eps: float) -> Array:
  """`pre_i = Σ_k w_k (r^k_i − mean r^k)/(std r^k + ε)`; r [B,G,K] -> [B,G]."""
  _, mu, std = group_stats(r, v)
  per = (r - mu) / (std + eps)
  k = r.shape[-1]
  w = jnp.ones((k,), jnp.float32) if weights is None else jnp.asarray(
      weights, jnp.float32)
  if w.shape != (k,):
    raise ValueError(f'gdpo weights must have {k} entries, got {w.shape}')
  return jnp.sum(per * w, axis=-1)


@ADVANTAGES.register('gdpo', group_relative=True, multi_reward=True)
def gdpo(rewards: Array, valid: Array, *,
         weights: Optional[Sequence[float]] = None,
         eps: float = 1e-4) -> AdvOut:
  """GDPO, TRL variant (§1.6): per-reward group norm, weighted sum, batch norm.

  `Â^k_i = (r^k_i − mean r^k)/(std r^k + ε)`, `pre_i = Σ_k w_k Â^k_i`,
  `A_i = (pre_i − mean_batch pre)/(std_batch pre + ε)` over valid rows.

  Args:
    rewards: [B, G, K] reward components.
    valid: [B, G] bool.
    weights: K reward weights w_k (tuple; default all 1).
    eps: ε of both normalisations (TRL uses 1e-4).
  """
  r, v3 = prep(rewards, valid)
  v = v3[..., 0]
  pre = _gdpo_pre(r, v3, weights, eps)
  mu, sd = all_stats(pre, v)
  return finish((pre - mu) / (sd + eps), v)


# ----------------------------------------------------------------------------
# Token-level estimators, [B, G] (+ mask [B, G, T]) -> [B, G, T].


@ADVANTAGES.register('gdpo_verl', group_relative=True, multi_reward=True, token_level=True)
def gdpo_verl(rewards: Array, valid: Array, *, mask: Array,
              weights: Optional[Sequence[float]] = None,
              eps: float = 1e-6) -> AdvOut:
  """GDPO, verl variant (§1.6): `A = masked_whiten(pre on tokens, m)·m`.

  Same `pre` as `gdpo` (ε = 1e-6 in the per-reward step), then whitened over
  all valid tokens. Returns token advantages [B, G, T]; `mask` [B, G, T].
  """
  r, v3 = prep(rewards, valid)
  v = v3[..., 0]
  m = token_mask(mask, v)
  pre = _gdpo_pre(r, v3, weights, eps)
  adv = masked_whiten(token_advantages(pre, m), m) * m
  return lax.stop_gradient(adv), v


def _discounted_returns(tok_r: Array, m: Array, gamma: float) -> Array:
  """`G_t = r_t + γ G_{t+1}`, reset after EOS (verl): carry `G_t·m_t` back."""
  def step(carry, x):
    r_t, m_t = x
    g = r_t + gamma * carry
    return g * m_t, g

  xs = (jnp.moveaxis(tok_r, -1, 0), jnp.moveaxis(m, -1, 0))
  _, g = lax.scan(step, jnp.zeros(tok_r.shape[:-1], tok_r.dtype), xs,
                  reverse=True)
  return jnp.moveaxis(g, 0, -1)


@ADVANTAGES.register('reinforce_pp', token_level=True)
def reinforce_pp(rewards: Array, valid: Array, *, mask: Array,
                 gamma: float = 1.0, token_kl: Optional[Array] = None,
                 kl_coef: float = 0.0) -> AdvOut:
  """REINFORCE++ (§1.4): whitened returns over the whole batch, no baseline.

  Token reward `r_t` = outcome at the last mask token `− β·k1_t`; returns
  `G_t = r_t + γ G_{t+1}`; `A = masked_whiten(G, m)·m` over all valid tokens.

  Args:
    rewards: [B, G] outcome rewards.
    valid: [B, G] bool.
    mask: [B, G, T] response mask m (required keyword).
    gamma: discount γ.
    token_kl: optional [B, G, T] per-token k1 = logp − logp_ref.
    kl_coef: β multiplying `token_kl` in the reward.

  Returns:
    (adv [B, G, T], weight [B, G]).
  """
  r, v = prep(rewards, valid)
  m = token_mask(mask, v)
  t_max = m.shape[-1]
  last = t_max - 1 - jnp.argmax(jnp.flip(m, -1) > 0, axis=-1)
  outcome = jnp.where(jnp.sum(m, -1) > 0, r, 0.0)
  tok_r = jax.nn.one_hot(last, t_max, dtype=jnp.float32) * outcome[..., None]
  if token_kl is not None:
    tok_r = tok_r - kl_coef * jnp.asarray(token_kl, jnp.float32) * m
  ret = _discounted_returns(tok_r, m, gamma)
  return lax.stop_gradient(masked_whiten(ret, m) * m), v


@ADVANTAGES.register('reinforce_pp_baseline', group_relative=True, token_level=True)
def reinforce_pp_baseline(rewards: Array, valid: Array, *,
                          mask: Array) -> AdvOut:
  """REINFORCE++-baseline (§1.4): `A = masked_whiten(s broadcast, m)·m`.

  `s_i = r_i − mean_group r` (singleton: mean 0), broadcast to the tokens of
  `mask` [B, G, T] and whitened over all valid tokens (token-weighted).
  Returns (adv [B, G, T], weight [B, G]).
  """
  r, v = prep(rewards, valid)
  m = token_mask(mask, v)
  _, mu, _ = group_stats(r, v)
  s = token_advantages(r - mu, m)
  return lax.stop_gradient(masked_whiten(s, m) * m), v
