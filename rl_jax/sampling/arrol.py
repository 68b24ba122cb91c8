"""ARRoL online rollout pruning (docs/methods.md#arrol, docs/algorithms.md §6.6; the keep rule
is reconstructed [R]).

In: B left-padded prompts, a quality head, `ArrolOptions` (N₀ rows per prompt, N survivors,
checkpoint t_p, a `KEEP_RULES` rule). Out: `ArrolSamples`, the B·N survivors [B·N, T] and the
head's scores and features. All N₀ rows decode to t_p; the head reads each row's final-normed
hidden state there; the kept rows' cache, logits and buffers are gathered (`opening.fork_rows`)
and decoding continues on them only. Invariant: token t of original row r is drawn with
fold_in(fold_in(rng, r), t), so a survivor equals row r of `decode.generate(num_samples=N₀,
row_keys=True)`, pruning or not. One jitted call; both phases stop once every row has ended.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import chex
import flax.struct
import jax
import jax.numpy as jnp

from rl_jax import models
from rl_jax.models import heads
from rl_jax.registry import Registry
from rl_jax.sampling import opening
from rl_jax.sampling.decode import Samples, draw_rows
from rl_jax.sampling.strategies import Sampling

KEEP_RULES = Registry("ARRoL keep rule")


def _order(scores: jax.Array) -> jax.Array:
  """Indices of each row of scores [B, N₀] by ĝ descending, ties by index ascending."""
  return jnp.argsort(-scores, axis=-1, stable=True)


@KEEP_RULES.register("balanced")
def keep_balanced(scores: jax.Array, keep: int, rho: float) -> jax.Array:
  """`arrol_reconstructed` (§6.6 [R]): the ⌈ρN⌉ highest and N − ⌈ρN⌉ lowest ĝ of each group.

  Returns the kept row indices [B, N] within each group, ascending. §6.6's worked test: N₀=6,
  N=4, ρ=0.5, ĝ=[0.9, 0.1, 0.6, 0.4, 0.8, 0.2] keeps {0, 4} and {1, 5}.
  """
  n0 = scores.shape[-1]
  top = math.ceil(rho * keep)
  order = _order(scores)
  picked = jnp.concatenate([order[..., :top], order[..., n0 - (keep - top):]], axis=-1)
  return jnp.sort(picked, axis=-1)


@KEEP_RULES.register("lowest")
def keep_highest(scores: jax.Array, keep: int, rho: float) -> jax.Array:
  """Prune the N₀ − N rows predicted most likely to fail (keep the N highest ĝ); no balance."""
  del rho
  return jnp.sort(_order(scores)[..., :keep], axis=-1)


@dataclasses.dataclass(frozen=True)
class ArrolOptions:
  """oversample: N₀ rows sampled per prompt; keep: N survivors per prompt (the RL group);
  prune_at: t_p, completion tokens before the checkpoint (1 <= t_p < T); rule: a `KEEP_RULES`
  name; rho: ρ, the survivors' target predicted positive fraction."""

  oversample: int
  keep: int
  prune_at: int
  rule: str = "balanced"
  rho: float = 0.5

  @classmethod
  def from_config(cls, config) -> "ArrolOptions":
    """`config.rl.arrol` -> ArrolOptions: N = rl.group_size survivors of N₀ = ⌈oversample·N⌉,
    checkpoint t_p = max(1, round(prune_frac·T)) (ValueError naming the field when out of
    range)."""
    rl, c = config.rl, config.rl.arrol
    if not (isinstance(c.oversample, (int, float)) and math.isfinite(c.oversample)
            and c.oversample >= 1):
      raise ValueError(f"config.rl.arrol.oversample={c.oversample!r}: expected a finite number "
                       "in [1, inf) (N0 = ceil(oversample * group_size) rows sampled per prompt)")
    t = config.sampling.max_new_tokens
    if not 0 < c.prune_frac < 1 or not 1 <= round(c.prune_frac * t) < t:
      raise ValueError(f"config.rl.arrol.prune_frac={c.prune_frac!r} puts the checkpoint at "
                       f"round(prune_frac * max_new_tokens={t}) = {round(c.prune_frac * t)} "
                       f"tokens; expected a fraction in (0, 1) giving 1 <= t_p < {t}")
    if not (isinstance(c.lr, (int, float)) and math.isfinite(c.lr) and c.lr > 0):
      raise ValueError(f"config.rl.arrol.lr={c.lr!r}: expected a finite number in (0, inf)")
    if not isinstance(c.updates, int) or c.updates < 0:
      raise ValueError(f"config.rl.arrol.updates={c.updates!r}: expected an integer >= 0")
    n = rl.group_size
    return cls(oversample=int(math.ceil(c.oversample * n - 1e-9)), keep=n,
               prune_at=int(round(c.prune_frac * t)), rule=c.rule, rho=c.rho)

  @classmethod
  def check_config(cls, config) -> None:
    """ValueError naming the field for `config.rl.arrol` out of range."""
    cls.from_config(config)

  def __post_init__(self):
    if not 1 <= self.keep <= self.oversample:
      raise ValueError(f"ARRoL keeps N={self.keep} of N0={self.oversample} rows per prompt; "
                       "expected 1 <= N <= N0 (config.rl.group_size, config.rl.arrol.oversample)")
    if self.prune_at < 1:
      raise ValueError(f"config.rl.arrol.prune_frac gives a checkpoint at t_p={self.prune_at} "
                       "tokens; expected t_p >= 1")
    if self.rule not in KEEP_RULES:
      raise ValueError(f"config.rl.arrol.rule={self.rule!r}: expected one of "
                       f"{list(KEEP_RULES.names())}")
    if not 0.0 <= self.rho <= 1.0:
      raise ValueError(f"config.rl.arrol.rho={self.rho!r}; expected a number in [0, 1]")


@flax.struct.dataclass
class ArrolSamples:
  """samples: the survivors [B·N, T] (prompt b's in rows b·N ..); survivors [B, N]: their row
  within the group of N₀; scores [B, N₀]: ĝ at the checkpoint; features [B·N, D]: the survivors'
  hidden states that ĝ read (the head's training inputs); pruned_live: pruned rows that had not
  ended at the checkpoint; pruned_tokens: completion tokens the pruned rows had drawn;
  slot_steps: token draws spent (rows x draws in each phase); saved_slot_steps: draws the pruned
  rows would have taken alongside the survivors after the checkpoint ((N₀ − N)·B per step)."""

  samples: Samples
  survivors: jax.Array
  scores: jax.Array
  features: jax.Array
  pruned_live: jax.Array
  pruned_tokens: jax.Array
  slot_steps: jax.Array
  saved_slot_steps: jax.Array


@flax.struct.dataclass
class _State:
  cache: models.KVCache
  logits: jax.Array  # [R, V] next-token logits
  done: jax.Array    # [R] the row has ended
  feat: jax.Array    # [R, D] hidden state after the row's last token so far
  rows: jax.Array    # [R] original row id (the sampling key)
  bufs: tuple        # tokens, mask, logp, entropy [R, T]


def _pick(st: _State, rng, t, *, strategy: Sampling, eos_id: int, pad_id: int):
  """Draws token t of every row and writes it; returns (state, the tokens)."""
  r = st.done.shape[0]
  tok, logp, ent = draw_rows(strategy, st.logits, rng, st.rows, jnp.full((r,), t))
  live = ~st.done
  tok, bufs = opening.write_token(st.bufs, t, tok, live, logp, ent, pad_id=pad_id)
  return st.replace(done=st.done | (tok == eos_id), bufs=bufs), tok, live


def _pick_and_feed(cfg, params, rng, loop, *, strategy, eos_id, pad_id):
  """One decode step: draw token t, feed it, keep the hidden state of the rows it extended."""
  t, st = loop
  st, tok, live = _pick(st, rng, t, strategy=strategy, eos_id=eos_id, pad_id=pad_id)
  hidden, cache = models.extend(cfg, params, st.cache, tok[:, None],
                                jnp.ones((tok.shape[0], 1), bool))
  h = hidden[:, 0]
  feat = jnp.where(live[:, None], h.astype(jnp.float32), st.feat)
  return t + 1, st.replace(cache=cache, logits=models.logits_from_hidden(cfg, params, h),
                           feat=feat)


def _run(step, st: _State, start: int, end: int):
  """Decode steps start .. end - 1 (pick + feed) while a row is live; returns (state, steps)."""
  cond = lambda loop: (loop[0] < end) & ~jnp.all(loop[1].done)
  t, st = jax.lax.while_loop(cond, step, (jnp.int32(start), st))
  return st, t - start


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "max_new_tokens", "eos_id",
                                             "pad_id", "options"))
def arrol_generate(params, head: dict, prompt: jax.Array, prompt_mask: jax.Array,
                   rng: jax.Array, *, cfg: models.ModelConfig, strategy: Sampling,
                   max_new_tokens: int, eos_id: int, pad_id: int = 0,
                   options: ArrolOptions) -> ArrolSamples:
  """Samples N₀ completions per prompt, prunes to N at t_p with the quality head (module doc).

  Args:
    params: policy parameters.
    head: the quality head `{'head': {'kernel': [D], 'bias': []}}` (`heads.head_logits`).
    prompt: [B, P] left-padded prompts; prompt_mask [B, P].
    rng: PRNG key; token t of original row r (prompt r // N₀) uses fold_in(fold_in(rng, r), t).
    cfg, strategy, max_new_tokens (T), eos_id, pad_id: as `decode.generate`.
    options: `ArrolOptions` (static); needs t_p < T.
  """
  chex.assert_rank([prompt, prompt_mask], 2)
  b, p = prompt.shape
  n0, n, t_max, t_p = options.oversample, options.keep, max_new_tokens, options.prune_at
  if t_p >= t_max:
    raise ValueError(f"ARRoL checkpoint t_p={t_p} must be < max_new_tokens={t_max}")
  logits, cache = opening.open_rows(cfg, params, prompt, prompt_mask, copies=n0,
                                    cache_size=p + t_max)
  r0 = b * n0
  fill = ((pad_id, jnp.int32), (False, bool), (0.0, jnp.float32), (0.0, jnp.float32))
  bufs = opening.batch_buffers(r0, t_max, fill)
  st = _State(cache=cache, logits=logits, done=jnp.zeros((r0,), bool),
              feat=jnp.zeros((r0, cfg.d_model), jnp.float32), rows=jnp.arange(r0), bufs=bufs)
  step = functools.partial(_pick_and_feed, cfg, params, rng, strategy=strategy, eos_id=eos_id,
                           pad_id=pad_id)
  # Phase 1: tokens 0 .. t_p - 1 of all N₀ rows; the checkpoint reads the state after them.
  st, steps1 = _run(step, st, 0, t_p)
  scores = jax.nn.sigmoid(heads.head_logits(head, st.feat)).reshape(b, n0)
  kept = KEEP_RULES.get(options.rule)(scores, n, options.rho)  # [B, N]
  flat = (jnp.arange(b)[:, None] * n0 + kept).reshape(-1)
  pruned = jnp.ones((r0,), bool).at[flat].set(False)
  pruned_live = jnp.sum(pruned & ~st.done)
  pruned_tokens = jnp.sum(jnp.where(pruned[:, None], st.bufs[1], False))
  (logits, done, feat, bufs), cache = opening.fork_rows(
      flat, st.cache, (st.logits, st.done, st.feat, st.bufs))
  st = _State(cache=cache, logits=logits, done=done, feat=feat, rows=flat, bufs=bufs)
  features = st.feat
  # Phase 2: the survivors' tokens t_p .. T - 2 (pick + feed), then token T - 1 (pick only).
  st, steps2 = _run(step, st, t_p, t_max - 1)
  last = jnp.where(jnp.all(st.done), 0, 1)
  st, _, _ = _pick(st, rng, t_max - 1, strategy=strategy, eos_id=eos_id, pad_id=pad_id)
  draws2 = steps2 + last
  return ArrolSamples(
      samples=Samples(*st.bufs), survivors=kept, scores=scores, features=features,
      pruned_live=pruned_live, pruned_tokens=pruned_tokens,
      slot_steps=r0 * steps1 + b * n * draws2, saved_slot_steps=(r0 - b * n) * draws2)
