"""Pallas GPU (Triton lowering) kernels of the fused log-prob.

Grid (N / block_n, cdiv(V, block_v)); every program owns one [block_n, block_v] logit tile and
is independent of the others (Triton programs run in parallel, in no order):

- forward: the tile's partial statistics (max, sum exp, sum exp * z, target logit) go to
  [n_col_blocks, N] outputs, combined by `common.combine` in XLA (a [n_col_blocks, N] reduction).
- backward: the tile is recomputed; d_hidden and d_unembedding tiles are added with
  `atomic_add` into zero-initialized float32 buffers padded to whole tiles.

The logit tile is accumulated over the model width in chunks of block_d, so registers hold
[block_n, block_d] + [block_d, block_v] operands and the [block_n, block_v] accumulator. Loads past
D or V are masked to 0; the vocabulary need not be a multiple of block_v. Block sizes must be
powers of 2 (Triton). Tested on CPU in interpret mode; not yet run on a GPU.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from kernels.logprob import common


def _load(h_ref, w_ref, k, col_ok, *, d_model: int, block_d: int, vocab_major: bool):
  """The k-th D chunk of the hidden tile [bn, bd] and of the W tile ([bd, bv] or [bv, bd])."""
  d = pl.ds(k * block_d, block_d)
  d_ok = k * block_d + jnp.arange(block_d) < d_model
  h = plgpu.load(h_ref.at[:, d], mask=d_ok[None, :], other=0.0)
  if vocab_major:
    w = plgpu.load(w_ref.at[:, d], mask=col_ok[:, None] & d_ok[None, :], other=0.0)
  else:
    w = plgpu.load(w_ref.at[d, :], mask=d_ok[:, None] & col_ok[None, :], other=0.0)
  return d, h, w


def _logit_tile(h_ref, w_ref, *, n_vocab: int, d_model: int, block_d: int, vocab_major: bool):
  """x = h @ W for this program's tile, accumulated over D chunks; -> (x, cols, col_ok)."""
  block_n, block_v = h_ref.shape[0], w_ref.shape[0 if vocab_major else 1]
  cols = pl.program_id(1) * block_v + jnp.arange(block_v)
  col_ok = cols < n_vocab

  def body(k, acc):
    _, h, w = _load(h_ref, w_ref, k, col_ok, d_model=d_model, block_d=block_d,
                    vocab_major=vocab_major)
    return acc + plgpu.dot(h, w, trans_b=vocab_major)

  x = lax.fori_loop(0, h_ref.shape[1] // block_d, body,
                    jnp.zeros((block_n, block_v), jnp.float32))
  return x, cols, col_ok


def _fwd_kernel(h_ref, w_ref, t_ref, m_ref, s_ref, u_ref, zt_ref, *,
                transform: common.Transform, **kw):
  x, cols, col_ok = _logit_tile(h_ref, w_ref, **kw)
  hit = cols[None, :] == t_ref[...][:, None]
  stats = common.tile_stats(transform.logits(x), col_ok[None, :], hit, keepdims=False)
  for ref, value in zip((m_ref, s_ref, u_ref, zt_ref), stats):
    ref[...] = value


def _bwd_kernel(h_ref, w_ref, t_ref, lse_ref, ent_ref, g_ref, e_ref, dh_in_ref, dw_in_ref,
                dh_ref, dw_ref, *, transform: common.Transform, entropy_grad: bool, **kw):
  del dh_in_ref, dw_in_ref  # Aliased to dh_ref, dw_ref: they only supply the zeros.
  x, cols, col_ok = _logit_tile(h_ref, w_ref, **kw)
  vocab_major = kw["vocab_major"]
  hit = cols[None, :] == t_ref[...][:, None]
  col = lambda ref: ref[...][:, None]  # noqa: E731
  dz = common.tile_dz(transform.logits(x), col_ok[None, :], hit, col(lse_ref), col(ent_ref),
                      col(g_ref), col(e_ref) if entropy_grad else None)
  dx = transform.grad(x, dz).astype(h_ref.dtype)

  def body(k, carry):
    d, h, w = _load(h_ref, w_ref, k, col_ok, d_model=kw["d_model"], block_d=kw["block_d"],
                    vocab_major=vocab_major)
    plgpu.atomic_add(dh_ref, (slice(None), d), plgpu.dot(dx, w, trans_b=not vocab_major))
    if vocab_major:
      plgpu.atomic_add(dw_ref, (slice(None), d), plgpu.dot(dx, h, trans_a=True))
    else:
      plgpu.atomic_add(dw_ref, (d, slice(None)), plgpu.dot(h, dx, trans_a=True))
    return carry

  lax.fori_loop(0, h_ref.shape[1] // kw["block_d"], body, 0)


def _specs(block_n: int, block_v: int, d_pad: int, vocab_major: bool):
  row = pl.BlockSpec((block_n, d_pad), lambda i, j: (i, 0))
  if vocab_major:
    cols = pl.BlockSpec((block_v, d_pad), lambda i, j: (j, 0))
  else:
    cols = pl.BlockSpec((d_pad, block_v), lambda i, j: (0, j))
  vec = pl.BlockSpec((block_n,), lambda i, j: (i,))
  return row, cols, vec


def _geometry(hidden, unembedding, block_v: int, block_d: int, vocab_major: bool):
  """(N, D, V, vocab blocks, D padded to block_d) of one call."""
  n, d = hidden.shape
  v = unembedding.shape[0 if vocab_major else 1]
  return n, d, v, pl.cdiv(v, block_v), pl.cdiv(d, block_d) * block_d


@functools.partial(jax.jit, static_argnames=("transform", "block_n", "block_v", "block_d",
                                             "vocab_major", "interpret"))
def forward(hidden, unembedding, targets, *, transform: common.Transform, block_n: int,
            block_v: int, block_d: int, vocab_major: bool = False, interpret: bool = False):
  """-> (logp [N], entropy [N], lse [N]) float32; N % block_n == 0; W [D, V] or [V, D]."""
  n, d, v, n_cols, d_pad = _geometry(hidden, unembedding, block_v, block_d, vocab_major)
  row, cols, vec = _specs(block_n, block_v, d_pad, vocab_major)
  stat = jax.ShapeDtypeStruct((n_cols, n), jnp.float32)
  stats = pl.pallas_call(
      functools.partial(_fwd_kernel, transform=transform, n_vocab=v, d_model=d,
                        block_d=block_d, vocab_major=vocab_major),
      grid=(n // block_n, n_cols),
      in_specs=[row, cols, vec],
      out_specs=[pl.BlockSpec((None, block_n), lambda i, j: (j, i))] * 4,
      out_shape=[stat] * 4,
      compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=2),
      interpret=interpret,
      name="logprob_fwd",
  )(hidden, unembedding, targets)
  return common.combine(*stats, axis=0)


@functools.partial(jax.jit, static_argnames=("transform", "block_n", "block_v", "block_d",
                                             "entropy_grad", "vocab_major", "interpret"))
def backward(hidden, unembedding, targets, lse, entropy, g_logp, g_ent, *,
             transform: common.Transform, block_n: int, block_v: int, block_d: int,
             entropy_grad: bool, vocab_major: bool = False, interpret: bool = False):
  """-> (d_hidden [N, D], d_unembedding like W) in the input dtypes; N % block_n == 0."""
  n, d, v, n_cols, d_pad = _geometry(hidden, unembedding, block_v, block_d, vocab_major)
  row, cols, vec = _specs(block_n, block_v, d_pad, vocab_major)
  dh_shape = jax.ShapeDtypeStruct((n, d_pad), jnp.float32)
  w_pad = (n_cols * block_v, d_pad) if vocab_major else (d_pad, n_cols * block_v)
  dw_shape = jax.ShapeDtypeStruct(w_pad, jnp.float32)
  dh, dw = pl.pallas_call(
      functools.partial(_bwd_kernel, transform=transform, n_vocab=v, d_model=d,
                        block_d=block_d, entropy_grad=entropy_grad, vocab_major=vocab_major),
      grid=(n // block_n, n_cols),
      in_specs=[row, cols, vec, vec, vec, vec, vec, row, cols],
      out_specs=[row, cols],
      out_shape=[dh_shape, dw_shape],
      input_output_aliases={7: 0, 8: 1},
      compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=2),
      interpret=interpret,
      name="logprob_bwd",
  )(hidden, unembedding, targets, lse, entropy, g_logp, g_ent,
    jnp.zeros(dh_shape.shape, jnp.float32), jnp.zeros(dw_shape.shape, jnp.float32))
  dw = dw[:v, :d] if vocab_major else dw[:d, :v]
  return dh[:, :d].astype(hidden.dtype), dw.astype(unembedding.dtype)
