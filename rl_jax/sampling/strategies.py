"""Sampling strategies: frozen, hashable dataclasses, so they are static jit arguments.

Each has `sample(logits, rng) -> tokens` over float32 logits [B, V] and `scaled(logits)`, the
temperature-scaled logits whose log-softmax is the behaviour log-prob the sampler reports (and the
trainer recomputes). Top-k / top-p truncate only what is *drawn*; the reported log-probs use the
untruncated temperature-scaled distribution, as TRL and verl do, so they are differentiable and
comparable across strategies.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

_NEG_INF = -1e30


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

  def sample(self, logits: jax.Array, rng: jax.Array) -> jax.Array:
    """Draws one token per row from float32 logits [B, V]."""
    if self.greedy:
      return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    x = self.scaled(logits)
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
    return jax.random.categorical(rng, x, axis=-1).astype(jnp.int32)


GREEDY = Sampling(temperature=0.0)
