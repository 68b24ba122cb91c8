"""Pytrees shared across modules (static shapes; see DESIGN.md §1 for the letters).

R rollout rows (= B prompts x G samples), P prompt length, T completion length.
"""

from __future__ import annotations

import flax.struct
import jax


@flax.struct.dataclass
class Rollout:
  """What a sampler produces for one RL step.

  Attributes:
    prompt_tokens: [R, P] int32, left-padded.
    prompt_mask: [R, P] bool.
    tokens: [R, T] int32 completion tokens.
    mask: [R, T] bool, completion tokens that count (up to and including EOS).
    logp: [R, T] float32 behaviour-policy log-probs of the sampled tokens.
    group: [R] int32 prompt index of each row (the segment id).
    valid: [R] bool, row exists (False for padding rows).
  """

  prompt_tokens: jax.Array
  prompt_mask: jax.Array
  tokens: jax.Array
  mask: jax.Array
  logp: jax.Array
  group: jax.Array
  valid: jax.Array


@flax.struct.dataclass
class SFTBatch:
  """Supervised batch: prompt [N, P] (left-padded) + target completion [N, T] (right-padded)."""

  prompt_tokens: jax.Array
  prompt_mask: jax.Array
  tokens: jax.Array
  mask: jax.Array
