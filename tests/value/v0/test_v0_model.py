"""V0 (docs/algorithms.md §4.1): the zero-initialised adapter, the in-context head, loss, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax.value.v0 import core as v0_lib
from rl_jax.value.v0 import loss as v0_loss
from rl_jax.value.v0.model import V0Encoder

pytestmark = pytest.mark.usefixtures("fast_compiles")
D, L = 16, 5
CFG = v0_lib.V0Config(num_queries=4, query_dim=6, num_heads=3, mlp_hidden=8, head_dim=8)
# Jitted: eagerly, every primitive of the init and of the encoder would compile on its own.
init_params = jax.jit(v0_lib.init_params, static_argnames=("cfg", "d_model"))


def _encoder(**kw):
  """(init, apply) of a V0Encoder, jitted."""
  enc = V0Encoder(num_queries=4, query_dim=6, num_heads=3, mlp_hidden=8, **kw)
  return jax.jit(enc.init), jax.jit(enc.apply, static_argnames="method")


def _hidden(n, seed=0):
  rng = np.random.default_rng(seed)
  h = rng.normal(size=(n, L, D)).astype(np.float32)
  mask = np.ones((n, L), bool)
  mask[::2, :2] = False  # left padding on every other row
  return h, mask


def test_zero_initialised_delta_gives_the_static_queries_exactly():
  h, mask = _hidden(6)
  init, apply = _encoder()
  params = init(jax.random.key(1), h, mask)["params"]
  q = apply({"params": params}, h, mask, method=V0Encoder.queries)
  np.testing.assert_array_equal(q, np.broadcast_to(params["q_static"], q.shape))
  # ... and the features equal those of an encoder without the adapter (same other weights).
  _, static_apply = _encoder(adapter=False)
  no_mlp = {k: v for k, v in params.items() if not k.startswith("mlp_")}
  np.testing.assert_array_equal(apply({"params": params}, h, mask),
                                static_apply({"params": no_mlp}, h, mask))
  # A non-zero last layer moves the queries (the test above could not pass by accident).
  moved = jax.tree_util.tree_map(lambda x: x + 0.1, params)
  q2 = apply({"params": moved}, h, mask, method=V0Encoder.queries)
  assert not np.allclose(q2, np.broadcast_to(moved["q_static"], q2.shape))


def test_padding_keys_are_masked():
  h, mask = _hidden(4)
  init, apply = _encoder()
  params = init(jax.random.key(1), h, mask)["params"]
  h2 = h.copy()
  h2[~mask] = 100.0  # change only the padded positions
  np.testing.assert_allclose(apply({"params": params}, h, mask),
                             apply({"params": params}, h2, mask), atol=1e-6)


@pytest.mark.parametrize("head", ["kernel", "transformer", "ridge"])
def test_query_identical_to_a_positive_of_255_positives_and_1_negative(head):
  cfg = v0_lib.V0Config(**{**CFG.__dict__, "head": head})
  h, mask = _hidden(256)
  params = init_params(cfg, jax.random.key(0), d_model=D)
  y = np.ones(256, np.float32)
  y[7] = 0.0
  p = v0_lib.predict(cfg, params, h, mask, np.arange(256), y, np.array([3, 100]))
  assert p.shape == (2,) and (p > 0.5).all(), p


def test_kernel_head_follows_its_support():
  """A query identical to a support item is pulled towards that item's rate."""
  h, mask = _hidden(8)
  params = init_params(CFG, jax.random.key(0), d_model=D)
  y = np.array([0, 1, 0, 1, 0, 1, 0, 1], np.float32)
  p = v0_lib.predict(CFG, params, h, mask, np.arange(8), y, np.arange(8))
  assert p[y == 1].min() > p[y == 0].max()


def test_combined_loss_on_hand_computed_numbers():
  logits = jnp.array([[2.0, -1.0, 0.0]])
  y = jnp.array([[1.0, 0.0, 0.5]])
  valid = jnp.ones((1, 3), bool)
  pos, neg, pm = v0_loss.make_pairs(np.array([1.0, 0.0, 0.5]), np.ones(3, bool), 3)
  np.testing.assert_array_equal(pos[pm], [0, 2])   # positives: rate >= 0.5
  np.testing.assert_array_equal(neg[pm], [1, 1])   # the one negative is cycled
  loss, parts = v0_loss.combined_loss(logits, y, valid, pos[None], neg[None], pm[None], 0.25)
  # L_ce = (log(1+e^-2) + log(1+e^-1) + log 2) / 3; L_pair = (log(1+e^-3) + log(1+e^-1)) / 2.
  np.testing.assert_allclose(parts["l_ce"], 0.3777789597, rtol=1e-6)
  np.testing.assert_allclose(parts["l_pair"], 0.1809245195, rtol=1e-6)
  np.testing.assert_allclose(loss, 0.25 * 0.1809245195 + 0.75 * 0.3777789597, rtol=1e-6)


def test_no_pairs_without_both_classes():
  _, _, pm = v0_loss.make_pairs(np.array([1.0, 0.7]), np.ones(2, bool), 4)
  assert not pm.any()
  loss = v0_loss.pair_loss(jnp.zeros((1, 2)), jnp.zeros((1, 4), jnp.int32),
                           jnp.zeros((1, 4), jnp.int32), jnp.asarray(pm)[None])
  assert float(loss) == 0.0


def test_empty_support_set_and_mismatched_shapes_raise_named_errors():
  h, mask = _hidden(4)
  params = init_params(CFG, jax.random.key(0), d_model=D)
  with pytest.raises(v0_lib.SupportSetError, match="empty support set"):
    v0_lib.predict(CFG, params, h, mask, np.zeros(0, int), np.zeros(0), np.array([1]))
  with pytest.raises(v0_lib.SupportSetError, match="empty support set"):
    v0_lib.predict(CFG, params, h, mask, np.arange(2), np.ones(2), np.array([1]),
                   support_mask=np.zeros(2, bool))
  with pytest.raises(v0_lib.SupportSetError, match="support_idx, support_y and support_mask"):
    v0_lib.predict(CFG, params, h, mask, np.arange(3), np.ones(2), np.array([1]))
  with pytest.raises(v0_lib.SupportSetError, match=r"mask \[U, L\]"):
    v0_lib.predict(CFG, params, h, mask[:, :3], np.arange(3), np.ones(3), np.array([1]))
  with pytest.raises(v0_lib.SupportSetError, match="query_idx must index"):
    v0_lib.predict(CFG, params, h, mask, np.arange(3), np.ones(3), np.array([9]))
  with pytest.raises(v0_lib.SupportSetError, match=r"success rates in \[0, 1\]"):
    v0_lib.predict(CFG, params, h, mask, np.arange(3), np.array([0.0, 2.0, 1.0]), np.array([1]))
