"""Policy losses, KL, aggregation and DAPO helpers vs docs/algorithms.md §2."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax.rl import losses

ATOL = 1e-4


def _ppo(logp, old_logp, adv, mask, **opts):
  """Jitted `policy_loss` (options bound statically, as in training)."""
  return jax.jit(functools.partial(losses.policy_loss, **opts))(
      logp, old_logp, adv, mask)


def _tok(x):
  return jnp.asarray([x], jnp.float32)                     # [1, T]


# ----------------------------------------------------------------- §2.5 KL


def test_kl_worked_numbers():
  logp, ref = jnp.float32(-1.0), jnp.float32(-2.0)
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, 'k1'), 1.0)
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, 'k2'), 0.5)
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, 'k3'), 0.3679,
                             atol=ATOL)
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, 'abs'), 1.0)
  np.testing.assert_allclose(losses.kl_penalty(ref, logp, 'abs'), 1.0)
  # verl names are aliases.
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, 'low_var_kl'),
                             losses.kl_penalty(logp, ref, 'k3'))
  with pytest.raises(ValueError):
    losses.kl_penalty(logp, ref, 'k4')


def test_kl_k3_clamps():
  x = jnp.asarray([-50.0, -25.0, 25.0, 50.0, 0.0], jnp.float32)
  k3 = losses.kl_penalty(x, jnp.zeros_like(x), 'k3')
  assert bool(jnp.all(jnp.isfinite(k3)))
  np.testing.assert_allclose(k3[:4], 10.0)      # output clamp at +10
  np.testing.assert_allclose(k3[4], 0.0)
  k3_mid = losses.kl_penalty(jnp.float32(0.5), jnp.float32(0.0), 'k3')
  np.testing.assert_allclose(k3_mid, math.exp(-0.5) + 0.5 - 1, rtol=1e-6)


# ---------------------------------------------------------- §2.6 aggregation

_L = jnp.asarray([[1, 1, 0, 0], [2, 2, 2, 2]], jnp.float32)
_M = jnp.asarray([[1, 1, 0, 0], [1, 1, 1, 1]], jnp.float32)


@pytest.mark.parametrize('mode,want', [
    ('token-mean', 1.6667),
    ('seq-mean-token-mean', 1.5),
    ('seq-mean-token-sum', 5.0),
    ('seq-mean-token-sum-norm', 2.5),
    ('dr-grpo', 1.25),
])
def test_aggregate_worked_numbers(mode, want):
  np.testing.assert_allclose(losses.aggregate(_L, _M, mode), want, atol=ATOL)


def test_aggregate_ignores_padding_values_and_empty_rows():
  loss = _L.at[0, 2:].set(jnp.nan)               # garbage on pads
  for mode in losses.AGG_MODES:
    np.testing.assert_allclose(losses.aggregate(loss, _M, mode),
                               losses.aggregate(_L, _M, mode), rtol=1e-6)
  # A row without loss tokens (e.g. the MC-GRPO pivot) leaves N.
  loss3 = jnp.concatenate([_L, jnp.full((1, 4), 9.0)])
  mask3 = jnp.concatenate([_M, jnp.zeros((1, 4))])
  for mode in ('seq-mean-token-mean', 'seq-mean-token-sum', 'dr-grpo'):
    np.testing.assert_allclose(losses.aggregate(loss3, mask3, mode),
                               losses.aggregate(_L, _M, mode), rtol=1e-6)
  with pytest.raises(ValueError):
    losses.aggregate(_L, _M, 'token-sum')


def _micro_setup():
  rng = np.random.default_rng(0)
  n, t = 6, 5
  logp = jnp.asarray(rng.normal(-1.0, 0.3, (n, t)), jnp.float32)
  old = logp + jnp.asarray(rng.normal(0, 0.2, (n, t)), jnp.float32)
  adv = jnp.asarray(rng.normal(size=(n,)), jnp.float32)
  lengths = np.array([5, 1, 3, 4, 2, 5])
  mask = jnp.asarray(np.arange(t) < lengths[:, None], jnp.float32)
  return logp, old, adv, mask


def _objective(logp, old, adv, mask, mode, **norms):
  loss_tok, _ = losses.policy_loss(logp, old, adv, mask, kind='ppo')
  return losses.aggregate(loss_tok, mask, mode, **norms)


@pytest.mark.parametrize('mode', losses.AGG_MODES)
def test_micro_batches_with_global_normalizers_match_full_batch(mode):
  logp, old, adv, mask = _micro_setup()
  norms = dict(num_tokens=jnp.sum(mask), num_seqs=mask.shape[0],
               max_len=mask.shape[1])
  full_fn = jax.jit(jax.value_and_grad(
      functools.partial(_objective, mode=mode)))
  micro_fn = jax.jit(jax.value_and_grad(
      functools.partial(_objective, mode=mode, **norms)))
  full, g_full = full_fn(logp, old, adv, mask)
  parts = [micro_fn(logp[s], old[s], adv[s], mask[s])
           for s in (slice(0, 2), slice(2, 6))]
  np.testing.assert_allclose(sum(p[0] for p in parts), full, rtol=1e-5)
  g_micro = jnp.concatenate([p[1] for p in parts])
  np.testing.assert_allclose(g_micro, g_full, rtol=1e-5, atol=1e-7)
  assert float(jnp.max(jnp.abs(g_full))) > 1e-3


def test_micro_batches_with_local_normalizers_differ():
  # The equivalence above needs the global counts: local ones break it.
  logp, old, adv, mask = _micro_setup()
  obj = jax.jit(functools.partial(_objective, mode='token-mean'))
  full = obj(logp, old, adv, mask)
  local = sum(obj(logp[s], old[s], adv[s], mask[s])
              for s in (slice(0, 2), slice(2, 6)))
  assert abs(float(local) - float(full)) > 1e-3


# ----------------------------------------------------------------- §2.1 PPO


def _loss_and_grad(ratio, adv, **opts):
  """ℓ and ∂ℓ/∂logp for one token with ρ = ratio."""
  old = jnp.zeros((1, 1), jnp.float32)
  logp = jnp.full((1, 1), math.log(ratio), jnp.float32)
  mask = jnp.ones((1, 1), jnp.float32)
  a = jnp.full((1,), adv, jnp.float32)

  def f(lp):
    return losses.policy_loss(lp, old, a, mask, **opts)[0][0, 0]

  return jax.jit(jax.value_and_grad(f))(logp)


def test_ppo_clip_worked_numbers_and_zero_gradient():
  loss, grad = _loss_and_grad(1.5, 1.0)
  np.testing.assert_allclose(loss, -1.2, atol=ATOL)
  np.testing.assert_allclose(grad, 0.0)
  # Inside the trust region the gradient is -A·ρ.
  loss, grad = _loss_and_grad(1.1, 1.0)
  np.testing.assert_allclose(loss, -1.1, atol=1e-5)
  np.testing.assert_allclose(grad[0, 0], -1.1, atol=1e-5)


def test_ppo_dual_clip_worked_numbers():
  loss, grad = _loss_and_grad(5.0, -1.0, clip_ratio_c=3.0)
  np.testing.assert_allclose(loss, 3.0, atol=ATOL)
  np.testing.assert_allclose(grad, 0.0)
  loss, grad = _loss_and_grad(5.0, -1.0, clip_ratio_c=None)    # ℓ^clip = ℓ¹
  np.testing.assert_allclose(loss, 5.0, atol=ATOL)
  np.testing.assert_allclose(grad[0, 0], 5.0, rtol=1e-5)
  with pytest.raises(ValueError):
    _loss_and_grad(5.0, -1.0, clip_ratio_c=0.5)


def test_dapo_clip_higher_worked_numbers():
  loss, _ = _loss_and_grad(1.25, 1.0, clip_high=0.28)
  np.testing.assert_allclose(loss, -1.25, atol=ATOL)
  loss, grad = _loss_and_grad(1.3, 1.0, clip_high=0.28)
  np.testing.assert_allclose(loss, -1.28, atol=ATOL)
  np.testing.assert_allclose(grad, 0.0)


def test_ppo_matches_numpy_and_metrics():
  logp, old, adv, mask = _micro_setup()
  loss, metrics = _ppo(logp, old, adv, mask)
  d = np.clip(np.asarray(logp - old), -20, 20)
  rho, a, m = np.exp(d), np.asarray(adv)[:, None], np.asarray(mask)
  l1, l2 = -a * rho, -a * np.clip(rho, 0.8, 1.2)
  want = np.maximum(l1, l2)
  want = np.where(a < 0, np.minimum(want, -a * 3.0), want) * m
  np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(metrics['clipfrac'],
                             ((l2 > l1) * m).sum() / m.sum(), rtol=1e-5)
  np.testing.assert_allclose(metrics['ppo_kl'], (-d * m).sum() / m.sum(),
                             rtol=1e-5)
  assert 0.0 < float(metrics['clipfrac']) < 1.0


def test_log_ratio_clamped_before_exp():
  loss, metrics = _ppo(_tok([0.0]), _tok([-100.0]), jnp.asarray([-1.0]),
                       _tok([1.0]), clip_ratio_c=None)
  np.testing.assert_allclose(loss[0, 0], math.exp(20.0), rtol=1e-5)
  np.testing.assert_allclose(metrics['ppo_kl'], -20.0)


# ---------------------------------------------------------------- §2.3 GSPO


def _gspo_grad(delta, adv, mask, **opts):
  old = jnp.zeros_like(delta)
  opts = dict(kind='gspo', **opts)

  def f(lp):
    loss_tok, _ = losses.policy_loss(lp, old, adv, mask, **opts)
    agg = losses.FORCED_AGGREGATION['gspo']
    return losses.aggregate(loss_tok, mask, agg), loss_tok

  return jax.jit(jax.value_and_grad(f, has_aux=True))(delta)


def test_gspo_worked_numbers_clipped_gradient_is_zero():
  delta = _tok([0.1, -0.3, 0.2, 0.4])
  mask = jnp.ones_like(delta)
  (_, loss_tok), grad = _gspo_grad(delta, jnp.asarray([1.0]), mask,
                                   clip_low=3e-4, clip_high=4e-4)
  np.testing.assert_allclose(math.exp(0.1), 1.1052, atol=ATOL)
  np.testing.assert_allclose(loss_tok[0], -1.0004, atol=1e-6)
  np.testing.assert_allclose(grad, 0.0)


def test_gspo_unclipped_gradient_and_padding():
  delta = _tok([0.1, -0.3, 0.2, 0.4, 7.0])     # last token is padding
  mask = _tok([1, 1, 1, 1, 0])
  (_, loss_tok), grad = _gspo_grad(delta, jnp.asarray([2.0]), mask,
                                   clip_low=0.5, clip_high=0.5)
  s = math.exp(0.1)                             # pads do not enter L_i
  np.testing.assert_allclose(loss_tok[0, :4], -2.0 * s, rtol=1e-5)
  # seq-mean-token-mean: ∂/∂logp_t = -A·s/L on every real token, 0 on pads.
  np.testing.assert_allclose(grad[0], [-2.0 * s / 4] * 4 + [0.0], rtol=1e-5)


# -------------------------------------------------------------- §2.4 MinPRO


def test_minpro_weight_worked_numbers():
  logp = jnp.log(_tok([1.0, 0.5, 2.0, 1.0]))
  w = losses.minpro_weight(logp, jnp.zeros_like(logp), jnp.ones_like(logp))
  np.testing.assert_allclose(w[0], [1, 1, 0.5, 0.5], atol=1e-6)


@pytest.mark.parametrize('inclusive', [False, True])
@pytest.mark.parametrize('cap', [False, True])
def test_minpro_weight_variants_match_numpy(inclusive, cap):
  rho = np.array([[2.0, 3.0, 0.7, 1.5, 0.4, 0.05],
                  [1.2, 0.9, 1.1, 0.3, 0.2, 0.1]], np.float32)
  mask = np.array([[1, 1, 1, 0, 1, 0], [1, 1, 1, 1, 1, 1]], np.float32)
  w = losses.minpro_weight(jnp.log(jnp.asarray(rho)), jnp.zeros(rho.shape),
                           jnp.asarray(mask), inclusive=inclusive, cap=cap)
  want = np.ones_like(rho)
  for b in range(2):
    run = np.inf
    for t in range(rho.shape[1]):
      if inclusive and mask[b, t]:
        run = min(run, rho[b, t])
      want[b, t] = 1.0 if np.isinf(run) else run
      if not inclusive and mask[b, t]:
        run = min(run, rho[b, t])
  if cap:
    want = np.minimum(want, 1.0)
  np.testing.assert_allclose(w, want, rtol=1e-6)


def test_minpro_loss_is_weighted_ppo():
  logp, old, adv, mask = _micro_setup()
  behav = old + 0.3 * jnp.sin(jnp.arange(old.size, dtype=jnp.float32)
                              ).reshape(old.shape)
  opts = dict(clip_high=0.28)
  ppo, _ = _ppo(logp, old, adv, mask, **opts)
  for ref, extra in ((old, {}), (behav, {'behav_logp': behav})):
    mp, metrics = _ppo(logp, old, adv, mask, kind='minpro_reconstructed',
                       **opts, **extra)
    w = losses.minpro_weight(logp, ref, mask)
    np.testing.assert_allclose(mp, w * ppo, rtol=1e-6)
    assert 'minpro_weight' in metrics
  assert float(jnp.min(jnp.where(mask > 0, w, 1.0))) < 1.0

  # The weight is a constant: ∂ℓ/∂logp = w · ∂ℓ^ppo/∂logp.
  def total(lp, kind):
    loss, _ = losses.policy_loss(lp, old, adv, mask, kind=kind, **opts)
    return jnp.sum(loss)

  grad = jax.jit(jax.grad(total), static_argnums=1)
  g_mp = grad(logp, 'minpro_reconstructed')
  g_ppo = grad(logp, 'ppo')
  w = losses.minpro_weight(logp, old, mask)
  np.testing.assert_allclose(g_mp, w * g_ppo, rtol=1e-5, atol=1e-7)


def test_policy_loss_registry():
  assert set(losses.LOSSES.names()) == {'ppo', 'gspo', 'minpro_reconstructed'}
  with pytest.raises(KeyError):
    losses.policy_loss(_tok([0.0]), _tok([0.0]), jnp.ones(1), _tok([1.0]),
                       kind='trpo')


# ------------------------------------------------------------------ §2.2 DAPO


def test_dapo_overlong_worked_numbers():
  pen = losses.dapo_overlong_penalty(jnp.asarray([16, 18, 21]), 20, 4)
  np.testing.assert_allclose(pen, [0.0, -0.5, -1.0], atol=1e-6)
  pen = losses.dapo_overlong_penalty(jnp.asarray([16, 18, 21]), 20, 4,
                                     factor=0.5)
  np.testing.assert_allclose(pen, [0.0, -0.25, -0.5], atol=1e-6)


def test_dapo_dynamic_sampling_worked_numbers():
  r = jnp.asarray([[1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]], jnp.float32)
  inf = losses.dapo_informative_groups(r, jnp.ones(r.shape, bool))
  np.testing.assert_array_equal(inf, [False, True, False])
  idx, valid = losses.select_informative(inf, 2)
  assert int(idx[0]) == 1
  np.testing.assert_array_equal(valid, [True, False])


def test_dapo_informative_uses_only_valid_members():
  r = jnp.asarray([[1, 0, 1, 1], [0.5, 0.2, 0, 0], [3, 0, 0, 0]], jnp.float32)
  valid = jnp.asarray([[1, 0, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], bool)
  inf = losses.dapo_informative_groups(r, valid)
  np.testing.assert_array_equal(inf, [False, True, False])
  inf = losses.dapo_informative_groups(r, valid, keep_singletons=True)
  np.testing.assert_array_equal(inf, [False, True, True])


def test_select_informative_keeps_order_and_jits():
  inf = jnp.asarray([False, True, False, True, True, False])
  idx, valid = jax.jit(losses.select_informative, static_argnums=1)(inf, 4)
  np.testing.assert_array_equal(idx[:3], [1, 3, 4])
  np.testing.assert_array_equal(valid, [True, True, True, False])
  with pytest.raises(ValueError):
    losses.select_informative(inf, 7)
