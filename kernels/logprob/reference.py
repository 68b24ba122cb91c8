"""References for the fused log-prob: materialized logits, and a token-chunked XLA version.

Both have the signature of `kernels.logprob.token_logprobs` (less `impl` and `block_sizes`):

    logp = reference(hidden, unembedding, targets, soft_cap=None, temperature=1.0)
    logp, entropy = reference(..., with_entropy=True)

`materialized` builds the full [N, V] float32 logits (the ground truth of the tests).
`reference` holds at most one [block_n, V] chunk: tokens are processed in chunks under
`jax.checkpoint`, so reverse-mode autodiff recomputes each chunk's logits instead of storing all of
them. It is plain JAX, differentiable by autodiff, and is what the tiled kernels are tested against.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from kernels.logprob.common import Transform


def _dense(hidden, unembedding, targets, transform: Transform, vocab_major: bool):
  """Full-logit log-prob and entropy of one chunk: [n, D] x [D, V] -> ([n], [n])."""
  x = jnp.einsum("nd,vd->nv" if vocab_major else "nd,dv->nv", hidden, unembedding,
                 preferred_element_type=jnp.float32)
  logprobs = jax.nn.log_softmax(transform.logits(x), axis=-1)
  logp = jnp.take_along_axis(logprobs, targets[:, None], axis=-1)[:, 0]
  entropy = -jnp.sum(jnp.exp(logprobs) * logprobs, axis=-1)
  return logp, entropy


def materialized(hidden: jax.Array, unembedding: jax.Array, targets: jax.Array, *,
                 soft_cap: Optional[float] = None, temperature: float = 1.0,
                 with_entropy: bool = False, vocab_major: bool = False):
  """Per-token log-prob [N] (and entropy [N]) from the full [N, V] logits."""
  logp, entropy = _dense(hidden, unembedding, targets, Transform(soft_cap, temperature),
                         vocab_major)
  return (logp, entropy) if with_entropy else logp


def reference(hidden: jax.Array, unembedding: jax.Array, targets: jax.Array, *,
              soft_cap: Optional[float] = None, temperature: float = 1.0,
              with_entropy: bool = False, vocab_major: bool = False, block_n: int = 256):
  """`materialized`, computed over chunks of `block_n` tokens under `jax.checkpoint`.

  Args:
    hidden: [N, D] final hidden states (any float dtype; the matmul accumulates in float32).
    unembedding: [D, V] unembedding matrix W ([V, D] with vocab_major).
    targets: [N] int target ids in [0, V).
    soft_cap: c of the logit soft-cap `c * tanh(x / c)`, or None.
    temperature: logits are divided by it (> 0).
    with_entropy: also return the entropy of each token's distribution.
    vocab_major: `unembedding` is [V, D].
    block_n: tokens per chunk; the chunk's [block_n, V] float32 logits are the largest temporary.

  Returns:
    logp [N] float32, or (logp, entropy) with `with_entropy`.
  """
  transform = Transform(soft_cap, temperature)
  n, d = hidden.shape
  block_n = max(1, min(block_n, n))
  n_pad = -n % block_n
  h = jnp.pad(hidden, ((0, n_pad), (0, 0))).reshape(-1, block_n, d)
  t = jnp.pad(targets.astype(jnp.int32), (0, n_pad)).reshape(-1, block_n)

  @jax.checkpoint
  def chunk(args):
    return _dense(args[0], unembedding, args[1], transform, vocab_major)

  logp, entropy = jax.lax.map(chunk, (h, t))
  logp, entropy = logp.reshape(-1)[:n], entropy.reshape(-1)[:n]
  return (logp, entropy) if with_entropy else logp
