"""Process advantages against docs/algorithms.md §5.1-§5.3's worked numbers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax.rl import process_rewards as pr
from rl_jax.value.prm import pav


def _one_row(step_of, values_at_end=None):
  t = len(step_of)
  mask = np.ones((1, 1, t), bool)
  return np.asarray(step_of, np.int32).reshape(1, 1, t), mask


def test_pav_progress_and_dense_advantage_worked_numbers():
  # prefix values [0.2 (prompt), 0.5, 0.4, 1.0] -> A^mu = [0.3, -0.1, 0.6]
  a = pav.progress(jnp.array([0.2]), jnp.array([[0.5, 0.4, 1.0]]), jnp.ones((1, 3), bool))
  np.testing.assert_allclose(np.asarray(a), [[0.3, -0.1, 0.6]], atol=1e-6)
  # three steps of 2, 1, 2 tokens; progress on each step's end token
  step_of, mask = _one_row([0, 0, 1, 2, 2])
  sr = np.zeros((1, 1, 5), np.float32)
  sr[0, 0, [1, 2, 4]] = [0.3, -0.1, 0.6]
  adv, w = pr.pav(jnp.ones((1, 1)), jnp.ones((1, 1), bool), outcome_adv=jnp.full((1, 1), 0.5),
                  step_rewards=sr, step_of=step_of, mask=mask, alpha=2.0)
  np.testing.assert_allclose(np.asarray(adv)[0, 0], [1.1, 1.1, 0.3, 1.7, 1.7], atol=1e-6)
  assert np.asarray(w).tolist() == [[1.0]]


def test_pav_with_alpha_zero_is_the_outcome_advantage():
  rng = np.random.default_rng(0)
  step_of = np.sort(rng.integers(0, 4, (2, 3, 6)), axis=-1).astype(np.int32)
  mask = np.arange(6)[None, None] < rng.integers(1, 7, (2, 3, 1))
  out = rng.normal(size=(2, 3)).astype(np.float32)
  adv, _ = pr.pav(jnp.zeros((2, 3)), jnp.ones((2, 3), bool), outcome_adv=out,
                  step_rewards=rng.normal(size=(2, 3, 6)), step_of=step_of, mask=mask, alpha=0.0)
  np.testing.assert_allclose(np.asarray(adv), np.where(mask, out[..., None], 0.0), atol=1e-6)


def test_best_of_k():
  np.testing.assert_allclose(float(pav.best_of_k(0.3, 4)), 0.7599, atol=1e-6)
  assert float(pav.best_of_k(0.3, 1)) == pytest.approx(0.3)
  with pytest.raises(ValueError, match="prover_k"):
    pav.best_of_k(0.3, 0)


def test_prime_token_rewards_corrected_worked_numbers():
  q = jnp.array([[0.2, -0.4, 1.0]])
  np.testing.assert_allclose(np.asarray(pr.reverse_cumsum(q)), [[0.8, 0.6, 1.0]], atol=1e-6)
  r = pr.prime_token_rewards(q, jnp.ones((1, 3), bool))
  np.testing.assert_allclose(np.asarray(r), [[0.2, -0.4, 1.0]], atol=1e-5)
  # the uncorrected beta-scaled form of the spec's first test: beta * q
  np.testing.assert_allclose(0.05 * np.asarray(q), [[0.01, -0.02, 0.05]], atol=1e-7)
  with pytest.raises(ValueError, match="norm"):
    pr.prime_token_rewards(q, jnp.ones((1, 3), bool), norm="max")


def test_prime_prm_bce_worked_number():
  # beta * sum of log-ratios = 0.04 -> BCE vs label 1 = -log sigmoid(0.04)
  loss = pr.prime_prm_loss(jnp.array([0.8]), jnp.array([1.0]), jnp.array([True]), beta=0.05)
  assert float(loss) == pytest.approx(0.6733, abs=1e-4)


def test_prime_prm_gradient_at_the_start_is_sigmoid_minus_label():
  # Every row starts at z = 0 (pi_phi == pi_ref); there d loss / d z = sigma(0) - r = 0.5 - r,
  # under jit too (the max/|.| form gave -r: zero for an all-failure batch).
  grad = jax.jit(jax.grad(lambda x: pr.prime_prm_loss(x, jnp.array([0.0, 1.0]),
                                                      jnp.array([True, True]), beta=1.0)))
  np.testing.assert_allclose(grad(jnp.zeros(2)), [0.25, -0.25], atol=1e-7)  # / 2 valid rows
  # OPRL's pair loss -log sigma(d): d loss / d d = -1/2 at d = 0 (was 0).
  sums = jnp.zeros((1, 2, 1))  # one group, a success and a failure, one step each
  g = jax.jit(jax.grad(lambda x: pr.oprl_prm_loss(x, jnp.ones((1, 2, 1), bool),
                                                  jnp.array([[1.0, 0.0]]),
                                                  jnp.ones((1, 2), bool), 1.0)))(sums)
  np.testing.assert_allclose(g[0, :, 0], [-0.5, 0.5], atol=1e-7)


def test_prime_advantage_is_rloo_per_source_then_whitened():
  rng = np.random.default_rng(1)
  b, g, t = 2, 4, 5
  mask = np.arange(t)[None, None] < rng.integers(2, t + 1, (b, g, 1))
  q = rng.normal(size=(b, g, t)).astype(np.float32) * mask
  r = rng.integers(0, 2, (b, g)).astype(np.float32)
  valid = np.ones((b, g), bool)
  adv, _ = pr.prime(r, valid, outcome_adv=np.zeros((b, g)), step_rewards=q,
                    step_of=np.zeros((b, g, t), np.int32), mask=mask)
  # numpy reference of PRIME's compute_rloo_advantage_return (n = 4, gamma = 1)
  qn = q / (np.abs(np.flip(np.cumsum(np.flip(q, -1), -1), -1) * mask).max() + 1e-6)
  ret = np.zeros((b, g, t))
  for bi in range(b):
    means = [qn[bi, j][mask[bi, j]].mean() for j in range(g)]
    for i in range(g):
      m = mask[bi, i]
      tok = np.where(m, qn[bi, i] * g / (g - 1) - sum(means) / (g - 1), 0.0)
      last = np.zeros(t)
      last[m.sum() - 1] = r[bi, i] * g / (g - 1) - r[bi].sum() / (g - 1)
      ret[bi, i] = np.flip(np.cumsum(np.flip(tok + last)))
  mu = ret[mask].mean()
  var = ((ret[mask] - mu) ** 2).mean() * mask.sum() / (mask.sum() - 1)
  want = np.where(mask, (ret - mu) / np.sqrt(var + 1e-8), 0.0)
  np.testing.assert_allclose(np.asarray(adv), want, atol=1e-4)


def test_oprl_step_rewards_and_istar_advantage():
  np.testing.assert_allclose(np.asarray(pr.oprl_step_rewards(jnp.array([0.5, -1.0]), 0.1)),
                             [0.05, -0.10], atol=1e-7)
  # two rows, steps [0,0,1] tokens; step rewards 0.05 / -0.10 (row 0) and 0.02 / 0.0 (row 1)
  step_of = np.array([[[0, 0, 1], [0, 0, 1]]], np.int32)
  mask = np.ones((1, 2, 3), bool)
  sr = np.array([[[0.05, 0.0, -0.10], [0.0, 0.02, 0.0]]], np.float32)
  adv, _ = pr.oprl(np.zeros((1, 2)), np.ones((1, 2), bool), outcome_adv=np.array([[1.0, -1.0]]),
                   step_rewards=sr, step_of=step_of, mask=mask, normalize=False)
  # rloo baseline on first-step rewards: row 0 -> 0.02, row 1 -> 0.05
  want = [[1.0 + 0.03, 1.0 + 0.03, 1.0 - 0.12], [-1.0 - 0.03, -1.0 - 0.03, -1.0 - 0.05]]
  np.testing.assert_allclose(np.asarray(adv)[0], want, atol=1e-6)
  adv_n, _ = pr.oprl(np.zeros((1, 2)), np.ones((1, 2), bool), outcome_adv=np.zeros((1, 2)),
                     step_rewards=sr, step_of=step_of, mask=mask)
  assert np.abs(np.asarray(adv_n)).max() <= 2.0 + 1e-5  # steps scaled by the largest |s| (0.1)
  np.testing.assert_allclose(np.asarray(adv_n)[0, 0, 2], (-0.10 - 0.02) / 0.1, atol=1e-4)


def test_oprl_pair_loss():
  # one group: success row scores higher than the failure row by d -> -log sigmoid(d)
  sums = jnp.array([[[1.0, 1.0], [0.0, -2.0]]])
  sm = jnp.ones((1, 2, 2), bool)
  loss = pr.oprl_prm_loss(sums, sm, jnp.array([[1.0, 0.0]]), jnp.ones((1, 2), bool), beta=0.1)
  d = 0.1 * 1.0 - 0.1 * (-1.0)
  assert float(loss) == pytest.approx(np.log1p(np.exp(-d)), abs=1e-6)
  none = pr.oprl_prm_loss(sums, sm, jnp.array([[1.0, 1.0]]), jnp.ones((1, 2), bool))
  assert float(none) == 0.0


def test_registry_names_and_unknown():
  assert set(pr.PROCESS_ADVANTAGES.names()) == {"pav", "prime", "oprl", "oracle"}
  assert pr.PROCESS_ADVANTAGES.get("oracle") is pr.pav  # PAV with a perfect prover
  with pytest.raises(KeyError, match="process advantage"):
    pr.PROCESS_ADVANTAGES.get("prm")
