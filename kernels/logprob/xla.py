"""Tiled XLA forward and backward of the fused log-prob (the CPU path of `ops.token_logprobs`).

Loops over [block_n, block_v] tiles of the logits with `lax.map` / `lax.scan`, column blocks
outermost so each block of W is sliced once; the largest temporaries are one float32 tile and the
float32 gradient accumulators. The vocabulary need not be a multiple of block_v: the last,
narrower column block is a separate static step, so no column is padded or masked. N must be a
multiple of block_n (`ops` pads the tokens). W is [D, V], or [V, D] with `vocab_major` (a tied
input embedding, used as stored: slicing a transposed view would copy the whole matrix).

The forward computes one matmul per tile; the backward recomputes the tile and does the two
gradient matmuls, so the fused path costs 4 matmuls where materialized logits cost 3.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from kernels.logprob import common


def _col_blocks(v: int, block_v: int) -> tuple[int, int, int]:
  """(block width, number of full blocks, width of the last partial block or 0)."""
  bv = min(block_v, v)
  return (bv,) + divmod(v, bv)


def _dims(contract_a: int, contract_b: int):
  return (((contract_a,), (contract_b,)), ((), ()))


class _Layout:
  """Where the vocabulary axis of W is, and the matmuls that follow from it."""

  def __init__(self, vocab_major: bool):
    self.axis = 0 if vocab_major else 1
    self.vocab_major = vocab_major

  def block(self, w, start, size):
    return lax.dynamic_slice_in_dim(w, start, size, self.axis)

  def tail(self, w, start):
    return w[start:] if self.vocab_major else w[:, start:]

  def logits(self, h, w_blk):  # [bn, D] x W block -> [bn, bv]
    return lax.dot_general(h, w_blk, _dims(1, 1 - self.axis), preferred_element_type=jnp.float32)

  def d_hidden(self, dx, w_blk):  # [bn, bv] x W block -> [bn, D]
    return lax.dot_general(dx, w_blk, _dims(1, self.axis), preferred_element_type=jnp.float32)

  def d_w(self, h, dx):  # -> W block shape
    a, b = (dx, h) if self.vocab_major else (h, dx)
    return lax.dot_general(a, b, _dims(0, 0), preferred_element_type=jnp.float32)


def forward(hidden, unembedding, targets, *, transform: common.Transform, block_n: int,
            block_v: int, vocab_major: bool = False):
  """-> (logp [N], entropy [N], lse [N]) float32; hidden [N, D] with N % block_n == 0."""
  n, d = hidden.shape
  lay = _Layout(vocab_major)
  bv, n_full, tail = _col_blocks(unembedding.shape[lay.axis], block_v)

  def stats(h, t, w_blk, col0):
    x = lay.logits(h, w_blk)
    hit = (col0 + jnp.arange(x.shape[1]))[None, :] == t[:, None]
    return common.tile_stats(transform.logits(x), True, hit)

  rows = (hidden.reshape(-1, block_n, d), targets.reshape(-1, block_n))

  def col_block(w_blk, col0):
    return lax.map(lambda args: stats(*args, w_blk, col0), rows)  # 4 x [n / block_n, bn, 1]

  parts = lax.map(lambda j: col_block(lay.block(unembedding, j * bv, bv), j * bv),
                  jnp.arange(n_full))
  if tail:
    last = col_block(lay.tail(unembedding, n_full * bv), n_full * bv)
    parts = [jnp.concatenate([p, q[None]]) for p, q in zip(parts, last)]
  return tuple(o.reshape(n) for o in common.combine(*parts, axis=0))


def backward(hidden, unembedding, targets, lse, entropy, g_logp, g_ent, *,
             transform: common.Transform, block_n: int, block_v: int,
             vocab_major: bool = False):
  """-> (d_hidden [N, D], d_unembedding like W) in the input dtypes.

  Args:
    hidden, unembedding, targets: the forward inputs (N % block_n == 0).
    lse, entropy: [N] float32 from `forward`.
    g_logp: [N] upstream gradient of logp; g_ent: [N] of entropy, or None (no entropy term).
    transform, block_n, block_v, vocab_major: as in `forward`.
  """
  n, d = hidden.shape
  lay = _Layout(vocab_major)
  bv, n_full, tail = _col_blocks(unembedding.shape[lay.axis], block_v)
  rows = lambda a: a.reshape(-1, block_n, *a.shape[1:])  # noqa: E731
  col = lambda a: None if a is None else rows(a)[..., None]  # noqa: E731
  per_row = (rows(hidden), rows(targets), col(lse), col(entropy), col(g_logp), col(g_ent))

  def tile(w_blk, col0, h, t, lse_b, ent_b, g_b, e_b):
    x = lay.logits(h, w_blk)
    hit = (col0 + jnp.arange(x.shape[1]))[None, :] == t[:, None]
    dz = common.tile_dz(transform.logits(x), True, hit, lse_b, ent_b, g_b, e_b)
    dx = transform.grad(x, dz).astype(hidden.dtype)
    return lay.d_hidden(dx, w_blk), lay.d_w(h, dx)

  def col_pass(dh_all, w_blk, col0):
    """All row blocks against one column block: adds into dh_all, returns its dW block."""
    def step(dw_blk, xs):
      dh, dw = tile(w_blk, col0, *xs)
      return dw_blk + dw, dh
    dw_blk, dh = lax.scan(step, jnp.zeros(w_blk.shape, jnp.float32), per_row)
    return dh_all + dh.reshape(n, d), dw_blk

  def body(j, carry):
    dh_all, dw_all = carry
    dh_all, dw_blk = col_pass(dh_all, lay.block(unembedding, j * bv, bv), j * bv)
    return dh_all, lax.dynamic_update_slice_in_dim(dw_all, dw_blk, j * bv, lay.axis)

  carry = (jnp.zeros((n, d), jnp.float32), jnp.zeros(unembedding.shape, jnp.float32))
  dh_all, dw_all = lax.fori_loop(0, n_full, body, carry)
  if tail:
    dh_all, dw_blk = col_pass(dh_all, lay.tail(unembedding, n_full * bv), n_full * bv)
    dw_all = lax.dynamic_update_slice_in_dim(dw_all, dw_blk, n_full * bv, lay.axis)
  return dh_all.astype(hidden.dtype), dw_all.astype(unembedding.dtype)
