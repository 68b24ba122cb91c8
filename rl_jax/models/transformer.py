"""Flax Linen decoder: RMSNorm, RoPE, grouped-query attention (optionally sliding-window on some
layers), gated MLP.

`Transformer.__call__` serves both a full forward pass (no cache) and cached decoding (a block of
L new tokens written into an explicit `KVCache` at slot `cache.index`). Parameter names follow the
Hugging Face Llama layout (`q_proj`, `gate_proj`, `input_layernorm`, ...) so import/export is a
rename plus a transpose.
"""

from __future__ import annotations

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rl_jax.models.cache import KVCache
from rl_jax.models.config import REMAT_POLICIES, ModelConfig
from rl_jax.models.rope import apply_rope, rope_frequencies

_NEG_INF = -1e30


class RMSNorm(nn.Module):
  """y = x / rms(x) * w (or * (1 + w) for Gemma), computed in float32."""

  eps: float
  plus_one: bool = False
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    init = nn.initializers.zeros if self.plus_one else nn.initializers.ones
    w = self.param("weight", init, (x.shape[-1],), self.param_dtype).astype(jnp.float32)
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return (y * (1.0 + w if self.plus_one else w)).astype(x.dtype)


def _dense(cfg: ModelConfig, features: int, name: str, bias: bool = False) -> nn.Dense:
  return nn.Dense(features, use_bias=bias, dtype=cfg.compute_dtype,
                  param_dtype=cfg.params_dtype, name=name,
                  kernel_init=nn.initializers.normal(0.02))


class Attention(nn.Module):
  """Grouped-query self-attention over the new tokens and (optionally) a cached prefix."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x, positions, key_mask, kv, write_index, prefix=None, layer=None,
               local_mask=None, local=False):
    """x: [B, L, D]; key_mask: [B, L, S] (see Transformer).

    local_mask: None, or key_mask restricted to the sliding window (`ModelConfig.sliding_window`);
    `local` (a Python bool, or a traced [] bool under a layer scan) says whether this layer is a
    local one: it then reads local_mask and the local RoPE frequencies.

    prefix: None, or this layer's read-only (k, v), each [B, KVH, P, hd], of earlier tokens: the
    keys are the prefix followed by the L new ones (S = P + L).

    kv: None (no cache), or this layer's cached (k, v), each [B, KVH, S, hd]: the new keys and
    values are written in place at slot `write_index` ([] shared by all rows, or [B] per row).
    Each layer has its own buffers, so a decode step neither copies, slices nor re-stacks the
    cache. With scanned layers, kv is instead every layer's stacked (k, v), each
    [B, n_layers, KVH, S, hd], and `layer` the index of this one: the new keys and values are
    written in place at (layer, slot) and attention reads that layer's slice.

    Keys and values are laid out [B, KVH, S, hd] (heads before slots), so both attention
    matmuls batch over (B, KVH) and the values are read as stored. With [B, S, KVH, hd], XLA on
    CPU re-laid-out both caches of every layer each decode step; it still does so for the keys
    (to [.., hd, S] for the score matmul). Measured on a SmolLM2-shaped decode step, 1 thread:
    128 rows x 140 slots 507-541 -> 401-477 ms; 32 rows x 44 slots unchanged (~120-165 ms,
    within noise).
    """
    cfg = self.cfg
    b, l, _ = x.shape
    q = _dense(cfg, cfg.n_heads * cfg.hd, "q_proj", cfg.qkv_bias)(x)
    k = _dense(cfg, cfg.n_kv_heads * cfg.hd, "k_proj", cfg.qkv_bias)(x)
    v = _dense(cfg, cfg.n_kv_heads * cfg.hd, "v_proj", cfg.qkv_bias)(x)
    q = q.reshape(b, l, cfg.n_heads, cfg.hd)
    k = k.reshape(b, l, cfg.n_kv_heads, cfg.hd)
    v = v.reshape(b, l, cfg.n_kv_heads, cfg.hd).transpose(0, 2, 1, 3)  # [B, KVH, L, hd]
    if cfg.qk_norm:
      q = RMSNorm(cfg.norm_eps, cfg.norm_plus_one, cfg.params_dtype, name="q_norm")(q)
      k = RMSNorm(cfg.norm_eps, cfg.norm_plus_one, cfg.params_dtype, name="k_norm")(k)
    inv_freq = rope_frequencies(cfg)
    if cfg.rope_local_theta:
      inv_freq = _pick(local, rope_frequencies(cfg, local=True), inv_freq)
    if local_mask is not None:
      key_mask = _pick(local, local_mask, key_mask)
    q = apply_rope(q, positions, inv_freq)
    k = apply_rope(k, positions, inv_freq).transpose(0, 2, 1, 3)      # [B, KVH, L, hd]
    if kv is not None:
      new_kv = tuple(_write(buf, new, write_index, layer) for buf, new in zip(kv, (k, v)))
      k_all, v_all = (buf if layer is None
                      else jax.lax.dynamic_index_in_dim(buf, layer, axis=1, keepdims=False)
                      for buf in new_kv)
    elif prefix is not None:
      k_all = jnp.concatenate([prefix[0].astype(k.dtype), k], axis=2)
      v_all = jnp.concatenate([prefix[1].astype(v.dtype), v], axis=2)
      new_kv = None
    else:
      k_all, v_all, new_kv = k, v, None
    groups = cfg.n_heads // cfg.n_kv_heads
    qg = q.reshape(b, l, cfg.n_kv_heads, groups, cfg.hd)
    scores = jnp.einsum("blkgd,bksd->bkgls", qg, k_all.astype(qg.dtype),
                        preferred_element_type=jnp.float32) * cfg.attn_scale
    scores = jnp.where(key_mask[:, None, None, :, :], scores, _NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(cfg.compute_dtype)
    out = jnp.einsum("bkgls,bksd->blkgd", probs, v_all.astype(cfg.compute_dtype))
    out = out.reshape(b, l, cfg.n_heads * cfg.hd)
    return _dense(cfg, cfg.d_model, "o_proj")(out), new_kv, (k, v)


def _pick(local, if_local: jax.Array, if_global: jax.Array) -> jax.Array:
  """`if_local` for a local layer, else `if_global`; `local` is a Python bool or a traced []."""
  if isinstance(local, bool):
    return if_local if local else if_global
  return jnp.where(local, jnp.asarray(if_local), jnp.asarray(if_global))


def _write(buf: jax.Array, new: jax.Array, write_index: jax.Array,
           layer: Optional[jax.Array]) -> jax.Array:
  """`buf` with the new keys or values `new` [B, KVH, L, hd] written at slot `write_index` ([]
  or per row [B]); `buf` is one layer's [B, KVH, S, hd], or with `layer` the stacked
  [B, n_layers, KVH, S, hd]."""
  new = new.astype(buf.dtype)
  if layer is not None:  # Stacked (scanned layers): write at (layer, slot).
    new = new[:, None]
  lead = () if layer is None else (layer,)
  if jnp.ndim(write_index):  # Per-row write slots [B] (slot refill).
    return jax.vmap(lambda b, n, i: jax.lax.dynamic_update_slice(b, n, (*lead, 0, i, 0)))(
        buf, new, write_index)
  return jax.lax.dynamic_update_slice(buf, new, (0, *lead, 0, write_index, 0))


class MLP(nn.Module):
  """Gated MLP: down(act(gate(x)) * up(x)); SwiGLU or GeGLU."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x):
    cfg = self.cfg
    gate = _dense(cfg, cfg.d_ff, "gate_proj")(x)
    up = _dense(cfg, cfg.d_ff, "up_proj")(x)
    act = jax.nn.silu(gate) if cfg.mlp_activation == "silu" else jax.nn.gelu(gate, approximate=True)
    return _dense(cfg, cfg.d_model, "down_proj")(act * up)


class Block(nn.Module):
  """One decoder layer: pre-norm attention and MLP residual branches; with `cfg.post_norms`
  each branch's output is normed too (Gemma 3's four norms)."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x, positions, key_mask, kv, write_index, prefix=None, layer=None,
               local_mask=None, local=False):
    cfg = self.cfg
    norm = lambda name: RMSNorm(cfg.norm_eps, cfg.norm_plus_one, cfg.params_dtype, name=name)
    h = norm("input_layernorm")(x)
    a, new_kv, own_kv = Attention(cfg, name="self_attn")(h, positions, key_mask, kv, write_index,
                                                         prefix, layer, local_mask, local)
    if cfg.post_norms:
      x = x + norm("post_attention_layernorm")(a)
      m = MLP(cfg, name="mlp")(norm("pre_feedforward_layernorm")(x))
      return x + norm("post_feedforward_layernorm")(m), new_kv, own_kv
    x = x + a
    h = norm("post_attention_layernorm")(x)
    return x + MLP(cfg, name="mlp")(h), new_kv, own_kv


class Transformer(nn.Module):
  """Token ids -> final-normed hidden states [B, L, D] (unembedding lives in `model.py`)."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, tokens: jax.Array, positions: jax.Array, key_mask: jax.Array,
               cache: Optional[KVCache] = None, prefix=None, return_kv: bool = False,
               key_positions: Optional[jax.Array] = None):
    """Runs the decoder on `tokens` [B, L].

    Args:
      tokens: [B, L] int32 token ids.
      positions: [B, L] int32 RoPE positions.
      key_mask: [B, L, S] bool: query l may attend to key slot s (S = L without a cache).
      cache: if given, the L new keys/values are written at slot `cache.index` and attention
        runs over all S cache slots.
      prefix: (without a cache) read-only (k, v) stacks [n_layers, B, KVH, P, hd] of P earlier
        tokens, e.g. a prompt shared by several rows; key_mask is then [B, L, P + L].
      return_kv: (without a cache) return the L tokens' own (k, v) stacks instead of None.
      key_positions: [B, S] int32 position of the token in each key slot (where key_mask
        allows it); required with `cfg.sliding_window`, whose local layers also drop the keys
        with positions[b, l] - key_positions[b, s] >= sliding_window.

    With `cfg.scan_layers` the blocks run under `nn.scan` over parameters stacked on a leading
    layer axis (`layers/...`), else unrolled (`layers_0/...` .. `layers_{L-1}/...`).

    Returns:
      (hidden [B, L, D] in the compute dtype, then: the updated cache's (k, v) (per-layer tuples,
      or stacked arrays with scanned layers);
      without a cache, the tokens' own (k, v) stacks when return_kv, else None).
    """
    cfg = self.cfg
    embed = nn.Embed(cfg.vocab_size, cfg.d_model, dtype=cfg.compute_dtype,
                     param_dtype=cfg.params_dtype, name="embed_tokens",
                     embedding_init=nn.initializers.normal(0.02))
    x = embed(tokens)
    if cfg.scale_embeddings:
      x = x * jnp.asarray(cfg.d_model ** 0.5, x.dtype)
    write_index = None if cache is None else cache.index
    local_mask = None
    if cfg.sliding_window:
      if key_positions is None:
        raise ValueError("ModelConfig.sliding_window needs the key slots' positions "
                         "(Transformer key_positions)")
      behind = positions[:, :, None] - key_positions[:, None, :]
      local_mask = key_mask & (behind < cfg.sliding_window)
    if cfg.scan_layers:
      x, new_kv, own_kv = self._scanned(x, positions, key_mask, cache, write_index, prefix,
                                        return_kv, local_mask)
    else:
      x, new_kv, own_kv = self._unrolled(x, positions, key_mask, cache, write_index, prefix,
                                         return_kv, local_mask)
    x = RMSNorm(cfg.norm_eps, cfg.norm_plus_one, cfg.params_dtype, name="norm")(x)
    if not cfg.tie_embeddings:  # Otherwise the transposed embedding is the unembedding.
      self.param("lm_head", nn.initializers.normal(0.02), (cfg.d_model, cfg.vocab_size),
                 cfg.params_dtype)
    if cache is not None:
      return x, new_kv
    return x, own_kv if return_kv else None

  def _unrolled(self, x, positions, key_mask, cache, write_index, prefix, return_kv,
                local_mask):
    """n_layers blocks `layers_0` .. `layers_{L-1}`, each traced and compiled on its own."""
    cfg = self.cfg
    block = Block if cfg.remat == "none" else nn.remat(Block, policy=REMAT_POLICIES[cfg.remat])
    new_k, new_v, own_k, own_v = [], [], [], []
    for i in range(cfg.n_layers):
      kv = None if cache is None else (cache.k[i], cache.v[i])
      layer_prefix = None if prefix is None else (prefix[0][i], prefix[1][i])
      x, kv, own = block(cfg, name=f"layers_{i}")(x, positions, key_mask, kv, write_index,
                                                  layer_prefix, None, local_mask,
                                                  cfg.is_local(i))
      if kv is not None:
        new_k.append(kv[0])
        new_v.append(kv[1])
      own_k.append(own[0])
      own_v.append(own[1])
    own_kv = (jnp.stack(own_k), jnp.stack(own_v)) if return_kv else None
    return x, (tuple(new_k), tuple(new_v)), own_kv

  def _scanned(self, x, positions, key_mask, cache, write_index, prefix, return_kv,
               local_mask):
    """One block `layers` (parameters [n_layers, ...]) under `nn.scan`: the carry is the
    residual stream and the stacked cache (written in place, layer by layer); the scanned inputs
    are the layer index and the prefix's layer; the outputs the tokens' own keys/values (only
    when asked for: under remat a scan output is kept for the backward pass)."""
    cfg = self.cfg
    block = Block
    if cfg.remat != "none":  # prevent_cse is not needed under scan (and costs fusions).
      block = nn.remat(Block, policy=REMAT_POLICIES[cfg.remat], prevent_cse=False)

    def step(layer_block, carry, xs):
      y, kv = carry
      layer, layer_prefix, local = xs
      y, kv, own = layer_block(y, positions, key_mask, kv, write_index, layer_prefix, layer,
                               local_mask, False if local is None else local)
      return (y, kv), (own if return_kv else None)

    scan = nn.scan(step, variable_axes={"params": 0}, split_rngs={"params": True},
                   length=cfg.n_layers)
    kv = None if cache is None else (cache.k, cache.v)
    # Each layer's kind, scanned beside it (None without local layers: the program is unchanged).
    local = (jnp.asarray(cfg.local_layers)
             if cfg.sliding_window or cfg.rope_local_theta else None)
    (x, kv), own = scan(block(cfg, name="layers"), (x, kv),
                        (jnp.arange(cfg.n_layers), prefix, local))
    return x, kv, own
