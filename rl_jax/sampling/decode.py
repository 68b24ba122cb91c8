"""Linear sampling: prefill, then decode steps over an explicit KV cache.

Rows finish independently at EOS; a finished row keeps its slot (shapes stay static) but its
tokens are padding and its mask is 0. By default the decode loop stops once every row has ended
(`exit_every`, a `lax.while_loop` over chunks of steps); `exit_every=0` is the fixed `lax.scan` of
T - 1 steps, with the same outputs. Everything runs on device in one jitted call: no per-token
host sync.
"""

from __future__ import annotations

import functools

import chex
import flax.struct
import jax
import jax.numpy as jnp

from rl_jax import models, parallel
from rl_jax.sampling import opening
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


def draw_rows(strategy: Sampling, logits: jax.Array, rng: jax.Array, rows: jax.Array,
              t: jax.Array):
  """Per-row keys: row i's token is drawn from logits[i] with fold_in(fold_in(rng, rows[i]), t[i]).

  So a request's tokens depend only on (rng, its request id, the token index), not on the batch
  it shares a step with: the slot-refill engine and a linear decode with `row_keys=True` (rows =
  request ids) draw the same tokens.
  """
  keys = jax.vmap(lambda r, s: jax.random.fold_in(jax.random.fold_in(rng, r), s))(rows, t)
  tok, logp, ent = jax.vmap(lambda x, k: strategy.draw(x[None], k))(logits, keys)
  return tok[:, 0], logp[:, 0], ent[:, 0]


def _pick(strategy: Sampling, rng: jax.Array, eos_id: int, pad_id: int, row_keys: bool,
          limits, logits: jax.Array, done: jax.Array, t: jax.Array):
  """Token t of every row: (tok, live, logp, entropy, done'); rows already done get pad_id; a
  row also ends with its token limits[row] - 1 (limits None: no per-row limit)."""
  if row_keys:
    b = logits.shape[0]
    tok, logp, ent = draw_rows(strategy, logits, rng, jnp.arange(b), jnp.full((b,), t))
  else:
    tok, logp, ent = strategy.draw(logits, jax.random.fold_in(rng, t))
  live = ~done
  tok = jnp.where(live, tok, pad_id)
  ended = done | (tok == eos_id)
  if limits is not None:
    ended |= t + 1 >= limits
  return tok, live, jnp.where(live, logp, 0.0), jnp.where(live, ent, 0.0), ended


def decode_loop(cfg: models.ModelConfig, params, cache: models.KVCache, logits: jax.Array,
                rng: jax.Array, *, strategy: Sampling, max_new_tokens: int, eos_id: int,
                pad_id: int = 0, exit_every: int = 1,
                row_keys: bool = False,
                max_lengths: jax.Array | None = None) -> tuple[Samples, models.KVCache]:
  """Samples up to `max_new_tokens` tokens from next-token `logits` [B, V] and their cache.

  The first token comes from `logits`; each later one from a `decode_step`. Token t is drawn with
  fold_in(rng, t) (with `row_keys`, row r's with fold_in(fold_in(rng, r), t): `draw_rows`), so
  the samples do not depend on how the steps are looped. `max_lengths` [B] (optional): each
  row's own length limit (<= T); a row ends at EOS or at its limit, as every row does at T.

  `exit_every` = k >= 1 (stop when done): the T - 1 decode steps run as a `lax.while_loop` over
  chunks of k steps (a `lax.scan` each; the (T - 1) mod k leftover steps first), which ends as soon
  as every row has sampled EOS, checked after each chunk (at most k - 1 steps past the last EOS).
  The outputs are those of the fixed scan (`exit_every=0`, always T - 1 steps) bit for bit: a row
  that has ended only writes padding, which is what the buffers start as. The returned cache is
  the one after the last fed token; with an early exit its later slots are left unwritten (index
  and mask say so), where the fixed scan fills them with padding keys.
  """
  if exit_every < 0:
    raise ValueError(f"exit_every must be >= 0 (0 = fixed scan), got {exit_every}")
  b = logits.shape[0]
  pick = functools.partial(_pick, strategy, rng, eos_id, pad_id, row_keys, max_lengths)
  first = pick(logits, jnp.zeros((b,), bool), 0)

  def step(carry, t):
    cache, tok, done = carry
    logits, cache = models.decode_step(cfg, params, cache, tok)
    out = pick(logits, done, t)
    return (cache, out[0], out[4]), out[:4]

  n = max_new_tokens - 1
  if exit_every == 0 or n == 0:
    (cache, _, _), rest = jax.lax.scan(step, (cache, first[0], first[4]), jnp.arange(1, n + 1))
    stacked = [jnp.concatenate([f[:, None], r.T], axis=1) for f, r in zip(first[:4], rest)]
    return Samples(*stacked), cache

  # Output buffers [B, T], pre-filled with what an ended row writes; column 0 = the first token.
  fill = (pad_id, False, 0.0, 0.0)
  bufs = tuple(parallel.shard_batch(jnp.full((b, max_new_tokens), v, f.dtype).at[:, 0].set(f))
               for v, f in zip(fill, first[:4]))

  def chunk(state, start, length: int):
    """Runs decode steps start .. start + length - 1 and writes their outputs into the buffers."""
    cache, tok, done, bufs = state
    (cache, tok, done), rest = jax.lax.scan(step, (cache, tok, done), start + jnp.arange(length))
    bufs = tuple(jax.lax.dynamic_update_slice_in_dim(buf, r.T, start, axis=1)
                 for buf, r in zip(bufs, rest))
    return cache, tok, done, bufs

  k = min(exit_every, n)
  state = (cache, first[0], first[4], bufs)
  if n % k:
    state = chunk(state, jnp.int32(1), n % k)

  def cond(loop):
    t, (_, _, done, _) = loop
    return (t <= n) & ~jnp.all(done)

  def body(loop):
    t, state = loop
    return t + k, chunk(state, t, k)

  _, (cache, _, _, bufs) = jax.lax.while_loop(cond, body, (jnp.int32(1 + n % k), state))
  return Samples(*bufs), cache


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "max_new_tokens", "eos_id",
                                             "pad_id", "cache_size", "num_samples",
                                             "exit_every", "row_keys"))
def generate_with_cache(params, prompt: jax.Array, prompt_mask: jax.Array, rng: jax.Array, *,
                        cfg: models.ModelConfig, strategy: Sampling, max_new_tokens: int,
                        eos_id: int, pad_id: int = 0, cache_size: int = 0,
                        num_samples: int = 1,
                        exit_every: int = 1,
                        row_keys: bool = False,
                        max_lengths: jax.Array | None = None) -> tuple[Samples, models.KVCache]:
  """`generate`, also returning the KV cache (`cache_size` slots; default P + T).

  Completion token j of row r sits in slot P + j (j < T − 1; the last token is not fed), so a
  tree sampler can fork a row at any position without recomputing its prefix.
  """
  chex.assert_rank([prompt, prompt_mask], 2)
  chex.assert_equal_shape([prompt, prompt_mask])
  chex.assert_type(prompt, int)
  logits, cache = opening.open_rows(cfg, params, prompt, prompt_mask, copies=num_samples,
                                    cache_size=cache_size or prompt.shape[1] + max_new_tokens)
  return decode_loop(cfg, params, cache, logits, rng, strategy=strategy,
                     max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                     exit_every=exit_every, row_keys=row_keys, max_lengths=max_lengths)


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "max_new_tokens", "eos_id",
                                             "pad_id", "num_samples", "exit_every",
                                             "row_keys"))
def generate(params, prompt: jax.Array, prompt_mask: jax.Array, rng: jax.Array, *,
             cfg: models.ModelConfig, strategy: Sampling, max_new_tokens: int, eos_id: int,
             pad_id: int = 0, num_samples: int = 1, exit_every: int = 1,
             row_keys: bool = False, max_lengths: jax.Array | None = None) -> Samples:
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
    exit_every: stop decoding once every row has ended, checked every `exit_every` steps
      (static); 0 runs all T - 1 decode steps (the fixed scan). Same outputs either way.
    row_keys: draw row r's token t with fold_in(fold_in(rng, r), t) (`draw_rows`) instead of
      one key per step: the keys of the slot-refill engine (`rl_jax.sampling.refill`).
    max_lengths: optional [B·G] int, each row's own length limit (<= T): the row ends there as
      at EOS (per-request token budgets; the decode benchmark's long-tailed lengths).
  """
  return generate_with_cache(params, prompt, prompt_mask, rng, cfg=cfg, strategy=strategy,
                             max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                             num_samples=num_samples, exit_every=exit_every,
                             row_keys=row_keys, max_lengths=max_lengths)[0]
