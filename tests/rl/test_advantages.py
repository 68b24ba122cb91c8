"""Advantage estimators vs the worked numbers of docs/algorithms.md §1."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax.rl import advantages as adv_lib
from rl_jax.rl.advantages import base as adv_base
from rl_jax.rl.advantages import group as adv_group

ATOL = 1e-4

# Token-level estimators need a mask; OPO needs lengths; GDPO needs [B,G,K].
_TOKEN_LEVEL = ('reinforce_pp', 'reinforce_pp_baseline', 'gdpo_verl')


def _mask_from_lengths(lengths, t_max):
  lengths = np.asarray(lengths)
  return np.arange(t_max) < lengths[..., None]


def _run(fn, rewards, valid, **options):
  """Runs an estimator under jit (options bound statically, as in training).

  Compiling once is much faster on CPU than op-by-op dispatch.
  """
  return jax.jit(functools.partial(fn, **options))(rewards, valid)


def _call(name, rewards, valid, lengths, t_max=4, *, use_jit=True, **options):
  """Calls estimator `name` with the extra inputs it needs."""
  fn = adv_lib.get(name)
  rewards = jnp.asarray(rewards, jnp.float32)
  if name in ('gdpo', 'gdpo_verl'):
    rewards = jnp.stack([rewards, (rewards > 0.5).astype(jnp.float32)], -1)
  if name in _TOKEN_LEVEL:
    options['mask'] = _mask_from_lengths(lengths, t_max)
  if name == 'opo':
    options['lengths'] = np.asarray(lengths)
  if name == 'v05':  # Per-row (p0, w) of the group's prior: b = 0.5·0.3 + 0.5·r̄.
    options['prior'] = jnp.broadcast_to(jnp.asarray([0.3, 0.5]), rewards.shape[:2] + (2,))
  if use_jit:
    return _run(fn, rewards, jnp.asarray(valid), **options)
  return fn(rewards, jnp.asarray(valid), **options)


def _row(x):
  return jnp.asarray([x], jnp.float32)


def _all_valid(shape):
  return jnp.ones(shape, bool)


# ---------------------------------------------------------------- §1.1 GRPO


def test_grpo_worked_numbers():
  a, w = _run(adv_group.grpo, _row([1, 0, 0, 1]), _all_valid((1, 4)))
  np.testing.assert_allclose(a[0], [0.866, -0.866, -0.866, 0.866], atol=1e-3)
  np.testing.assert_allclose(w, 1.0)
  a, _ = _run(adv_group.grpo, _row([0.7, 0.7, 0.7, 0.7]), _all_valid((1, 4)))
  np.testing.assert_allclose(a, 0.0, atol=1e-6)


def test_grpo_uses_unbiased_std_and_eps():
  r = np.array([[0.3, 1.0, 0.1, 0.8, 0.5]], np.float32)
  for eps in (1e-6, 1e-4):
    a, _ = _run(adv_group.grpo, jnp.asarray(r), _all_valid(r.shape), eps=eps)
    want = (r - r.mean()) / (r.std(ddof=1) + eps)
    np.testing.assert_allclose(a, want, atol=1e-6)


def test_grpo_batch_scale():
  r = np.array([[1, 0, 0, 1], [0.2, 0.4, 0.9, 0.1]], np.float32)
  a, _ = _run(adv_group.grpo, jnp.asarray(r), _all_valid(r.shape), scale='batch')
  want = (r - r.mean(1, keepdims=True)) / (r.std(ddof=1) + 1e-6)
  np.testing.assert_allclose(a, want, atol=1e-5)
  a_none, _ = _run(adv_group.grpo, jnp.asarray(r), _all_valid(r.shape),
                   scale='none')
  np.testing.assert_allclose(a_none, r - r.mean(1, keepdims=True), atol=1e-6)
  with pytest.raises(ValueError):
    _run(adv_group.grpo, jnp.asarray(r), _all_valid(r.shape), scale='tokens')


def test_singleton_group_mean_zero_std_one():
  r = _row([0.7, 5.0, 5.0])
  valid = jnp.asarray([[True, False, False]])
  a, w = _run(adv_group.grpo, r, valid)
  np.testing.assert_allclose(a[0], [0.7 / (1 + 1e-6), 0, 0], atol=1e-6)
  np.testing.assert_allclose(w[0], [1, 0, 0])
  a, _ = _run(adv_group.drgrpo, r, valid)
  np.testing.assert_allclose(a[0], [0.7, 0, 0], atol=1e-6)
  a, _ = _run(adv_group.rloo, r, valid)
  np.testing.assert_allclose(a[0], [0.7, 0, 0], atol=1e-6)


# ------------------------------------------------------- §1.2 / §1.3 / §1.7


def test_drgrpo_worked_numbers():
  a, _ = _run(adv_group.drgrpo, _row([1, 0, 0, 1]), _all_valid((1, 4)))
  np.testing.assert_allclose(a[0], [0.5, -0.5, -0.5, 0.5], atol=ATOL)


def test_rloo_worked_numbers():
  a, _ = _run(adv_group.rloo, _row([1, 0, 0, 1]), _all_valid((1, 4)))
  np.testing.assert_allclose(a[0], [0.6667, -0.6667, -0.6667, 0.6667],
                             atol=ATOL)


def test_rloo_is_leave_one_out():
  r = np.array([[0.3, 1.0, 0.1, 0.8, 0.5]], np.float32)
  a, _ = _run(adv_group.rloo, jnp.asarray(r), _all_valid(r.shape))
  loo = np.array([r[0, i] - np.delete(r[0], i).mean() for i in range(5)])
  np.testing.assert_allclose(a[0], loo, atol=1e-6)


def test_opo_length_weighted_baseline():
  r = np.array([[1, 0, 0, 1]], np.float32)
  lengths = np.array([[2, 1, 3, 2]])
  a, _ = _run(adv_group.opo, jnp.asarray(r), _all_valid((1, 4)),
                     lengths=jnp.asarray(lengths))
  b = (lengths * r).sum() / lengths.sum()
  np.testing.assert_allclose(a[0], r[0] - b, atol=1e-6)


def test_grpo_passk_only_best_member():
  r = np.array([[0.2, 0.9, 0.4, 0.7]], np.float32)
  a, _ = _run(adv_group.grpo_passk, jnp.asarray(r), _all_valid(r.shape))
  want = np.zeros(4)
  want[1] = (0.9 - 0.7) / (r.std(ddof=1) + 1e-6)
  np.testing.assert_allclose(a[0], want, atol=1e-6)
  a, _ = _run(adv_group.grpo_passk, jnp.asarray(r), _all_valid(r.shape),
                            norm_by_std=False)
  np.testing.assert_allclose(a[0], [0, 0.9 - 0.7, 0, 0], atol=1e-6)
  # The best valid member wins, not an invalid one with a higher reward.
  valid = jnp.asarray([[True, False, True, True]])
  a, _ = _run(adv_group.grpo_passk, jnp.asarray(r), valid, norm_by_std=False)
  np.testing.assert_allclose(a[0], [0, 0, 0, 0.7 - 0.4], atol=1e-6)


# ----------------------------------------------------------- §1.4 REINFORCE++


def test_reinforce_pp_worked_numbers():
  r = _row([1, 0])
  mask = jnp.asarray(_mask_from_lengths([[2, 3]], 3))
  a, w = _run(adv_group.reinforce_pp, r, _all_valid((1, 2)), mask=mask)
  assert a.shape == (1, 2, 3)
  np.testing.assert_allclose(a[0, 0], [1.0954, 1.0954, 0.0], atol=ATOL)
  np.testing.assert_allclose(a[0, 1], [-0.7303, -0.7303, -0.7303], atol=ATOL)
  np.testing.assert_allclose(w, 1.0)


def test_reinforce_pp_discounted_returns_and_kl():
  r = np.array([[1.0, 0.5]], np.float32)
  mask = _mask_from_lengths([[3, 4]], 5)
  kl = np.random.default_rng(0).normal(size=(1, 2, 5)).astype(np.float32)
  gamma, beta = 0.9, 0.1
  a, _ = _run(adv_group.reinforce_pp, jnp.asarray(r), _all_valid((1, 2)),
                              mask=jnp.asarray(mask), gamma=gamma,
                              token_kl=jnp.asarray(kl), kl_coef=beta)
  # Reference: python loop over tokens, then verl masked_whiten.
  m = mask.astype(np.float64)
  ret = np.zeros_like(m)
  for i in range(2):
    tok_r = -beta * kl[0, i] * m[0, i]
    tok_r[int(m[0, i].sum()) - 1] += r[0, i]
    g = 0.0
    for t in reversed(range(5)):
      g = tok_r[t] + gamma * g
      ret[0, i, t] = g
      g *= m[0, i, t]
  n = m.sum()
  mu = (ret * m).sum() / n
  var = ((ret - mu) ** 2 * m).sum() / (n - 1)
  want = (ret - mu) / np.sqrt(var + 1e-8) * m
  np.testing.assert_allclose(a, want, atol=1e-5)


def test_reinforce_pp_baseline_worked_numbers():
  r = _row([1, 0, 0, 1])
  mask = jnp.asarray(_mask_from_lengths([[2, 1, 3, 2]], 3))
  a, _ = _run(adv_group.reinforce_pp_baseline, r, _all_valid((1, 4)), mask=mask)
  sign = np.array([1, -1, -1, 1])[:, None]
  np.testing.assert_allclose(a[0], 0.9354 * sign * mask[0], atol=ATOL)


# --------------------------------------------------------------- §1.5 MC-GRPO


def test_mc_grpo_binary_worked_numbers():
  r = _row([1, 0, 0, 1, 1])
  a, w = _run(adv_group.mc_grpo, r, _all_valid((1, 5)))
  np.testing.assert_allclose(a[0], [0, -1000, -1000, 0, 0], rtol=1e-5)
  np.testing.assert_allclose(w[0], [0, 1, 1, 1, 1])
  a, w = _run(adv_group.mc_grpo, r, _all_valid((1, 5)), rescale_nonzero=True)
  np.testing.assert_allclose(a[0], [0, -2500, -2500, 0, 0], rtol=1e-5)
  np.testing.assert_allclose(w[0], [0, 1, 1, 1, 1])


def test_mc_grpo_continuous_worked_numbers():
  r = _row([0.2, 0.9, 0.4, 0.7, 0.1])
  a, w = _run(adv_group.mc_grpo, r, _all_valid((1, 5)))
  np.testing.assert_allclose(a[0], [-0.6645, 1.6611, 0, 0.9967, -0.9967],
                             atol=ATOL)
  np.testing.assert_allclose(w[0], [1, 1, 0, 1, 1])


def test_mc_grpo_even_group_uses_lower_median():
  # Ragged group of 4 valid: the pivot is the lower median (torch.median).
  r = np.array([[0.1, 0.4, 9.0, 0.2, 0.3]], np.float32)
  valid = np.array([[True, True, False, True, True]])
  a, w = _run(adv_group.mc_grpo, jnp.asarray(r), jnp.asarray(valid))
  rv = r[valid]
  med = np.sort(rv)[(rv.size - 1) // 2]
  mad = np.sort(np.abs(rv - med))[(rv.size - 1) // 2] + 1e-3
  want = np.where(valid, (r - med) / mad, 0.0)
  np.testing.assert_allclose(a, want, rtol=1e-5)
  np.testing.assert_allclose(w[0], [1, 1, 0, 0, 1])     # pivot = index 3


def test_mc_grpo_batched_groups_are_independent():
  r = jnp.asarray([[1, 0, 0, 1, 1], [0.2, 0.9, 0.4, 0.7, 0.1]], jnp.float32)
  a, w = _run(adv_group.mc_grpo, r, _all_valid((2, 5)))
  for b in range(2):
    a1, w1 = _run(adv_group.mc_grpo, r[b:b + 1], _all_valid((1, 5)))
    np.testing.assert_allclose(a[b], a1[0], rtol=1e-6)
    np.testing.assert_allclose(w[b], w1[0])


# ------------------------------------------------------------------ §1.6 GDPO


def test_gdpo_worked_numbers_a():
  c = [1, 0, 0, 1]
  f = [1, 1, 0, 1]
  r = jnp.asarray([np.stack([c, f], -1)], jnp.float32)    # [1, 4, 2]
  per_c, _ = _run(adv_group.grpo, _row(c), _all_valid((1, 4)), eps=1e-4)
  per_f, _ = _run(adv_group.grpo, _row(f), _all_valid((1, 4)), eps=1e-4)
  np.testing.assert_allclose(per_c[0], [.866, -.866, -.866, .866], atol=1e-3)
  np.testing.assert_allclose(per_f[0], [.5, .5, -1.5, .5], atol=1e-3)
  np.testing.assert_allclose(per_c[0] + per_f[0],
                             [1.366, -0.366, -2.366, 1.366], atol=1e-3)
  a, w = _run(adv_group.gdpo, r, _all_valid((1, 4)))
  np.testing.assert_allclose(a[0], [0.7691, -0.2061, -1.3320, 0.7691],
                             atol=ATOL)
  np.testing.assert_allclose(w, 1.0)


def test_gdpo_collapse_worked_numbers_b():
  # (format, correct): X = (1,1),(0,0); Y = (1,0),(0,0).
  r = jnp.asarray([[[1, 1], [0, 0]], [[1, 0], [0, 0]]], jnp.float32)
  valid = _all_valid((2, 2))
  summed, _ = _run(adv_group.grpo, r.sum(-1), valid, eps=1e-4)
  np.testing.assert_allclose(summed[0], summed[1], atol=1e-4)
  np.testing.assert_allclose(summed[0], [0.7071, -0.7071], atol=2e-4)
  a, _ = _run(adv_group.gdpo, r, valid, eps=1e-4)
  np.testing.assert_allclose(a[0], [1.0954, -1.0954], atol=ATOL)
  np.testing.assert_allclose(a[1], [0.5477, -0.5477], atol=ATOL)


def test_gdpo_weights():
  rng = np.random.default_rng(1)
  r = rng.uniform(size=(3, 4, 2)).astype(np.float32)
  valid = _all_valid((3, 4))
  a, _ = _run(adv_group.gdpo, jnp.asarray(r), valid, weights=(2.0, 0.5))
  per = [(r[..., k] - r[..., k].mean(1, keepdims=True)) /
         (r[..., k].std(1, ddof=1, keepdims=True) + 1e-4) for k in range(2)]
  pre = 2.0 * per[0] + 0.5 * per[1]
  want = (pre - pre.mean()) / (pre.std(ddof=1) + 1e-4)
  np.testing.assert_allclose(a, want, atol=1e-5)
  with pytest.raises(ValueError):
    _run(adv_group.gdpo, jnp.asarray(r), valid, weights=(1.0, 1.0, 1.0))


def test_gdpo_verl_whitens_over_tokens():
  rng = np.random.default_rng(2)
  r = rng.uniform(size=(2, 3, 2)).astype(np.float32)
  mask = _mask_from_lengths([[1, 2, 3], [3, 3, 1]], 3)
  a, _ = _run(adv_group.gdpo_verl, jnp.asarray(r), _all_valid((2, 3)),
                           mask=jnp.asarray(mask))
  per = [(r[..., k] - r[..., k].mean(1, keepdims=True)) /
         (r[..., k].std(1, ddof=1, keepdims=True) + 1e-6) for k in range(2)]
  tok = np.broadcast_to((per[0] + per[1])[..., None], mask.shape)
  m = mask.astype(np.float64)
  mu = (tok * m).sum() / m.sum()
  var = ((tok - mu) ** 2 * m).sum() / (m.sum() - 1)
  np.testing.assert_allclose(a, (tok - mu) / np.sqrt(var + 1e-8) * m,
                             atol=1e-5)


# ------------------------------------------------------ generic properties

_ALL = sorted(adv_lib.ADVANTAGES.names())


def test_registry_names():
  assert set(_ALL) >= {'grpo', 'drgrpo', 'rloo', 'reinforce_pp',
                       'reinforce_pp_baseline', 'mc_grpo', 'gdpo', 'opo',
                       'grpo_passk'}
  with pytest.raises(KeyError):
    adv_lib.get('nope')


@pytest.mark.parametrize('name', _ALL)
def test_ragged_group_equals_compact_group(name):
  # A group with 3 of 5 valid == the same 3 members as a group of 3.
  r = np.array([[0.9, 123.0, 0.1, 0.4, -7.0]], np.float32)
  lengths = np.array([[2, 4, 3, 1, 4]])
  valid = np.array([[True, False, True, True, False]])
  a_pad, w_pad = _call(name, r, valid, lengths)
  a_cmp, w_cmp = _call(name, r[:, valid[0]], np.ones((1, 3), bool),
                       lengths[:, valid[0]])
  np.testing.assert_allclose(a_pad[:, valid[0]], a_cmp, atol=1e-5)
  np.testing.assert_allclose(w_pad[:, valid[0]], w_cmp)
  # The compact answer is non-trivial, so the comparison has teeth.
  assert float(jnp.max(jnp.abs(a_cmp))) > 1e-3


@pytest.mark.parametrize('name', _ALL)
def test_invalid_rows_weight_zero_and_adv_zero(name):
  r = np.array([[1.0, np.nan, 0.0, 0.5], [0.3, 0.8, np.inf, 0.2]], np.float32)
  lengths = np.array([[2, 3, 1, 4], [4, 1, 2, 3]])
  valid = np.array([[True, False, True, True], [True, True, False, True]])
  a, w = _call(name, r, valid, lengths)
  assert a.dtype == jnp.float32 and w.dtype == jnp.float32
  assert a.shape[:2] == (2, 4) and w.shape == (2, 4)
  assert bool(jnp.all(jnp.isfinite(a)))
  np.testing.assert_array_equal(np.asarray(a)[~valid], 0.0)
  np.testing.assert_array_equal(np.asarray(w)[~valid], 0.0)
  if name != 'mc_grpo':
    np.testing.assert_array_equal(np.asarray(w)[valid], 1.0)


@pytest.mark.parametrize('name', ['grpo', 'mc_grpo', 'reinforce_pp'])
def test_jit_matches_eager(name):
  # Every other test runs under jit; eager dispatch is slow, so sample a few.
  r = np.random.default_rng(3).uniform(size=(2, 5)).astype(np.float32)
  lengths = np.array([[2, 4, 3, 1, 4], [1, 1, 4, 2, 3]])
  valid = np.array([[1, 1, 0, 1, 1], [1, 1, 1, 1, 1]], bool)
  eager = _call(name, r, valid, lengths, use_jit=False)
  jitted = _call(name, r, valid, lengths)
  for x, y in zip(eager, jitted):
    np.testing.assert_allclose(x, y, atol=1e-6)


@pytest.mark.parametrize('name', _ALL)
def test_advantages_carry_no_gradient(name):
  r = jnp.asarray([[0.2, 0.9, 0.4, 0.7, 0.1]], jnp.float32)
  lengths = np.array([[2, 4, 3, 1, 4]])

  def f(r):
    return jnp.sum(_call(name, r, np.ones((1, 5), bool), lengths)[0])

  np.testing.assert_array_equal(jax.grad(f)(r), 0.0)


def test_token_advantages_broadcast():
  a = jnp.asarray([[0.5, -1.0]], jnp.float32)
  mask = jnp.asarray(_mask_from_lengths([[2, 3]], 4))
  tok = adv_base.token_advantages(a, mask)
  assert tok.shape == (1, 2, 4)
  np.testing.assert_allclose(tok, np.asarray(a)[..., None] * np.asarray(mask))
