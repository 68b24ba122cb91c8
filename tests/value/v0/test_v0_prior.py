"""V0Prior on a fake history: support refresh, periodic training, sigma0^2, resume equality."""

import jax
import numpy as np
import pytest

from experiments.configs import common
from rl_jax import models
from rl_jax.value.history import RolloutHistory
from rl_jax.value.v0 import episodes as ep
from rl_jax.value.v0 import features, online as prior

pytestmark = pytest.mark.usefixtures("fast_compiles")
N, P, STEPS = 40, 6, 6


def _setup():
  c = common.base().value.v0
  c.update(num_queries=4, mlp_hidden=8, head_dim=8, support_size=16, episode_queries=4,
           episodes_per_step=2, train_every=3, train_steps=2, train_window=4)
  cfg = models.ModelConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1,
                           d_ff=32, max_seq_len=16)
  rng = np.random.default_rng(0)
  prompts = rng.integers(1, 32, (N, P)).astype(np.int32)
  hidden = features.PolicyFeatures(cfg, prompts, np.ones((N, P), bool), chunk=64)
  h = RolloutHistory()
  for s in range(STEPS):
    ids = rng.choice(N, 8, replace=False)
    h.record(s, ids, np.full(8, 4), rng.binomial(4, (ids % 3) / 2))
  return c, hidden, models.init_params(cfg, jax.random.key(0)), h


def test_rate_table_and_support_set():
  h = RolloutHistory()
  h.record(0, [1, 2], [4, 4], [1, 4])
  h.record(1, [2, 3], [4, 2], [0, 2])
  h.record(1, [2], [4], [2])  # an extra round of (2, step 1): summed
  t = ep.rate_table(h)
  assert len(t) == 4
  ids, y = ep.support_set(t, upto_step=1, size=8)
  np.testing.assert_array_equal(ids, [2, 3, 1])  # newest first; prompt 2's step-1 row
  np.testing.assert_allclose(y, [0.25, 1.0, 0.25])
  ids, _ = ep.support_set(t, upto_step=0, size=1)
  np.testing.assert_array_equal(ids, [1])


def test_prior_trains_every_k_steps_and_resume_equals_uninterrupted():
  c, hidden, policy, h = _setup()
  a = prior.V0Prior(c, hidden, seed=0)
  p0, s0 = a.predict(policy, [1, 2])
  np.testing.assert_array_equal(p0, [0.5, 0.5])  # no history yet: no information
  np.testing.assert_array_equal(s0, [prior.NO_INFO_SIGMA0_SQ] * 2)
  before = jax.tree_util.tree_map(np.asarray, a.params)
  logged = {}
  for s in range(STEPS):
    logged[s] = a.update(h.truncate(s + 1), policy, s)
  assert [s for s, m in logged.items() if m] == [2, 5]  # (s + 1) % train_every == 0
  assert {"v0/loss", "v0/l_pair", "v0/l_ce", "v0/sigma0_sq"} <= set(logged[5])
  assert a.sigma0_sq != c.sigma0_sq and a.sigma0_sq >= c.sigma0_sq_floor
  assert not np.allclose(before["head"]["proj"]["kernel"], a.params["head"]["proj"]["kernel"])
  p_a, s_a = a.predict(policy, np.arange(N))
  assert p_a.shape == (N,) and ((p_a > 0) & (p_a < 1)).all() and (s_a == a.sigma0_sq).all()

  # Stopped after step 3 and resumed from its state: the same V0 as the uninterrupted run.
  b = prior.V0Prior(c, hidden, seed=0)
  for s in range(4):
    b.update(h.truncate(s + 1), policy, s)
  arrays, meta = b.state()
  resumed = prior.V0Prior(c, hidden, seed=0)
  resumed.load_state(jax.tree_util.tree_map(np.asarray, arrays), meta)
  for s in range(4, STEPS):
    resumed.update(h.truncate(s + 1), policy, s)
  p_r, _ = resumed.predict(policy, np.arange(N))
  np.testing.assert_array_equal(p_r, p_a)
  assert resumed.sigma0_sq == a.sigma0_sq
