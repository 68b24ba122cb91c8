"""Pallas TPU (Mosaic) kernels of the fused log-prob.

Tiles are [block_n, D] x [D, block_v] (the MXU takes the whole model width at once). Per-token
vectors are [N, 1] columns so that row reductions (`keepdims=True`) store without relayout.

- forward: grid (N / block_n, cdiv(V, block_v)), the column axis 'arbitrary': the [block_n, 1]
  statistics stay in VMEM and are merged over the vocabulary tile by tile (`common.merge`, the
  online logsumexp), so the outputs are [N, 1] (per-tile outputs would take 128 lanes per token
  in HBM each; docs/research/scan-layers.md).
- backward, d_hidden: grid (row blocks, column blocks), the column axis 'arbitrary': the
  [block_n, D] float32 output block stays in VMEM and accumulates over the vocabulary.
- backward, d_unembedding: grid (column blocks, row blocks), the row axis 'arbitrary': the
  [D, block_v] float32 block accumulates over the tokens.
Both backward kernels recompute the logit tile (TPU has no atomics), so the backward costs two
tile recomputations. Columns past V (the last, partial block) are masked, W's included, so
whatever the partial block holds never reaches a gradient. block_n should be a multiple of 8
(16 for bfloat16) and block_v a multiple of 128; each kernel shrinks the given tile until its
blocks fit the scoped VMEM (`fit_blocks`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kernels.logprob import common

_NT = (((1,), (1,)), ((), ()))  # a @ b.T
_TN = (((0,), (0,)), ((), ()))  # a.T @ b
_NN = (((1,), (0,)), ((), ()))  # a @ b


def _tile(h_ref, w_ref, col_block, n_vocab: int, vocab_major: bool):
  """-> (h, w with vocabulary entries past V zeroed, x = h @ W in float32, cols [1, bv],
  valid [1, bv]); the W tile is [D, bv], or [bv, D] with vocab_major."""
  block_v = w_ref.shape[0 if vocab_major else 1]
  start = col_block * block_v
  cols = start + lax.broadcasted_iota(jnp.int32, (1, block_v), 1)
  valid = cols < n_vocab
  h = h_ref[...]
  zero = jnp.zeros((), w_ref.dtype)
  if vocab_major:
    w_ok = start + lax.broadcasted_iota(jnp.int32, (block_v, 1), 0) < n_vocab
    w = jnp.where(w_ok, w_ref[...], zero)
    x = lax.dot_general(h, w, _NT, preferred_element_type=jnp.float32)
  else:
    w = jnp.where(valid, w_ref[...], zero)
    x = jnp.dot(h, w, preferred_element_type=jnp.float32)
  return h, w, x, cols, valid


def _fwd_kernel(h_ref, w_ref, t_ref, m_ref, s_ref, u_ref, zt_ref, *,
                transform: common.Transform, n_vocab: int, vocab_major: bool):
  j = pl.program_id(1)

  @pl.when(j == 0)
  def _():
    m_ref[...] = jnp.full(m_ref.shape, common.MASKED, m_ref.dtype)
    for ref in (s_ref, u_ref, zt_ref):
      ref[...] = jnp.zeros(ref.shape, ref.dtype)

  _, _, x, cols, valid = _tile(h_ref, w_ref, j, n_vocab, vocab_major)
  tile = common.tile_stats(transform.logits(x), valid, cols == t_ref[...])
  merged = common.merge((m_ref[...], s_ref[...], u_ref[...], zt_ref[...]), tile)
  for ref, value in zip((m_ref, s_ref, u_ref, zt_ref), merged):
    ref[...] = value


def _dx(refs, col_block, transform, n_vocab, entropy_grad, vocab_major):
  h_ref, w_ref, t_ref, lse_ref, ent_ref, g_ref, e_ref = refs
  h, w, x, cols, valid = _tile(h_ref, w_ref, col_block, n_vocab, vocab_major)
  dz = common.tile_dz(transform.logits(x), valid, cols == t_ref[...], lse_ref[...],
                      ent_ref[...], g_ref[...], e_ref[...] if entropy_grad else None)
  return h, w, transform.grad(x, dz).astype(h.dtype)


def _dh_kernel(*refs, transform, n_vocab, entropy_grad, vocab_major):
  *ins, dh_ref = refs
  j = pl.program_id(1)

  @pl.when(j == 0)
  def _():
    dh_ref[...] = jnp.zeros(dh_ref.shape, dh_ref.dtype)

  _, w, dx = _dx(ins, j, transform, n_vocab, entropy_grad, vocab_major)
  dh_ref[...] += lax.dot_general(dx, w, _NN if vocab_major else _NT,
                                 preferred_element_type=jnp.float32)


def _dw_kernel(*refs, transform, n_vocab, entropy_grad, vocab_major):
  *ins, dw_ref = refs

  @pl.when(pl.program_id(1) == 0)
  def _():
    dw_ref[...] = jnp.zeros(dw_ref.shape, dw_ref.dtype)

  h, _, dx = _dx(ins, pl.program_id(0), transform, n_vocab, entropy_grad, vocab_major)
  a, b = (dx, h) if vocab_major else (h, dx)
  dw_ref[...] += lax.dot_general(a, b, _TN, preferred_element_type=jnp.float32)


def _w_spec(block_v: int, d: int, vocab_major: bool, index):
  if vocab_major:
    return pl.BlockSpec((block_v, d), lambda *g: (index(*g)[1], 0))
  return pl.BlockSpec((d, block_v), lambda *g: (0, index(*g)[1]))


def _in_specs(block_n: int, block_v: int, d: int, rows_first: bool, vocab_major: bool):
  """BlockSpecs of (h, w, t, lse, ent, g_logp, g_ent) for a grid (rows, cols) or (cols, rows)."""
  if rows_first:
    ij = lambda f: lambda i, j: f(i, j)  # noqa: E731
  else:
    ij = lambda f: lambda j, i: f(i, j)  # noqa: E731
  vec = pl.BlockSpec((block_n, 1), ij(lambda i, j: (i, 0)))
  return [pl.BlockSpec((block_n, d), ij(lambda i, j: (i, 0))),
          _w_spec(block_v, d, vocab_major, ij(lambda i, j: (i, j)))] + [vec] * 5


def _params(*semantics):
  return pltpu.CompilerParams(dimension_semantics=semantics)


def _cost(n: int, d: int, v: int, itemsize: int, row_blocks: int, matmuls: int):
  """What XLA's cost analysis counts for one kernel (it cannot see inside a Mosaic call).

  `matmuls` [N, D] x [D, V] products (1 forward, 2 per backward kernel: the recomputed logits and
  the gradient), an exp per logit, W read once per row block and the hidden states once.
  """
  return pl.CostEstimate(flops=2 * n * d * v * matmuls, transcendentals=n * v,
                         bytes_accessed=itemsize * (row_blocks * d * v + n * d))


# Scoped VMEM the tiles of one kernel may take: Mosaic's default scoped limit is 16 MiB (v4, v5e,
# v5p; v6e 32 MiB), less headroom for its own scratch.
VMEM_BUDGET = 14 * 2**20


def vmem_bytes(kernel: str, block_n: int, block_v: int, d: int, itemsize: int,
               vocab_major: bool = False) -> int:
  """Scoped VMEM of one kernel's double-buffered blocks plus its float32 logit tile.

  kernel: 'fwd', 'dh' or 'dw'. Per-token [block_n, 1] vectors take whole (8, 128) float32 tiles.
  With W stored [D, V] (vocab_major False), Mosaic keeps one more copy of the [D, block_v] W
  block (seen compiling Qwen3-8B's separate bfloat16 lm_head, D=4096, for a v5p: the forward's
  (256, 512) tile asked for 17.48 MiB where the blocks alone are 13.75), so it is counted.
  """
  vec = 2 * block_n * 128 * 4
  h, w, tile = block_n * d * itemsize, d * block_v * itemsize, block_n * block_v * 4
  relayout = 0 if vocab_major else w
  if kernel == "fwd":
    return 2 * (h + w) + 5 * vec + tile + relayout
  out = block_n * d * 4 if kernel == "dh" else d * block_v * 4
  return 2 * (h + w + out) + 5 * vec + tile + relayout


def fit_blocks(kernel: str, block_n: int, block_v: int, d: int, itemsize: int,
               budget: int = VMEM_BUDGET, vocab_major: bool = False) -> tuple[int, int]:
  """(block_n, block_v) no larger than the given ones whose `vmem_bytes` fit `budget`.

  Halves block_v (down to 128 columns), then block_n (down to 16 rows), so a block_n that
  divides N still does. The wide-model tiles that the Mosaic compiler rejected (e.g. D=1024 with
  a [D, 2048] float32 d_unembedding block: 25 MiB of a 16 MiB limit) shrink to fit.

  Raises:
    ValueError: not even a [16, 128] tile fits (a very wide model).
  """
  while vmem_bytes(kernel, block_n, block_v, d, itemsize, vocab_major) > budget:
    if block_v > 128:
      block_v = max(128, block_v // 2 // 128 * 128)
    elif block_n > 16:
      block_n //= 2
    else:
      raise ValueError(f"no logprob {kernel} tile fits {budget} bytes of VMEM for d_model={d}")
  return block_n, block_v


@functools.partial(jax.jit, static_argnames=("transform", "block_n", "block_v", "vocab_major",
                                             "interpret"))
def forward(hidden, unembedding, targets, *, transform: common.Transform, block_n: int,
            block_v: int, vocab_major: bool = False, interpret: bool = False):
  """-> (logp [N], entropy [N], lse [N]) float32; N % block_n == 0; W [D, V] or [V, D]."""
  n, d = hidden.shape
  v = unembedding.shape[0 if vocab_major else 1]
  block_n, block_v = fit_blocks("fwd", block_n, block_v, d, hidden.dtype.itemsize,
                                vocab_major=vocab_major)
  n_cols = pl.cdiv(v, block_v)
  stat = jax.ShapeDtypeStruct((n, 1), jnp.float32)
  stats = pl.pallas_call(
      functools.partial(_fwd_kernel, transform=transform, n_vocab=v, vocab_major=vocab_major),
      grid=(n // block_n, n_cols),
      in_specs=_in_specs(block_n, block_v, d, True, vocab_major)[:3],
      out_specs=[pl.BlockSpec((block_n, 1), lambda i, j: (i, 0))] * 4,
      out_shape=[stat] * 4,
      compiler_params=_params("parallel", "arbitrary"),
      interpret=interpret,
      cost_estimate=_cost(n, d, v, hidden.dtype.itemsize, n // block_n, 1),
      name="logprob_fwd",
  )(hidden, unembedding, targets.reshape(n, 1))
  return tuple(a[:, 0] for a in common.combine(*(a[None] for a in stats), axis=0))


@functools.partial(jax.jit, static_argnames=("transform", "block_n", "block_v", "entropy_grad",
                                             "vocab_major", "interpret"))
def backward(hidden, unembedding, targets, lse, entropy, g_logp, g_ent, *,
             transform: common.Transform, block_n: int, block_v: int, entropy_grad: bool,
             vocab_major: bool = False, interpret: bool = False):
  """-> (d_hidden [N, D], d_unembedding like W) in the input dtypes; N % block_n == 0."""
  n, d = hidden.shape
  v = unembedding.shape[0 if vocab_major else 1]
  args = (hidden, unembedding, targets.reshape(n, 1)) + tuple(
      a.reshape(n, 1) for a in (lse, entropy, g_logp, g_ent))
  kw = dict(transform=transform, n_vocab=v, entropy_grad=entropy_grad, vocab_major=vocab_major)
  size = hidden.dtype.itemsize
  block_n, block_v = fit_blocks("dh", block_n, block_v, d, size, vocab_major=vocab_major)
  n_rows, n_cols = n // block_n, pl.cdiv(v, block_v)
  dh = pl.pallas_call(
      functools.partial(_dh_kernel, **kw),
      grid=(n_rows, n_cols),
      in_specs=_in_specs(block_n, block_v, d, True, vocab_major),
      out_specs=pl.BlockSpec((block_n, d), lambda i, j: (i, 0)),
      out_shape=jax.ShapeDtypeStruct((n, d), jnp.float32),
      compiler_params=_params("parallel", "arbitrary"),
      interpret=interpret,
      cost_estimate=_cost(n, d, v, size, n // block_n, 2),
      name="logprob_bwd_dh",
  )(*args)
  # The [D, block_v] float32 accumulator of d_unembedding gets its own (narrower) tile.
  block_n, block_v = fit_blocks("dw", block_n, block_v, d, size, vocab_major=vocab_major)
  n_rows, n_cols = n // block_n, pl.cdiv(v, block_v)
  dw = pl.pallas_call(
      functools.partial(_dw_kernel, **kw),
      grid=(n_cols, n_rows),
      in_specs=_in_specs(block_n, block_v, d, False, vocab_major),
      out_specs=_w_spec(block_v, d, vocab_major, lambda j, i: (i, j)),
      out_shape=jax.ShapeDtypeStruct(unembedding.shape, jnp.float32),
      compiler_params=_params("parallel", "arbitrary"),
      interpret=interpret,
      cost_estimate=_cost(n, d, v, size, n // block_n, 2),
      name="logprob_bwd_dw",
  )(*args)
  return dh.astype(hidden.dtype), dw.astype(unembedding.dtype)
