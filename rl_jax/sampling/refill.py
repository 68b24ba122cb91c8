"""Slot refill (continuous batching): S decode slots serve Q = B·G requests; a slot whose request
ends takes the next queued one at once.

In: B left-padded prompts, G samples each, S slots. Out: `RefillSamples` [Q, T] in the row order
of `decode.generate(num_samples=G)` (request q: sample q mod G of prompt q // G), and the work
spent (`slot_steps` = Q + S per loop iteration). Invariants: the B prompts are prefilled once
(`opening.open_rows`); a refill copies its prompt's cache rows into the slot's first P cache slots
and draws the first token from the prompt's stored logits; each slot writes its own cache slot
(per-row `KVCache.index`), older slots masked out, so a slot attends to exactly the linear
sampler's row; token t of request q is drawn with fold_in(fold_in(rng, q), t), so the samples
equal `decode.generate(row_keys=True)`'s. One jitted `lax.while_loop`, static shapes.
"""

from __future__ import annotations

import functools

import chex
import flax.struct
import jax
import jax.numpy as jnp

from rl_jax import models, parallel
from rl_jax.sampling import opening
from rl_jax.sampling.decode import Samples, draw_rows
from rl_jax.sampling.strategies import Sampling


@flax.struct.dataclass
class RefillSamples:
  """`samples` [Q, T] in request order, and the work spent: `iterations` of the decode loop (one
  `decode_step` of all S slots each) and `slot_steps` = Q + S · iterations token draws (each
  request's first token from its prompt's logits, then S per decode step)."""

  samples: Samples
  iterations: jax.Array
  slot_steps: jax.Array


@flax.struct.dataclass
class _Slots:
  """Loop state. req: [S] request each slot serves (Q = none); t: [S] index of its next token;
  tok: [S] token to feed next; live: [S] serving an unfinished request; queued: next request."""

  cache: models.KVCache
  req: jax.Array
  t: jax.Array
  tok: jax.Array
  live: jax.Array
  queued: jax.Array
  out: tuple  # tokens, mask, logp, entropy: [Q, T] each


def _write(out: tuple, req: jax.Array, t: jax.Array, ok: jax.Array, vals: tuple) -> tuple:
  """Writes vals[i] at (req[i], t[i]) where ok[i]; other writes go out of range and are dropped."""
  q = out[0].shape[0]
  req = jnp.where(ok, req, q)
  return tuple(buf.at[req, t].set(v.astype(buf.dtype), mode="drop") for buf, v in zip(out, vals))


def _refill(s: _Slots, prompt_cache: models.KVCache, prompt_logits: jax.Array, rng: jax.Array,
            limits: jax.Array, *, strategy: Sampling, group: int, num_requests: int,
            eos_id: int) -> _Slots:
  """Every slot without a live request takes the next queued one (while the queue lasts): its
  prompt's cache rows and first token (drawn from the prompt's stored logits)."""
  free = ~s.live
  take = free & (s.queued + jnp.cumsum(free) - 1 < num_requests)
  req = jnp.where(take, s.queued + jnp.cumsum(free) - 1, s.req)
  b = jnp.minimum(req, num_requests - 1) // group  # prompt of each slot's request
  p = prompt_cache.size

  def put(buf, src):  # [B, (L,) KVH, S, hd]: slots are axis -2 in both layer layouts
    pick = take.reshape(-1, *([1] * (buf.ndim - 1)))
    head = jnp.where(pick, src[b], buf[..., :p, :])
    return jax.lax.dynamic_update_slice_in_dim(buf, head, 0, axis=buf.ndim - 2)

  c = s.cache
  prompt_rows = jnp.pad(prompt_cache.mask[b], ((0, 0), (0, c.size - p)))  # later slots: False
  mask = jnp.where(take[:, None], prompt_rows, c.mask)
  cache = c.map_kv(put, prompt_cache).replace(
      mask=mask, pos=jnp.where(take, prompt_cache.pos[b], c.pos),
      index=jnp.where(take, p, c.index))
  tok, logp, ent = draw_rows(strategy, prompt_logits[b], rng, req, jnp.zeros_like(req))
  out = _write(s.out, req, jnp.zeros_like(req), take, (tok, jnp.ones_like(take), logp, ent))
  ended = (tok == eos_id) | (limits[jnp.minimum(req, num_requests - 1)] <= 1)
  return _Slots(cache=cache, req=req, t=jnp.where(take, 1, s.t),
                tok=jnp.where(take, tok, s.tok), live=jnp.where(take, ~ended, s.live),
                queued=s.queued + take.sum(dtype=jnp.int32), out=out)


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "max_new_tokens", "eos_id",
                                             "pad_id", "num_samples", "num_slots"))
def refill_generate(params, prompt: jax.Array, prompt_mask: jax.Array, rng: jax.Array, *,
                    cfg: models.ModelConfig, strategy: Sampling, max_new_tokens: int,
                    eos_id: int, pad_id: int = 0, num_samples: int = 1,
                    num_slots: int = 0, max_lengths: jax.Array | None = None) -> RefillSamples:
  """Samples G = `num_samples` completions of each of B left-padded prompts in S decode slots.

  Args:
    params, prompt [B, P], prompt_mask [B, P], cfg, strategy, max_new_tokens (T), eos_id,
      pad_id, num_samples: as `decode.generate`; the output rows are in the same order.
    rng: PRNG key; token t of request q (row q of the output) is drawn with
      fold_in(fold_in(rng, q), t).
    num_slots: S, rows decoded at once (static); 0 = B·G (no refill: the linear sampler's work
      with row keys). S < B·G trades batch width for fewer idle slot-steps.
    max_lengths: optional [B·G] int, each request's own length limit (<= T), as in
      `decode.generate`.

  Returns:
    `RefillSamples` with `samples` [B·G, T] and the loop's work counts.
  """
  chex.assert_rank([prompt, prompt_mask], 2)
  chex.assert_equal_shape([prompt, prompt_mask])
  b, p = prompt.shape
  q, t_max = b * num_samples, max_new_tokens
  s = num_slots or q
  if not 0 < s <= q:
    raise ValueError(f"num_slots={num_slots} must be in [1, B·G={q}] (0 = B·G)")
  prompt_logits, prompt_cache = opening.open_rows(cfg, params, prompt, prompt_mask, copies=1,
                                                  cache_size=p)
  cache = parallel.shard_batch(models.init_cache(cfg, s, p + t_max))
  cache = cache.replace(index=parallel.shard_batch(jnp.full((s,), p, jnp.int32)))
  fill = ((pad_id, jnp.int32), (False, bool), (0.0, jnp.float32), (0.0, jnp.float32))
  out = opening.batch_buffers(q, t_max, fill)
  limits = jnp.full((q,), t_max, jnp.int32)
  if max_lengths is not None:
    limits = jnp.minimum(limits, jnp.asarray(max_lengths, jnp.int32))
  refill = functools.partial(_refill, prompt_cache=prompt_cache, prompt_logits=prompt_logits,
                             rng=rng, limits=limits, strategy=strategy, group=num_samples,
                             num_requests=q, eos_id=eos_id)
  zeros = jnp.zeros((s,), jnp.int32)
  state = refill(_Slots(cache=cache, req=jnp.full((s,), q, jnp.int32), t=zeros, tok=zeros,
                        live=jnp.zeros((s,), bool), queued=jnp.int32(0), out=out))

  def body(loop):
    it, st = loop
    logits, cache = models.decode_step(cfg, params, st.cache, st.tok)
    tok, logp, ent = draw_rows(strategy, logits, rng, st.req, st.t)
    out = _write(st.out, st.req, st.t, st.live, (tok, st.live, logp, ent))
    ended = (tok == eos_id) | (st.t + 1 >= limits[jnp.minimum(st.req, q - 1)])
    st = st.replace(cache=cache, t=st.t + 1, tok=tok, live=st.live & ~ended, out=out)
    st = jax.lax.cond(jnp.any(~st.live) & (st.queued < q), refill, lambda x: x, st)
    return it + 1, st

  def cond(loop):  # A request is live or still queued (all first tokens may have been EOS).
    return jnp.any(loop[1].live) | (loop[1].queued < q)

  iterations, state = jax.lax.while_loop(cond, body, (jnp.int32(0), state))
  return RefillSamples(samples=Samples(*state.out), iterations=iterations,
                       slot_steps=q + iterations * s)
