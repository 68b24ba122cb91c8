"""Per-token log-probs of completions under a policy (the trainer's side of the sampler check).

The sequence is `prompt (left-padded) ++ completion (right-padded)`; position P-1+t predicts
completion token t. Only the T completion positions are unembedded, so the logits held are
[B, T, V], never [B, P+T, V].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rl_jax import models


def completion_logprobs(cfg: models.ModelConfig, params, prompt: jax.Array,
                        prompt_mask: jax.Array, completion: jax.Array,
                        completion_mask: jax.Array, *, temperature: float = 1.0,
                        with_entropy: bool = False):
  """Returns logp [B, T] (and entropy [B, T]) of `completion` given `prompt`.

  Args:
    cfg: model config.
    params: policy parameters.
    prompt: [B, P] left-padded prompt tokens; prompt_mask [B, P].
    completion: [B, T] completion tokens; completion_mask [B, T] (True up to and including EOS).
    temperature: logits are divided by it (the sampler reports log-probs the same way); 0 or 1
      means unscaled.
    with_entropy: also return the entropy of each position's distribution.

  Values where completion_mask is False are 0.
  """
  p = prompt.shape[1]
  tokens = jnp.concatenate([prompt, completion], axis=1)
  mask = jnp.concatenate([prompt_mask, completion_mask], axis=1)
  hidden = models.hidden_states(cfg, params, tokens, mask)[:, p - 1:-1]
  logits = models.logits_from_hidden(cfg, params, hidden)
  if temperature not in (0.0, 1.0):
    logits = logits / temperature
  logprobs = jax.nn.log_softmax(logits, axis=-1)
  logp = jnp.take_along_axis(logprobs, completion[..., None], axis=-1)[..., 0]
  logp = jnp.where(completion_mask, logp, 0.0)
  if not with_entropy:
    return logp
  entropy = -jnp.sum(jnp.exp(logprobs) * logprobs, axis=-1)
  return logp, jnp.where(completion_mask, entropy, 0.0)
