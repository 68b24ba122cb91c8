"""Cached decoding equals one full forward pass; config validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models

# Compiling dominates these tiny shapes; the comparisons hold with or without XLA's optimizations.
pytestmark = pytest.mark.usefixtures("fast_compiles")

# Jitted, as the samplers and the trainer call them: op-by-op (eager) dispatch compiles every
# primitive of the model on its own, and took most of this file's time.
_init_params = jax.jit(models.init_params, static_argnums=0)
_forward = jax.jit(models.forward, static_argnums=0)
_prefill = jax.jit(models.prefill, static_argnums=0)
_decode_step = jax.jit(models.decode_step, static_argnums=0)
_hidden_states = jax.jit(models.hidden_states, static_argnums=0)
_hidden_states_and_kv = jax.jit(models.hidden_states_and_kv, static_argnums=0)
_hidden_states_after = jax.jit(models.hidden_states_after, static_argnums=0)


def _tiny(**kw):
  base = dict(vocab_size=37, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
              max_seq_len=32)
  base.update(kw)
  return models.ModelConfig(**base)


@pytest.mark.parametrize("variant", [{}, {"qkv_bias": True, "tie_embeddings": False},
                                     {"qk_norm": True, "mlp_activation": "gelu_tanh",
                                      "scale_embeddings": True, "norm_plus_one": True}])
def test_cached_decode_equals_full_forward_left_padded(variant):
  cfg = _tiny(**variant)
  params = _init_params(cfg, jax.random.key(0))
  # Perturb norm weights so the zero-init (1 + w) norm is exercised too.
  params = jax.tree_util.tree_map_with_path(
      lambda p, x: x + 0.1 if "layernorm" in jax.tree_util.keystr(p) else x, params)
  rng = np.random.default_rng(0)
  b, p, t = 3, 6, 5
  lengths = np.array([6, 3, 1])  # Prompts of different lengths, left-padded to P.
  prompt = rng.integers(1, cfg.vocab_size, (b, p))
  prompt_mask = np.arange(p)[None, :] >= (p - lengths)[:, None]
  prompt = np.where(prompt_mask, prompt, 0)
  completion = rng.integers(1, cfg.vocab_size, (b, t))

  cache = models.init_cache(cfg, b, p + t)
  logits0, cache = _prefill(cfg, params, cache, jnp.asarray(prompt), jnp.asarray(prompt_mask))
  step_logits = [logits0]
  for i in range(t - 1):
    logits, cache = _decode_step(cfg, params, cache, jnp.asarray(completion[:, i]))
    step_logits.append(logits)
  cached = np.stack(step_logits, axis=1)  # [B, T, V]: logits predicting completion[:, i].

  tokens = np.concatenate([prompt, completion], axis=1)
  mask = np.concatenate([prompt_mask, np.ones((b, t), bool)], axis=1)
  full = np.asarray(_forward(cfg, params, jnp.asarray(tokens), jnp.asarray(mask)))
  np.testing.assert_allclose(cached, full[:, p - 1:p + t - 1], atol=1e-5, rtol=0)
  # And each row equals the same sequence run alone without any padding.
  for r in range(b):
    alone = np.concatenate([prompt[r, p - lengths[r]:], completion[r]])[None]
    ref = np.asarray(_forward(cfg, params, jnp.asarray(alone)))
    np.testing.assert_allclose(full[r, p - lengths[r]:], ref[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", [{}, {"qk_norm": True, "qkv_bias": True}])
def test_hidden_states_after_a_prefix_equal_full_forward(variant):
  """A left-padded prefix run once, its keys/values reused for right-padded continuations."""
  cfg = _tiny(**variant)
  params = _init_params(cfg, jax.random.key(1))
  rng = np.random.default_rng(1)
  b, p, t = 3, 5, 4
  pmask = np.arange(p)[None, :] >= (p - np.array([5, 2, 1]))[:, None]
  prefix = np.where(pmask, rng.integers(1, cfg.vocab_size, (b, p)), 0)
  cmask = np.arange(t)[None, :] < np.array([4, 1, 3])[:, None]
  tokens = np.where(cmask, rng.integers(1, cfg.vocab_size, (b, t)), 0)
  head, kv = _hidden_states_and_kv(cfg, params, jnp.asarray(prefix), jnp.asarray(pmask))
  assert kv[0].shape == (cfg.n_layers, b, cfg.n_kv_heads, p, cfg.hd)
  tail = _hidden_states_after(cfg, params, kv, jnp.asarray(pmask), jnp.asarray(tokens),
                                    jnp.asarray(cmask))
  full = _hidden_states(cfg, params, jnp.asarray(np.concatenate([prefix, tokens], 1)),
                              jnp.asarray(np.concatenate([pmask, cmask], 1)))
  # Padding positions hold unused values; compare real tokens only.
  np.testing.assert_allclose(np.where(pmask[..., None], head, 0),
                             np.where(pmask[..., None], np.asarray(full)[:, :p], 0), atol=1e-5)
  np.testing.assert_allclose(np.where(cmask[..., None], tail, 0),
                             np.where(cmask[..., None], np.asarray(full)[:, p:], 0), atol=1e-5)


def test_right_padding_matches_unpadded():
  cfg = _tiny()
  params = _init_params(cfg, jax.random.key(1))
  tokens = jnp.array([[5, 6, 7, 8], [9, 10, 0, 0]])
  mask = jnp.array([[1, 1, 1, 1], [1, 1, 0, 0]])
  out = _forward(cfg, params, tokens, mask)
  ref = _forward(cfg, params, tokens[1:, :2])
  np.testing.assert_allclose(out[1, :2], ref[0], atol=1e-5)


def test_bfloat16_params_float32_logits():
  cfg = _tiny(dtype="bfloat16", param_dtype="bfloat16")
  params = _init_params(cfg, jax.random.key(2))
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree_util.tree_leaves(params))
  logits = _forward(cfg, params, jnp.ones((2, 4), jnp.int32))
  assert logits.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(logits)))


def test_config_errors_name_the_field():
  with pytest.raises(ValueError, match="n_kv_heads"):
    _tiny(n_kv_heads=3)
  with pytest.raises(ValueError, match="mlp_activation"):
    _tiny(mlp_activation="relu")
  with pytest.raises(KeyError, match="unknown model preset 'huge'"):
    models.get_preset("huge", vocab_size=10)
  with pytest.raises(ValueError, match="max_seq_len"):
    models.init_cache(_tiny(), 1, 100)
  assert models.get_preset("tiny", vocab_size=99).vocab_size == 99
