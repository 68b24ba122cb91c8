"""The opening and the fork every sampler shares, on batch-sharded rows (`parallel.shard_batch`).

  open_rows      prefill the B prompts once into a fresh cache, then give each prompt `copies`
                 rows (row b·copies + j holds prompt b): next-token logits and the cache.
  fork_rows      row i takes a copy of row src[i] of the cache and of any row-leading arrays.
  write_token    record token t of every row in its [R, T] output buffers (ended rows: padding).
  batch_buffers  fresh [R, T] output buffers.

Invariants: the caches and buffers these return are constrained to the batch axes ('data',
'fsdp') of the context mesh (a no-op without one, or where the rows do not divide them); a
constraint moves rows between devices and changes no value, so on one device every sampler
computes bit for bit what it computed with its own copy of this code.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rl_jax import models, parallel


def open_rows(cfg: models.ModelConfig, params, prompt: jax.Array, prompt_mask: jax.Array, *,
              copies: int, cache_size: int) -> tuple[jax.Array, models.KVCache]:
  """Prefills prompts [B, P] (left-padded) once into a cache of `cache_size` slots, then fans out.

  Returns (logits [B·copies, V], cache [B·copies rows]): row b·copies + j starts from prompt b's
  prefill (`copies` = 1 returns the prefill itself, without a gather).
  """
  b = prompt.shape[0]
  cache = parallel.shard_batch(models.init_cache(cfg, b, cache_size))
  logits, cache = models.prefill(cfg, params, cache, prompt, prompt_mask)
  if copies == 1:
    return logits, cache
  rows = jnp.repeat(jnp.arange(b), copies)
  return fork_rows(rows, cache, logits)


def fork_rows(src: jax.Array, cache: models.KVCache, rows: Any,
              new: jax.Array | None = None) -> tuple[Any, models.KVCache]:
  """Row i of the cache and of every array in the pytree `rows` (leading axis R) becomes a copy
  of row src[i] [R]. Returns (rows, cache), batch-sharded.

  With `new` [R] bool (the rows that receive a fork; src[i] = i elsewhere) the cache, the
  costliest copy, is gathered only when some row is new; the values are the same either way.
  """
  if new is None:
    cache = cache.take_rows(src)
  else:
    cache = jax.lax.cond(new.any(), lambda x: x.take_rows(src), lambda x: x, cache)
  return parallel.shard_batch((jax.tree_util.tree_map(lambda x: x[src], rows), cache))


def write_token(bufs: tuple, t, tok: jax.Array, live: jax.Array, logp: jax.Array,
                entropy: jax.Array | None = None, *, pad_id: int) -> tuple[jax.Array, tuple]:
  """Writes column t of bufs = (tokens, mask, logp[, entropy]) [R, T]: a live row its token,
  True, its logp (and entropy); an ended row pad_id, False, 0 (and 0).

  Returns (the written tokens [R] (pad_id on ended rows), the buffers).
  """
  tok = jnp.where(live, tok, pad_id)
  vals = (tok, live, jnp.where(live, logp, 0.0))
  if entropy is not None:
    vals += (jnp.where(live, entropy, 0.0),)
  if len(vals) != len(bufs):
    raise ValueError(f"write_token: {len(bufs)} buffers for {len(vals)} values")
  return tok, tuple(jax.lax.dynamic_update_slice_in_dim(b, v[:, None].astype(b.dtype), t, axis=1)
                    for b, v in zip(bufs, vals))


def batch_buffers(rows: int, length: int, fills: tuple) -> tuple:
  """Output buffers [rows, length], one per (value, dtype) of `fills`, batch-sharded."""
  return tuple(parallel.shard_batch(jnp.full((rows, length), v, d)) for v, d in fills)
