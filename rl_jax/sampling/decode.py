"""Linear sampling: prefill, then a `lax.scan` of decode steps over an explicit KV cache.

Rows finish independently at EOS; finished rows keep decoding (shapes stay static) but their tokens
are padding and their mask is 0. Everything runs on device in one jitted call: no per-token host
sync.
"""

from __future__ import annotations

import functools

import chex
import flax.struct
import jax
import jax.numpy as jnp

from rl_jax import models, parallel
from rl_jax.sampling.strategies import Sampling


@flax.struct.dataclass
class Samples:
  """Sampled completions.

  Attributes:
    tokens: [B, T] int32 completion tokens (pad after EOS).
    mask: [B, T] bool, True for sampled tokens up to and including EOS.
    logp: [B, T] float32 log-prob of each sampled token under the temperature-scaled policy
      (0 where mask is False).
    entropy: [B, T] float32 entropy of that distribution (0 where mask is False).
  """

  tokens: jax.Array
  mask: jax.Array
  logp: jax.Array
  entropy: jax.Array


def decode_loop(cfg: models.ModelConfig, params, cache: models.KVCache, logits: jax.Array,
                rng: jax.Array, *, strategy: Sampling, max_new_tokens: int, eos_id: int,
                pad_id: int = 0) -> tuple[Samples, models.KVCache]:
  """Samples `max_new_tokens` tokens from next-token `logits` [B, V] and the cache behind them.

  The first token comes from `logits`; each later one from a `decode_step` inside a `lax.scan`.
  Token t is drawn with fold_in(rng, t). Returns the samples and the cache after the last fed
  token (the last sampled token is not fed).
  """
  b = logits.shape[0]

  def pick(logits, done, t):
    tok, logp, ent = strategy.draw(logits, jax.random.fold_in(rng, t))
    live = ~done
    tok = jnp.where(live, tok, pad_id)
    return tok, live, jnp.where(live, logp, 0.0), jnp.where(live, ent, 0.0), done | (tok == eos_id)

  first = pick(logits, jnp.zeros((b,), bool), 0)

  def step(carry, t):
    cache, tok, done = carry
    logits, cache = models.decode_step(cfg, params, cache, tok)
    out = pick(logits, done, t)
    return (cache, out[0], out[4]), out[:4]

  (cache, _, _), rest = jax.lax.scan(step, (cache, first[0], first[4]),
                                     jnp.arange(1, max_new_tokens))
  stacked = [jnp.concatenate([f[:, None], r.T], axis=1) for f, r in zip(first[:4], rest)]
  samples = Samples(tokens=stacked[0], mask=stacked[1], logp=stacked[2], entropy=stacked[3])
  return samples, cache


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "max_new_tokens", "eos_id",
                                             "pad_id", "cache_size", "num_samples"))
def generate_with_cache(params, prompt: jax.Array, prompt_mask: jax.Array, rng: jax.Array, *,
                        cfg: models.ModelConfig, strategy: Sampling, max_new_tokens: int,
                        eos_id: int, pad_id: int = 0, cache_size: int = 0,
                        num_samples: int = 1) -> tuple[Samples, models.KVCache]:
  """`generate`, also returning the KV cache (`cache_size` slots; default P + T).

  Completion token j of row r sits in slot P + j (j < T − 1; the last token is not fed), so a
  tree sampler can fork a row at any position without recomputing its prefix.
  """
  chex.assert_rank([prompt, prompt_mask], 2)
  chex.assert_equal_shape([prompt, prompt_mask])
  chex.assert_type(prompt, int)
  b, p = prompt.shape
  # The cache is created here, so it gets the batch sharding explicitly (under a context mesh).
  cache = parallel.shard_batch(models.init_cache(cfg, b, cache_size or p + max_new_tokens))
  logits, cache = models.prefill(cfg, params, cache, prompt, prompt_mask)
  if num_samples > 1:
    # Each prompt is prefilled once; its samples start from copies of its cache rows.
    rows = jnp.repeat(jnp.arange(b), num_samples)
    cache, logits = parallel.shard_batch((cache.take_rows(rows), logits[rows]))
  return decode_loop(cfg, params, cache, logits, rng, strategy=strategy,
                     max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id)


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "max_new_tokens", "eos_id",
                                             "pad_id", "num_samples"))
def generate(params, prompt: jax.Array, prompt_mask: jax.Array, rng: jax.Array, *,
             cfg: models.ModelConfig, strategy: Sampling, max_new_tokens: int, eos_id: int,
             pad_id: int = 0, num_samples: int = 1) -> Samples:
  """Samples `max_new_tokens` tokens after left-padded prompts.

  Args:
    params: policy parameters.
    prompt: [B, P] int32, left-padded.
    prompt_mask: [B, P] bool, True on real prompt tokens (every row needs at least one).
    rng: PRNG key; token t is drawn with fold_in(rng, t).
    cfg: the model config (static).
    strategy: a `Sampling` (static).
    max_new_tokens: T, the completion length (static).
    eos_id: token that ends a row.
    pad_id: token written after EOS.
    num_samples: G, samples per prompt (static). The output has B * G rows, prompt b's samples
      in rows b*G .. b*G+G-1 (the order of `np.repeat(prompt, G, 0)`), and each prompt is
      prefilled once, not G times.
  """
  return generate_with_cache(params, prompt, prompt_mask, rng, cfg=cfg, strategy=strategy,
                             max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                             num_samples=num_samples)[0]
