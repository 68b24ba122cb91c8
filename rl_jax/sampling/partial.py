"""APRIL's partial-rollout engine (docs/methods.md#april, docs/algorithms.md §7): decode until
enough groups finish.

In: R = O·G rows (O groups of G contiguous rows), each with an optional carried prefix [R, T]
(right-padded tokens, mask, behaviour log-probs). Out: `PartialSamples` [R, T]: the prefix, then
this call's tokens. Invariants: a prefix is re-prefilled after the prompt under the current
parameters (its old cache is never reused, so new tokens are the current policy's); the loop
ends once `target_groups` groups have every row ended (EOS or T tokens), or every row has;
each round draws at least one token per unfinished row; token j of this call's continuation of
row r is drawn with fold_in(fold_in(rng, r), j) (`decode.draw_rows`). One jitted call.
"""

from __future__ import annotations

import functools

import chex
import flax.struct
import jax
import jax.numpy as jnp

from rl_jax import models, parallel
from rl_jax.sampling import opening
from rl_jax.sampling.decode import draw_rows
from rl_jax.sampling.strategies import Sampling


@flax.struct.dataclass
class PartialSamples:
  """Completions in completion coordinates [R, T]: the carried prefix, then this call's tokens.

  Attributes:
    tokens, mask, logp: [R, T]; logp is the behaviour log-prob of each token under the policy
      that drew it (a carried prefix keeps its own).
    new: [R, T] bool, tokens drawn by this call (the rest of `mask` is the carried prefix).
    done: [R] bool, the row has ended (EOS or T tokens).
    steps: decode steps run (the first token of each row is not a decode step).
  """

  tokens: jax.Array
  mask: jax.Array
  logp: jax.Array
  new: jax.Array
  done: jax.Array
  steps: jax.Array


def complete_groups(done: jax.Array, group_size: int) -> jax.Array:
  """bool [O]: every row of the group (G contiguous rows) has ended."""
  return done.reshape(-1, group_size).all(axis=-1)


def partial_generate(params, prompt: jax.Array, prompt_mask: jax.Array, prefix: jax.Array,
                     prefix_mask: jax.Array, prefix_logp: jax.Array, prefix_done: jax.Array,
                     rng: jax.Array, *, cfg: models.ModelConfig, strategy: Sampling,
                     max_new_tokens: int, eos_id: int, pad_id: int, group_size: int,
                     target_groups: int) -> PartialSamples:
  """One APRIL round over R = O·G rows.

  Args:
    params: sampler parameters (the current policy).
    prompt, prompt_mask: [R, P] left-padded prompt of every row.
    prefix, prefix_mask, prefix_logp: [R, T] the row's carried completion (right-padded; all
      False for a fresh row) and its behaviour log-probs.
    prefix_done: [R] the carried completion has already ended (a finished row of an unfinished
      group); nothing is drawn for it.
    rng: the round's key.
    cfg, strategy, max_new_tokens (T), eos_id, pad_id: as `decode.generate`.
    group_size: G (static); R must be a multiple of it.
    target_groups: B: stop once B groups are complete (a traced argument: one compilation
      serves every target).
  """
  r = prompt.shape[0]
  if r % group_size:
    raise ValueError(f"partial_generate: {r} rows are not groups of group_size={group_size}")
  if not 1 <= target_groups <= r // group_size:
    raise ValueError(f"partial_generate: target_groups={target_groups} must be in [1, O="
                     f"{r // group_size}]")
  return _partial_generate(params, prompt, prompt_mask, prefix, prefix_mask, prefix_logp,
                           prefix_done, rng, jnp.int32(target_groups), cfg=cfg,
                           strategy=strategy, max_new_tokens=max_new_tokens, eos_id=eos_id,
                           pad_id=pad_id, group_size=group_size)


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "max_new_tokens", "eos_id",
                                             "pad_id", "group_size"))
def _partial_generate(params, prompt, prompt_mask, prefix, prefix_mask, prefix_logp, prefix_done,
                      rng, target_groups, *, cfg, strategy, max_new_tokens, eos_id, pad_id,
                      group_size) -> PartialSamples:
  chex.assert_rank([prompt, prompt_mask, prefix, prefix_mask, prefix_logp], 2)
  r, p = prompt.shape
  t_max = max_new_tokens
  length = prefix_mask.sum(-1, dtype=jnp.int32)  # L_r
  prompt_logits, cache = opening.open_rows(cfg, params, prompt, prompt_mask, copies=1,
                                           cache_size=p + t_max)
  hidden, cache = models.extend(cfg, params, cache, prefix.astype(jnp.int32), prefix_mask)
  # Row r's next token goes to slot P + L_r (per-row write slots, as the refill engine's): the
  # continuation overwrites the prefix block's padding, so P + T slots hold every row.
  cache = cache.replace(index=parallel.shard_batch(p + length))
  last = hidden[jnp.arange(r), jnp.maximum(length - 1, 0)]
  logits = jnp.where((length > 0)[:, None], models.logits_from_hidden(cfg, params, last),
                     prompt_logits)
  remaining = t_max - length  # completion tokens the row may still draw
  rows = jnp.arange(r)

  def draw(logits, done, j, bufs):
    tok, logp, _ = draw_rows(strategy, logits, rng, rows, jnp.full((r,), j))
    tok, bufs = opening.write_token(bufs, j, tok, ~done, logp, pad_id=pad_id)
    done = done | (tok == eos_id) | (j + 1 >= remaining)
    return tok, done, bufs

  bufs = opening.batch_buffers(r, t_max, ((pad_id, jnp.int32), (False, bool),
                                          (0.0, jnp.float32)))
  done = prefix_done.astype(bool) | (remaining <= 0)
  tok, done, bufs = draw(logits, done, 0, bufs)

  def cond(loop):
    j, _, _, done, _ = loop
    enough = complete_groups(done, group_size).sum() >= target_groups
    return (j < t_max) & ~enough & ~jnp.all(done)

  def body(loop):
    j, cache, tok, done, bufs = loop
    logits, cache = models.decode_step(cfg, params, cache, tok)
    tok, done, bufs = draw(logits, done, j, bufs)
    return j + 1, cache, tok, done, bufs

  j, _, _, done, (new_tok, new_mask, new_logp) = jax.lax.while_loop(
      cond, body, (jnp.int32(1), cache, tok, done, bufs))
  # Completion position c holds the prefix for c < L_r, else this call's token c - L_r.
  c = jnp.arange(t_max)[None, :]
  src = jnp.clip(c - length[:, None], 0, t_max - 1)
  from_prefix = c < length[:, None]
  take = lambda x: jnp.take_along_axis(x, src, axis=1)
  new = ~from_prefix & take(new_mask)
  return PartialSamples(
      tokens=jnp.where(from_prefix, prefix, jnp.where(new, take(new_tok), pad_id)),
      mask=from_prefix | new,
      logp=jnp.where(from_prefix, prefix_logp, jnp.where(new, take(new_logp), 0.0)),
      new=new, done=done, steps=j - 1)
