"""Per-token log-probs of completions under a policy (the trainer's side of the sampler check).

The sequence is `prompt (left-padded) ++ completion (right-padded)`; position P-1+t predicts
completion token t. The final hidden states of those T positions go through the fused
unembedding + log-softmax of `kernels.logprob` (impl='auto': tiled XLA loops on CPU and GPU,
Pallas on TPU), so neither the forward nor the backward ever holds [B, T, V] logits: the largest
temporary is one [block_n, block_v] float32 tile. Block sizes come from
`kernels.logprob.block_sizes.TUNED`; see that module for picking them on a GPU or TPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels import logprob
from rl_jax import models


def completion_logprobs(cfg: models.ModelConfig, params, prompt: jax.Array,
                        prompt_mask: jax.Array, completion: jax.Array,
                        completion_mask: jax.Array, *, temperature: float = 1.0,
                        with_entropy: bool = False, group_size: int = 1):
  """Returns logp [B, T] (and entropy [B, T]) of `completion` given `prompt`.

  With `group_size` G > 1 the rows come in contiguous groups of G that share one prompt (as every
  GRPO-style rollout does): the prompt runs through the model once per group, and each row's
  completion attends to its group's prompt keys/values as a prefix (`models.hidden_states_after`).
  Same values as G = 1 (tested), with the prompt's FLOPs divided by G; gradients reach the prompt
  positions from all G completions. Only the first row of each group's prompt is read.

  Args:
    cfg: model config.
    params: policy parameters.
    prompt: [B, P] left-padded prompt tokens; prompt_mask [B, P].
    completion: [B, T] completion tokens; completion_mask [B, T] (True up to and including EOS).
    temperature: logits are divided by it (the sampler reports log-probs the same way); 0 or 1
      means unscaled.
    with_entropy: also return the entropy of each position's distribution.
    group_size: G, rows per shared prompt (static; B must be a multiple of it).

  Values where completion_mask is False are 0.
  """
  p = prompt.shape[1]
  b, t = completion.shape
  if group_size > 1:
    hidden = _shared_prompt_hidden(cfg, params, prompt, prompt_mask, completion, completion_mask,
                                   group_size)
  else:
    tokens = jnp.concatenate([prompt, completion], axis=1)
    mask = jnp.concatenate([prompt_mask, completion_mask], axis=1)
    hidden = models.hidden_states(cfg, params, tokens, mask)[:, p - 1:-1]
  if cfg.final_logit_softcap:  # Soft-capped logits (Gemma 3 option): not fused, [B, T, V].
    return _softcapped_logprobs(cfg, params, hidden, completion, completion_mask, temperature,
                                with_entropy)
  # A tied embedding is passed as stored ([V, D], vocab_major): `models.unembedding` would give
  # its transpose, which the vocabulary-blocked loops would copy whole (and its gradient too).
  if cfg.tie_embeddings:
    w, vocab_major = params["embed_tokens"]["embedding"], True
  else:
    w, vocab_major = models.unembedding(cfg, params), False
  out = logprob.token_logprobs(
      hidden.reshape(b * t, -1).astype(cfg.compute_dtype), w.astype(cfg.compute_dtype),
      completion.reshape(-1), temperature=1.0 if temperature in (0.0, 1.0) else temperature,
      with_entropy=with_entropy, vocab_major=vocab_major)
  logp, entropy = out if with_entropy else (out, None)
  logp = jnp.where(completion_mask, logp.reshape(b, t), 0.0)
  if not with_entropy:
    return logp
  return logp, jnp.where(completion_mask, entropy.reshape(b, t), 0.0)


def _shared_prompt_hidden(cfg: models.ModelConfig, params, prompt, prompt_mask, completion,
                          completion_mask, group_size: int) -> jax.Array:
  """Final hidden states [B, T, D] at positions P-1 .. P+T-2, each group's prompt run once.

  The prompts' per-layer keys/values are gathered to the rows and read as a prefix (no KV cache
  buffers: writing into zero-initialized caches made the backward's compilation take ~1 GB more
  host memory on SmolLM2).
  """
  b, _ = completion.shape
  if b % group_size:
    raise ValueError(f"{b} rows are not whole groups of group_size={group_size}")
  up, um = jnp.asarray(prompt)[::group_size], jnp.asarray(prompt_mask, bool)[::group_size]
  prompt_hidden, (k, v) = models.hidden_states_and_kv(cfg, params, up, um)
  rows = jnp.repeat(jnp.arange(b // group_size), group_size)
  # The last completion token predicts nothing, so it is not fed.
  comp_hidden = models.hidden_states_after(
      cfg, params, (k[:, rows], v[:, rows]), um[rows], jnp.asarray(completion)[:, :-1],
      jnp.asarray(completion_mask, bool)[:, :-1])
  return jnp.concatenate([prompt_hidden[rows, -1:], comp_hidden], axis=1)


def _softcapped_logprobs(cfg: models.ModelConfig, params, hidden, completion, completion_mask,
                         temperature: float, with_entropy: bool):
  """`completion_logprobs` through the full soft-capped logits [B, T, V] (the fused kernel has
  no soft-cap): the sampler's `models.logits_from_hidden`, divided by the temperature."""
  logits = models.logits_from_hidden(cfg, params, hidden)
  if temperature not in (0.0, 1.0):
    logits = logits / temperature
  logz = jax.nn.logsumexp(logits, axis=-1)
  logp = jnp.take_along_axis(logits, completion[..., None], axis=-1)[..., 0] - logz
  logp = jnp.where(completion_mask, logp, 0.0)
  if not with_entropy:
    return logp
  probs = jax.nn.softmax(logits, axis=-1)
  entropy = logz - jnp.sum(probs * logits, axis=-1)
  return logp, jnp.where(completion_mask, entropy, 0.0)
