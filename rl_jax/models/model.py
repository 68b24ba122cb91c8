"""Functional model API: pure functions of (cfg, params, ...), jittable with cfg static.

    params = init_params(cfg, rng)
    params = cast_params(cfg, master_params)                        # cfg.param_dtype copy
    logits = forward(cfg, params, tokens, attention_mask)          # [B, T, V] float32
    hidden, kv = hidden_states_and_kv(cfg, params, prefix, prefix_mask)
    hidden = hidden_states_after(cfg, params, kv, prefix_mask, tokens, mask)  # no recompute
    cache = init_cache(cfg, batch, size)
    logits, cache = prefill(cfg, params, cache, prompt, prompt_mask)  # last-position logits
    logits, cache = decode_step(cfg, params, cache, next_tokens)    # [B, V] float32

Left- or right-padded input works: position ids are `cumsum(mask) - 1`, and padding keys are
never attended to.

Every function takes either layer layout of `cfg.scan_layers` (params and cache must match it:
`models.stack_layers` / `unstack_layers` convert params; `init_cache` builds the cache).
"""

from __future__ import annotations

from typing import Any, Optional

import chex
import jax
import jax.numpy as jnp

from rl_jax.models.cache import KVCache, init_cache  # noqa: F401  (re-exported)
from rl_jax.models.config import ModelConfig
from rl_jax.models.transformer import Transformer

Params = Any


def init_params(cfg: ModelConfig, rng: jax.Array) -> Params:
  """Random parameters (a plain nested dict) for `cfg`."""
  tokens = jnp.zeros((1, 2), jnp.int32)
  key_mask = jnp.ones((1, 2, 2), bool)
  return Transformer(cfg).init(rng, tokens, tokens, key_mask, key_positions=tokens)["params"]


def cast_params(cfg: ModelConfig, params: Params) -> Params:
  """`params` with floating leaves in `cfg.param_dtype` (e.g. a bfloat16 copy of float32 master
  weights). Leaves already in that dtype are returned as they are, so a float32 model with float32
  weights runs exactly the program it ran without the cast."""

  def one(x):
    if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != cfg.params_dtype:
      return x.astype(cfg.params_dtype)
    return x

  return jax.tree_util.tree_map(one, params)


def unembedding(cfg: ModelConfig, params: Params) -> jax.Array:
  """The [D, V] unembedding matrix (the transposed embedding when tied)."""
  if cfg.tie_embeddings:
    return params["embed_tokens"]["embedding"].T
  return params["lm_head"]


def logits_from_hidden(cfg: ModelConfig, params: Params, hidden: jax.Array) -> jax.Array:
  """hidden [..., D] -> float32 logits [..., V]."""
  w = unembedding(cfg, params).astype(cfg.compute_dtype)
  logits = jnp.einsum("...d,dv->...v", hidden.astype(cfg.compute_dtype), w,
                      preferred_element_type=jnp.float32)
  return softcap_logits(cfg, logits)


def softcap_logits(cfg: ModelConfig, logits: jax.Array) -> jax.Array:
  """c * tanh(logits / c) with c = `cfg.final_logit_softcap`; `logits` unchanged where c is 0."""
  c = cfg.final_logit_softcap
  return logits if not c else c * jnp.tanh(logits / c)


def _check_tokens(tokens: jax.Array, mask: jax.Array) -> None:
  """Trace-time chex checks at the model's entry points: int tokens [B, L], a mask of that shape."""
  chex.assert_rank(tokens, 2)
  chex.assert_type(tokens, int)
  chex.assert_equal_shape([tokens, mask])


def positions_from_mask(mask: jax.Array) -> jax.Array:
  """Position ids that skip padding: the first real token of every row gets 0."""
  return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1, 0)


def hidden_states(cfg: ModelConfig, params: Params, tokens: jax.Array,
                  attention_mask: Optional[jax.Array] = None) -> jax.Array:
  """Final-normed hidden states [B, T, D] of a full (uncached) forward pass."""
  if attention_mask is None:
    attention_mask = jnp.ones(tokens.shape, bool)
  _check_tokens(tokens, attention_mask)
  attention_mask = attention_mask.astype(bool)
  t = tokens.shape[1]
  causal = jnp.tril(jnp.ones((t, t), bool))
  key_mask = causal[None] & attention_mask[:, None, :]
  positions = positions_from_mask(attention_mask)
  hidden, _ = Transformer(cfg).apply({"params": params}, tokens, positions, key_mask,
                                     key_positions=positions)
  return hidden


def hidden_states_and_kv(cfg: ModelConfig, params: Params, tokens: jax.Array,
                         attention_mask: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
  """`hidden_states`, plus every layer's keys/values [n_layers, B, KVH, T, hd] (a reusable
  prefix for `hidden_states_after`)."""
  _check_tokens(tokens, attention_mask)
  attention_mask = attention_mask.astype(bool)
  t = tokens.shape[1]
  key_mask = jnp.tril(jnp.ones((t, t), bool))[None] & attention_mask[:, None, :]
  positions = positions_from_mask(attention_mask)
  return Transformer(cfg).apply({"params": params}, tokens, positions, key_mask, return_kv=True,
                                key_positions=positions)


def hidden_states_after(cfg: ModelConfig, params: Params, prefix_kv: tuple[jax.Array, jax.Array],
                        prefix_mask: jax.Array, tokens: jax.Array,
                        attention_mask: jax.Array) -> jax.Array:
  """Final-normed hidden states [B, L, D] of `tokens` [B, L] that follow a prefix.

  `prefix_kv` is `hidden_states_and_kv`'s keys/values of B (left-padded) prefixes with mask
  `prefix_mask` [B, P]; the tokens are right-padded (`attention_mask` [B, L]). Equal to a full
  forward pass over prefix ++ tokens, without recomputing the prefix.
  """
  _check_tokens(tokens, attention_mask)
  chex.assert_rank(prefix_mask, 2)
  chex.assert_equal_shape_prefix([prefix_mask, tokens], 1)
  prefix_mask, attention_mask = prefix_mask.astype(bool), attention_mask.astype(bool)
  b, l = tokens.shape
  positions = (prefix_mask.sum(-1, dtype=jnp.int32)[:, None]
               + positions_from_mask(attention_mask))
  key_mask = jnp.concatenate(
      [jnp.broadcast_to(prefix_mask[:, None, :], (b, l, prefix_mask.shape[1])),
       jnp.tril(jnp.ones((l, l), bool))[None] & attention_mask[:, None, :]], axis=-1)
  key_positions = jnp.concatenate([positions_from_mask(prefix_mask), positions], axis=-1)
  hidden, _ = Transformer(cfg).apply({"params": params}, tokens, positions, key_mask,
                                     prefix=prefix_kv, key_positions=key_positions)
  return hidden


def forward(cfg: ModelConfig, params: Params, tokens: jax.Array,
            attention_mask: Optional[jax.Array] = None) -> jax.Array:
  """Float32 logits [B, T, V] for tokens [B, T] (mask: 1 for real tokens, 0 for padding)."""
  return logits_from_hidden(cfg, params, hidden_states(cfg, params, tokens, attention_mask))


def extend(cfg: ModelConfig, params: Params, cache: KVCache, tokens: jax.Array,
           mask: jax.Array) -> tuple[jax.Array, KVCache]:
  """Appends a block of L tokens [B, L] (mask [B, L]) to the cache; returns hidden [B, L, D]."""
  _check_tokens(tokens, mask)
  chex.assert_axis_dimension(tokens, 0, cache.mask.shape[0])
  b, l = tokens.shape
  mask = mask.astype(bool)
  slots = jnp.arange(cache.size)
  if cache.index.ndim:  # Per-row write slots [B] (slot refill, rl_jax.sampling.refill).
    kv_mask = jax.vmap(lambda m, x, i: jax.lax.dynamic_update_slice(m, x, (i,)))(
        cache.mask, mask, cache.index)
    query_slots = cache.index[:, None] + jnp.arange(l)                       # [B, L]
    key_mask = (slots[None, None, :] <= query_slots[:, :, None]) & kv_mask[:, None, :]
  else:
    kv_mask = jax.lax.dynamic_update_slice(cache.mask, mask, (0, cache.index))
    query_slots = cache.index + jnp.arange(l)
    key_mask = (slots[None, :] <= query_slots[:, None])[None] & kv_mask[:, None, :]
  positions = cache.pos[:, None] + positions_from_mask(mask)
  # A slot's token has as position the number of real slots before it (`KVCache` invariant), so
  # the sliding window is measured in positions whatever the slot layout (refill, tree forks).
  key_positions = positions_from_mask(kv_mask) if cfg.sliding_window else None
  hidden, (k, v) = Transformer(cfg).apply({"params": params}, tokens, positions, key_mask, cache,
                                          key_positions=key_positions)
  new_cache = KVCache(k=k, v=v, mask=kv_mask,
                      pos=cache.pos + mask.sum(axis=-1, dtype=jnp.int32),
                      index=cache.index + l)
  return hidden, new_cache


def prefill(cfg: ModelConfig, params: Params, cache: KVCache, tokens: jax.Array,
            mask: jax.Array) -> tuple[jax.Array, KVCache]:
  """Writes left-padded prompts [B, P] into the cache; returns the last position's logits."""
  hidden, cache = extend(cfg, params, cache, tokens, mask)
  return logits_from_hidden(cfg, params, hidden[:, -1]), cache


def decode_step(cfg: ModelConfig, params: Params, cache: KVCache,
                tokens: jax.Array) -> tuple[jax.Array, KVCache]:
  """One decoding step: tokens [B] -> (next-token logits [B, V] float32, cache)."""
  hidden, cache = extend(cfg, params, cache, tokens[:, None], jnp.ones((tokens.shape[0], 1), bool))
  return logits_from_hidden(cfg, params, hidden[:, 0]), cache


def num_params(params: Params) -> int:
  return sum(x.size for x in jax.tree_util.tree_leaves(params))
