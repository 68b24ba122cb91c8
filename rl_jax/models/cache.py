"""The explicit KV cache: a pytree passed into and returned from every decode call.

No Flax mutable collections: the cache is a plain `flax.struct` dataclass, so it can be donated,
sharded, forked (row gathers for tree sampling) and inspected in tests.

Rows are in lock-step: every row writes slot `index` at the same time. Left padding makes this
work for prompts of different lengths: padding slots have `mask = False` and are never attended to,
and each row keeps its own next position id `pos`.
"""

from __future__ import annotations

from typing import Callable

import flax.struct
import jax
import jax.numpy as jnp

from rl_jax.models.config import ModelConfig


@flax.struct.dataclass
class KVCache:
  """Keys/values of every layer plus the bookkeeping that makes left padding exact.

  Attributes:
    k: keys (after RoPE, after q/k norm), in one of two layouts:
      unrolled layers (`ModelConfig.scan_layers=False`): a tuple of n_layers arrays
      [B, n_kv_heads, S, head_dim], one buffer per layer (no slice of a stacked array), heads
      before slots (the attention matmuls batch over B and heads); a decode step writes its slot
      in place.
      scanned layers (`scan_layers=True`): one array [B, n_layers, n_kv_heads, S, head_dim],
      rows first like every other field (row gathers, concatenation and batch sharding see the
      same leading axis in both layouts); the layer scan carries it and writes each layer's slot
      in place.
    v: values, laid out as `k`.
    mask: [B, S] bool, True where the slot holds a real (non-padding) token.
    pos: [B] int32, position id the row's next real token gets. Invariant: it equals the number
      of True slots of `mask` (position ids skip padding), so the token in a True slot s has
      position cumsum(mask)[s] - 1 whatever the slot layout; the sliding window
      (`ModelConfig.sliding_window`) is measured in these positions.
    index: [] int32, the next slot to write (shared by all rows); or [B] int32, each row's own
      next slot (the slot-refill engine, whose rows start requests at different steps).
  """

  k: tuple[jax.Array, ...] | jax.Array
  v: tuple[jax.Array, ...] | jax.Array
  mask: jax.Array
  pos: jax.Array
  index: jax.Array

  @property
  def size(self) -> int:
    """S: number of slots."""
    return self.mask.shape[1]

  @property
  def stacked(self) -> bool:
    """Whether k and v are stacked arrays (scanned layers) rather than per-layer tuples."""
    return not isinstance(self.k, tuple)

  def map_kv(self, fn: Callable[..., jax.Array], *others: "KVCache") -> "KVCache":
    """The cache with every key/value buffer b replaced by fn(b, *the same buffer of others).

    `fn` sees row-leading buffers, [B, KVH, S, hd] per layer or [B, L, KVH, S, hd] stacked;
    it may gather, concatenate or overwrite rows and slots (index slots from the end: axis -2).
    """
    k, v = (jax.tree_util.tree_map(fn, getattr(self, name), *(getattr(o, name) for o in others))
            for name in ("k", "v"))
    return self.replace(k=k, v=v)

  def take_rows(self, rows: jax.Array) -> "KVCache":
    """Returns the cache with row r replaced by row rows[r] (fork = copy a row into a slot)."""
    return self.map_kv(lambda x: x[rows]).replace(mask=self.mask[rows], pos=self.pos[rows])


def init_cache(cfg: ModelConfig, batch: int, size: int) -> KVCache:
  """An empty cache with `size` slots per row (prompt length + completion length), in the layer
  layout of `cfg.scan_layers`."""
  if size > cfg.max_seq_len:
    raise ValueError(f"cache size {size} (prompt + completion tokens) exceeds "
                     f"ModelConfig.max_seq_len={cfg.max_seq_len}")
  if cfg.scan_layers:
    shape = (batch, cfg.n_layers, cfg.n_kv_heads, size, cfg.hd)
    k, v = (jnp.zeros(shape, cfg.compute_dtype) for _ in range(2))
  else:
    shape = (batch, cfg.n_kv_heads, size, cfg.hd)
    k, v = (tuple(jnp.zeros(shape, cfg.compute_dtype) for _ in range(cfg.n_layers))
            for _ in range(2))
  return KVCache(k=k, v=v, mask=jnp.zeros((batch, size), bool),
                 pos=jnp.zeros((batch,), jnp.int32), index=jnp.zeros((), jnp.int32))
