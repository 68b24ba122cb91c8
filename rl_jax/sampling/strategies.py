"""Sampling strategies: frozen, hashable dataclasses, so they are static jit arguments.

Each has `draw(logits, rng) -> (tokens, logp, entropy)` over float32 logits [B, V] (`sample` gives
the tokens alone) and `scaled(logits)`, the temperature-scaled logits whose log-softmax is the
behaviour log-prob the sampler reports (and the trainer recomputes). Invariant: top-k / top-p
truncate only what is drawn; the reported log-probs use the untruncated temperature-scaled
distribution (as TRL and verl do). Tokens are drawn by a two-level inverse CDF over vocabulary
blocks, one uniform per row: exact in law, one pass over the vocabulary (docs/research/peers.md
times it against `jax.random.categorical`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

_NEG_INF = -1e30
_BLOCK = 1024  # Vocabulary block of the two-level inverse CDF.


def inverse_cdf_sample(probs: jax.Array, rng: jax.Array, block: int = _BLOCK) -> jax.Array:
  """Draws index i of each row of `probs` [B, V] with probability probs[i] / sum(probs).

  Rows need not be normalized; entries may be 0 (a truncated token is never drawn). Two levels:
  the block whose cumulative mass first reaches u * total, then the token inside that block, so
  the cumulative sums run over V / block and block entries instead of V.
  """
  b, v = probs.shape
  nb = -(-v // block)
  blocks = jnp.pad(probs, ((0, 0), (0, nb * block - v))).reshape(b, nb, block)
  cum_blocks = jnp.cumsum(jnp.sum(blocks, axis=-1), axis=-1)                 # [B, nb]
  # 1 - U lies in (0, 1], so the target is > 0 and never lands on a zero-mass prefix.
  target = (1.0 - jax.random.uniform(rng, (b, 1))) * cum_blocks[:, -1:]
  bi = jnp.minimum(jnp.sum(cum_blocks < target, axis=-1), nb - 1)          # [B]
  before = jnp.where(bi > 0, jnp.take_along_axis(cum_blocks, jnp.maximum(bi - 1, 0)[:, None],
                                                 axis=-1)[:, 0], 0.0)
  inner = jnp.cumsum(jnp.take_along_axis(blocks, bi[:, None, None], axis=1)[:, 0], axis=-1)
  rest = jnp.clip(target[:, 0] - before, 0.0, inner[:, -1])
  j = jnp.minimum(jnp.sum(inner < rest[:, None], axis=-1), block - 1)
  return (bi * block + j).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Sampling:
  """Temperature sampling with optional top-k and top-p (nucleus) truncation.

  Attributes:
    temperature: softmax temperature; 0 means greedy (argmax).
    top_k: keep the k most likely tokens (0 = off).
    top_p: keep the smallest set of tokens whose probability reaches p (1.0 = off).
  """

  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0

  def __post_init__(self):
    if self.temperature < 0:
      raise ValueError(f"Sampling.temperature must be >= 0, got {self.temperature}")
    if self.top_k < 0:
      raise ValueError(f"Sampling.top_k must be >= 0, got {self.top_k}")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"Sampling.top_p must be in (0, 1], got {self.top_p}")

  @property
  def greedy(self) -> bool:
    return self.temperature == 0.0

  def scaled(self, logits: jax.Array) -> jax.Array:
    """Logits of the distribution whose log-probs are reported (temperature applied)."""
    return logits if self.greedy else logits / self.temperature

  def logp_entropy(self, logits: jax.Array, tokens: jax.Array):
    """(log-prob of `tokens` [B], entropy [B]) under the reported distribution of logits [B, V]
    (the tree samplers score tokens they did not draw themselves: forks, copied branches)."""
    logprobs = jax.nn.log_softmax(self.scaled(logits), axis=-1)
    logp = jnp.take_along_axis(logprobs, tokens[:, None], axis=-1)[:, 0]
    return logp, -jnp.sum(jnp.exp(logprobs) * logprobs, axis=-1)

  def sample(self, logits: jax.Array, rng: jax.Array) -> jax.Array:
    """Draws one token per row from float32 logits [B, V]."""
    return self.draw(logits, rng)[0]

  def draw(self, logits: jax.Array, rng: jax.Array):
    """Draws one token per row and scores it, with a single log-softmax over the vocabulary.

    Returns:
      tokens [B] int32; logp [B], the token's log-prob under the temperature-scaled
      (untruncated) distribution; entropy [B] of that distribution.
    """
    logprobs = jax.nn.log_softmax(self.scaled(logits), axis=-1)
    probs = jnp.exp(logprobs)
    if self.greedy:
      tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    elif self.top_k or self.top_p < 1.0:
      tokens = inverse_cdf_sample(jnp.exp(self._truncated(logprobs)), rng)
    else:
      tokens = inverse_cdf_sample(probs, rng)
    logp = jnp.take_along_axis(logprobs, tokens[:, None], axis=-1)[:, 0]
    entropy = -jnp.sum(probs * logprobs, axis=-1)
    return tokens, logp, entropy

  def _truncated(self, x: jax.Array) -> jax.Array:
    """`x` (scaled logits or log-probs) with the tokens top-k / top-p drop set to -inf."""
    if self.top_k:
      kth = jax.lax.top_k(x, self.top_k)[0][..., -1:]
      x = jnp.where(x < kth, _NEG_INF, x)
    if self.top_p < 1.0:
      sorted_x = jnp.sort(x, axis=-1)[..., ::-1]
      cum = jnp.cumsum(jax.nn.softmax(sorted_x, axis=-1), axis=-1)
      # Keep tokens whose preceding mass is < p (the most likely token is always kept).
      keep_sorted = (cum - jax.nn.softmax(sorted_x, axis=-1)) < self.top_p
      threshold = jnp.min(jnp.where(keep_sorted, sorted_x, jnp.inf), axis=-1, keepdims=True)
      x = jnp.where(x < threshold, _NEG_INF, x)
    return x


GREEDY = Sampling(temperature=0.0)
