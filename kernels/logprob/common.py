"""Tile maths shared by the XLA and Pallas log-prob implementations.

Every implementation tiles the logits `x = h @ W` ([N, V]) into [bn, bv] tiles and never holds
more than one tile. Per tile it needs only these functions, so the XLA loops, the GPU (Triton)
kernel and the TPU (Mosaic) kernel compute the same numbers.

Symbols (per token n, vocab column v):
  x = h_n . w_v                         raw logit (float32 accumulation)
  z = c * tanh(x / c) / tau             soft-capped (c) and temperature-scaled (tau) logit
  lse = log sum_v exp z                 log-normaliser
  logp = z_t - lse                      log-prob of the target t
  H = -sum_v p_v log p_v = lse - E_p[z] entropy, p_v = exp(z_v - lse)

Forward, per tile: partial statistics relative to the tile maximum m,
  s = sum exp(z - m),  u = sum exp(z - m) (z - m),  z_t (0 if t is not in the tile),
combined over tiles by `combine` (all tiles at once) or `merge` (one tile at a time: the online
logsumexp).
Backward, per tile, for upstream gradients g (of logp) and e (of H):
  dz_v = g (1[v = t] - p_v) - e p_v (z_v - lse + H),   dx = dz * dz/dx.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

# Logit of a column past the vocabulary: finite, so 0 * MASKED is 0, not NaN.
MASKED = -1e30


@dataclasses.dataclass(frozen=True)
class Transform:
  """The elementwise map from raw logit x to the logit z the log-probs use.

  Attributes:
    soft_cap: c in `c * tanh(x / c)` (Gemma-style logit soft-capping); None = off.
    temperature: tau, logits are divided by it; must be > 0.
  """

  soft_cap: Optional[float] = None
  temperature: float = 1.0

  def __post_init__(self):
    if not self.temperature > 0:
      raise ValueError(f"temperature must be > 0, got {self.temperature}")
    if self.soft_cap is not None and not self.soft_cap > 0:
      raise ValueError(f"soft_cap must be > 0 or None, got {self.soft_cap}")

  def logits(self, x: jax.Array) -> jax.Array:
    """x -> z (float32)."""
    z = x.astype(jnp.float32)
    if self.soft_cap is not None:
      z = self.soft_cap * jnp.tanh(z / self.soft_cap)
    if self.temperature != 1.0:
      z = z / self.temperature
    return z

  def grad(self, x: jax.Array, dz: jax.Array) -> jax.Array:
    """dz -> dx = dz * dz/dx."""
    if self.soft_cap is not None:
      th = jnp.tanh(x.astype(jnp.float32) / self.soft_cap)
      dz = dz * (1.0 - th * th)
    if self.temperature != 1.0:
      dz = dz / self.temperature
    return dz


def tile_stats(z: jax.Array, valid, hit: jax.Array, keepdims: bool = True):
  """Partial statistics of one [bn, bv] tile of logits, reduced over the last axis.

  Args:
    z: [bn, bv] float32 logits.
    valid: broadcastable to z; False for columns past the vocabulary.
    hit: broadcastable to z; True where the column is the row's target.
    keepdims: return [bn, 1] (TPU layout, XLA) rather than [bn] (GPU).

  Returns:
    (m, s, u, zt): tile maximum, sum exp(z - m), sum exp(z - m) (z - m), target logit.
  """
  z = jnp.where(valid, z, MASKED)
  m = jnp.max(z, axis=-1, keepdims=keepdims)
  d = z - (m if keepdims else m[:, None])
  e = jnp.exp(d)
  return (m, jnp.sum(e, axis=-1, keepdims=keepdims), jnp.sum(e * d, axis=-1, keepdims=keepdims),
          jnp.sum(jnp.where(hit, z, 0.0), axis=-1, keepdims=keepdims))


def merge(acc, tile):
  """Merges one tile's statistics (m, s, u, zt) into the running ones `acc` (same shapes; the
  running maximum starts at MASKED, the sums at 0): the online form of `combine`."""
  m, s, u, zt = acc
  mt, st, ut, ztt = tile
  big_m = jnp.maximum(m, mt)
  a, b = jnp.exp(m - big_m), jnp.exp(mt - big_m)
  return (big_m, a * s + b * st, a * (u + (m - big_m) * s) + b * (ut + (mt - big_m) * st),
          zt + ztt)


def combine(m: jax.Array, s: jax.Array, u: jax.Array, zt: jax.Array, axis: int = 0):
  """Merges per-tile statistics along `axis` -> (logp, entropy, lse)."""
  big_m = jnp.max(m, axis=axis, keepdims=True)
  c = jnp.exp(m - big_m)
  total_s = jnp.sum(c * s, axis=axis)
  total_u = jnp.sum(c * (u + (m - big_m) * s), axis=axis)
  lse = jnp.squeeze(big_m, axis) + jnp.log(total_s)
  entropy = jnp.log(total_s) - total_u / total_s
  return jnp.sum(zt, axis=axis) - lse, entropy, lse


def tile_dz(z: jax.Array, valid: jax.Array, hit: jax.Array, lse: jax.Array,
            entropy: jax.Array, g_logp: jax.Array, g_ent: jax.Array) -> jax.Array:
  """d loss / dz for one tile; lse, entropy, g_logp, g_ent broadcast against z ([bn, 1]).

  g_ent None means the entropy is not differentiated (entropy is then unused).
  """
  log_p = jnp.where(valid, z, MASKED) - lse
  p = jnp.exp(log_p)
  dz = g_logp * (jnp.where(hit, 1.0, 0.0) - p)
  if g_ent is not None:
    dz = dz - g_ent * p * (log_p + entropy)
  return jnp.where(valid, dz, 0.0)
