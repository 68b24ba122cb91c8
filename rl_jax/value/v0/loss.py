"""V0's training loss: `L = alpha·L_pair + (1 - alpha)·L_ce` (docs/algorithms.md §4.1, reference
`v0_core/trainer.py`, `--loss_type combined --loss_alpha 0.25 --label_strategy minmax_norm`).

* score `s = logit_1 - logit_0 = logit(p_hat)` (one logit per query here).
* `L_ce`: soft-label cross-entropy against `[1 - y, y]`, y the query's success rate:
  `-(y log sigma(s) + (1 - y) log sigma(-s))`, averaged over the valid queries.
* `L_pair = -log sigma(s+ - s-)` over (positive, negative) query pairs of one policy step
  (positive: y >= 0.5), the smaller side cycled (`make_pairs`), averaged over the valid pairs;
  0 for an episode without both classes (the reference drops such steps; we keep its L_ce).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

POSITIVE_RATE = 0.5  # A prompt is a positive when its success rate is >= this.


def make_pairs(y: np.ndarray, valid: np.ndarray, num_pairs: int,
               rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(pos_idx, neg_idx, pair_mask), each [num_pairs]: positives (y >= 0.5) and negatives of one
  episode's queries, paired in order with the smaller side cycled (shuffled first when `rng` is
  given), max(#pos, #neg) pairs capped at `num_pairs`; no pair when a class is missing."""
  y, valid = np.asarray(y), np.asarray(valid, bool)
  pos = np.flatnonzero(valid & (y >= POSITIVE_RATE))
  neg = np.flatnonzero(valid & (y < POSITIVE_RATE))
  if rng is not None:
    pos, neg = rng.permutation(pos), rng.permutation(neg)
  out = np.zeros((3, num_pairs), np.int64)
  if len(pos) and len(neg):
    n = min(max(len(pos), len(neg)), num_pairs)
    out[0, :n] = pos[np.arange(n) % len(pos)]
    out[1, :n] = neg[np.arange(n) % len(neg)]
    out[2, :n] = 1
  return out[0].astype(np.int32), out[1].astype(np.int32), out[2].astype(bool)


def soft_ce(logits: jax.Array, y: jax.Array, mask: jax.Array) -> jax.Array:
  """Mean over valid entries of the soft-label cross-entropy against [1 - y, y]."""
  ce = -(y * jax.nn.log_sigmoid(logits) + (1 - y) * jax.nn.log_sigmoid(-logits))
  mask = mask.astype(jnp.float32)
  return jnp.sum(ce * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def pair_loss(logits: jax.Array, pos_idx: jax.Array, neg_idx: jax.Array,
              pair_mask: jax.Array) -> jax.Array:
  """Mean over valid pairs of -log sigma(s+ - s-); logits [..., Q], indices [..., P]."""
  sp = jnp.take_along_axis(logits, pos_idx, axis=-1)
  sn = jnp.take_along_axis(logits, neg_idx, axis=-1)
  mask = pair_mask.astype(jnp.float32)
  return jnp.sum(jax.nn.softplus(-(sp - sn)) * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def combined_loss(logits, y, query_mask, pos_idx, neg_idx, pair_mask,
                  alpha: float = 0.25) -> tuple[jax.Array, dict]:
  """`alpha·L_pair + (1 - alpha)·L_ce` over a batch of episodes ([E, Q] and [E, P] arrays);
  returns (loss, {'l_pair', 'l_ce'})."""
  l_ce = soft_ce(logits, y, query_mask)
  l_pair = pair_loss(logits, pos_idx, neg_idx, pair_mask)
  return alpha * l_pair + (1 - alpha) * l_ce, {"l_pair": l_pair, "l_ce": l_ce}
