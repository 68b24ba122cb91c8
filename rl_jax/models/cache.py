"""The explicit KV cache: a pytree passed into and returned from every decode call.

No Flax mutable collections: the cache is a plain `flax.struct` dataclass, so it can be donated,
sharded, forked (row gathers for tree sampling) and inspected in tests.

Rows are in lock-step: every row writes slot `index` at the same time. Left padding makes this
work for prompts of different lengths: padding slots have `mask = False` and are never attended to,
and each row keeps its own next position id `pos`.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from rl_jax.models.config import ModelConfig


@flax.struct.dataclass
class KVCache:
  """Keys/values of every layer plus the bookkeeping that makes left padding exact.

  Attributes:
    k: n_layers arrays [B, n_kv_heads, S, head_dim]: keys (after RoPE, after q/k norm). One
      buffer per layer (no slice of a stacked array), heads before slots (the attention matmuls
      batch over B and heads); a decode step writes its slot in place.
    v: n_layers arrays [B, n_kv_heads, S, head_dim]: values.
    mask: [B, S] bool, True where the slot holds a real (non-padding) token.
    pos: [B] int32, position id the row's next real token gets.
    index: [] int32, the next slot to write (shared by all rows); or [B] int32, each row's own
      next slot (the slot-refill engine, whose rows start requests at different steps).
  """

  k: tuple[jax.Array, ...]
  v: tuple[jax.Array, ...]
  mask: jax.Array
  pos: jax.Array
  index: jax.Array

  @property
  def size(self) -> int:
    """S: number of slots."""
    return self.k[0].shape[2]

  def take_rows(self, rows: jax.Array) -> "KVCache":
    """Returns the cache with row r replaced by row rows[r] (fork = copy a row into a slot)."""
    return KVCache(k=tuple(x[rows] for x in self.k), v=tuple(x[rows] for x in self.v),
                   mask=self.mask[rows],
                   pos=self.pos[rows], index=self.index)


def init_cache(cfg: ModelConfig, batch: int, size: int) -> KVCache:
  """An empty cache with `size` slots per row (prompt length + completion length)."""
  if size > cfg.max_seq_len:
    raise ValueError(f"cache size {size} (prompt + completion tokens) exceeds "
                     f"ModelConfig.max_seq_len={cfg.max_seq_len}")
  shape = (batch, cfg.n_kv_heads, size, cfg.hd)
  return KVCache(
      k=tuple(jnp.zeros(shape, cfg.compute_dtype) for _ in range(cfg.n_layers)),
      v=tuple(jnp.zeros(shape, cfg.compute_dtype) for _ in range(cfg.n_layers)),
      mask=jnp.zeros((batch, size), bool),
      pos=jnp.zeros((batch,), jnp.int32),
      index=jnp.zeros((), jnp.int32),
  )
