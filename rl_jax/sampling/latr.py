"""LATR, lookahead tree-based rollouts (docs/methods.md#latr, docs/algorithms.md §3.1), in one
jitted `lax.scan` over K slots per prompt.

In: B left-padded prompts, `LatrOptions`. Out: `TreeSamples` [B·K, T], root b owning rows
b·K .. b·K + K − 1. Invariants: a branch copies its parent's buffers and KV-cache row
(`opening.fork_rows`), so a shared prefix is decoded once; `logp` is each chosen token's
log-prob under the rollout strategy's temperature-scaled distribution (the trainer's, a test);
`decode_tokens` counts the tokens live rows decoded, shared prefixes once.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import flax.struct
import jax
import jax.numpy as jnp

from rl_jax import models, parallel
from rl_jax.sampling import opening, tree_metrics
from rl_jax.sampling.strategies import Sampling


@dataclasses.dataclass(frozen=True)
class LatrOptions:
  """LATR hyper-parameters (static; defaults: the reference's math scripts).

  Attributes:
    tau_abs: a rank-2 token branches only if its raw probability exceeds this.
    tau_rel: ... and its gap to the top-1 probability is below this.
    windows: lookahead windows r (steps after a fork at which the child is compared).
    ed_threshold: prune when normalised edit distance < this (None = off; countdown uses 0.4).
    sm_threshold: prune when the suffix-match score > this (None = off).
    rl_threshold: prune when ROUGE-L F1 > this (None = off).
    thres_init, thres_decay: the exit threshold θ_s = thres_init − thres_decay·s/T.
    force_return_step: the tree phase ends at this step at the latest (0 = T).
    fill: fill free slots at the end with a copy of the root's first row.
  """

  tau_abs: float = 0.15
  tau_rel: float = 0.25
  windows: tuple[int, ...] = (20, 30, 50)
  ed_threshold: Optional[float] = None
  sm_threshold: Optional[float] = 0.2
  rl_threshold: Optional[float] = 0.5
  thres_init: float = 0.98
  thres_decay: float = 0.05
  force_return_step: int = 0
  fill: bool = True

  @classmethod
  def from_config(cls, config) -> "LatrOptions":
    """`config.rl.latr` -> LatrOptions (thresholds < 0 disable a pruning criterion)."""
    c = config.rl.latr
    off = lambda x: None if x < 0 else float(x)
    return cls(
        tau_abs=c.tau_abs, tau_rel=c.tau_rel, windows=tuple(c.windows),
        ed_threshold=off(c.ed_threshold), sm_threshold=off(c.sm_threshold),
        rl_threshold=off(c.rl_threshold), thres_init=c.thres_init, thres_decay=c.thres_decay,
        force_return_step=c.force_return_step, fill=c.fill)

  @classmethod
  def check_config(cls, config) -> None:
    """ValueError naming the field for `config.rl.latr` out of range (the options,
    `mix_schedule`: (step, eta) pairs sorted by step, eta in [0, 1]; windows of at most
    `sampling.max_new_tokens` tokens)."""
    cls.from_config(config)
    schedule = config.rl.latr.mix_schedule
    steps = [s for s, _ in schedule]
    if steps != sorted(steps) or any(not 0 <= e <= 1 for _, e in schedule):
      raise ValueError(f"config.rl.latr.mix_schedule must be (step, eta) pairs sorted by step "
                       f"with eta in [0, 1], got {schedule}")
    windows, t = tuple(config.rl.latr.windows), config.sampling.max_new_tokens
    if max(windows) > t:
      raise ValueError(f"config.rl.latr.windows={windows}: expected lookahead windows of at most "
                       f"sampling.max_new_tokens={t} tokens")

  def __post_init__(self):
    if not self.windows or min(self.windows) < 1:
      raise ValueError(f"LatrOptions.windows must be positive window lengths, got {self.windows}")
    if not 0.0 <= self.tau_abs <= 1.0 or not 0.0 <= self.tau_rel <= 1.0:
      raise ValueError(f"LatrOptions.tau_abs and tau_rel must lie in [0, 1], got "
                       f"{self.tau_abs}, {self.tau_rel}")
    if self.force_return_step < 0:
      raise ValueError(f"LatrOptions.force_return_step must be >= 0, got {self.force_return_step}")


@flax.struct.dataclass
class TreeSamples:
  """LATR output; rows are [B·K], root b owning rows b·K ... b·K + K − 1.

  Attributes:
    tokens, mask, logp, entropy: as `decode.Samples`.
    parent: [B·K] int32 row the slot's final branch forked from (itself for a root row).
    birth: [B·K] int32 step at which that branch was born (0 for the root row).
    filled: [B·K] bool, the slot holds a copy of the root's first row (no branch survived there).
    decode_tokens: [] int32 tokens decoded by live rows (pruned branches included).
    num_forks: [] int32 branches created; num_pruned: [] int32 branches pruned.
    tree_steps: [] int32 steps spent in the tree phase.
  """

  tokens: jax.Array
  mask: jax.Array
  logp: jax.Array
  entropy: jax.Array
  parent: jax.Array
  birth: jax.Array
  filled: jax.Array
  decode_tokens: jax.Array
  num_forks: jax.Array
  num_pruned: jax.Array
  tree_steps: jax.Array


def fork_slots(cand: jax.Array, active: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Assigns branch candidates to free slots, per root.

  Args:
    cand: [B, K] bool, row k of root b proposes a branch.
    active: [B, K] bool, slot holds a live branch.

  Returns:
    src [B, K] int32: the slot each slot copies from (itself unless it receives a child), and
    new [B, K] bool: the slot receives a child. The j-th candidate (in row order) goes to the
    j-th free slot (in slot order); candidates beyond the free slots are dropped.
  """
  b, k = cand.shape
  free = ~active
  rank = jnp.cumsum(cand, axis=1) - 1
  free_order = jnp.argsort(~free, axis=1, stable=True)  # free slots first, in slot order
  accepted = cand & (rank < free.sum(axis=1, keepdims=True))
  target = jnp.where(accepted, jnp.take_along_axis(free_order, jnp.clip(rank, 0, k - 1), axis=1), k)
  rows = jnp.broadcast_to(jnp.arange(k), (b, k))
  src = jax.vmap(lambda s, t, r: s.at[t].set(r, mode="drop"))(rows, target, rows)
  new = jax.vmap(lambda t: jnp.zeros((k,), bool).at[t].set(True, mode="drop"))(target)
  return src.astype(jnp.int32), new


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "options", "num_slots",
                                             "max_new_tokens", "eos_id", "pad_id"))
def latr_generate(params, prompt: jax.Array, prompt_mask: jax.Array, rng: jax.Array, *,
                  cfg: models.ModelConfig, strategy: Sampling, options: LatrOptions,
                  num_slots: int, max_new_tokens: int, eos_id: int, pad_id: int = 0,
                  exempt_tokens: Optional[jax.Array] = None,
                  budgets: Optional[jax.Array] = None) -> TreeSamples:
  """LATR rollouts: `num_slots` tree leaves for each of the B left-padded prompts.

  Args:
    params: policy parameters.
    prompt: [B, P] int32 left-padded prompts (one per root; not repeated).
    prompt_mask: [B, P] bool.
    rng: PRNG key for the sampling phase after the tree phase (step t uses fold_in(rng, t)).
    cfg: model config (static).
    strategy: the rollout `Sampling`: its temperature scales the reported log-probs and drives
      the sampling phase; branching uses the raw softmax.
    options: `LatrOptions` (static).
    num_slots: K = n_kt, tree leaves per prompt (static).
    max_new_tokens: T (static).
    eos_id, pad_id: end-of-sequence and padding tokens.
    exempt_tokens: optional bool [V]: a branch whose divergent token is marked is never pruned
      (the reference's `keep_math_symbols` intent).
    budgets: optional int [B] in [0, K]: root b may use only its first k_b slots (ragged groups,
      `rollout.engines`); the others never receive a branch, are never filled and stay
      masked, and the exit rule counts Σ_b k_b slots (a finished root counts as k_b). None = K
      each (the same computation).

  Returns:
    `TreeSamples` with [B·K] rows.
  """
  b, p = prompt.shape
  k, t_max, o = num_slots, max_new_tokens, options
  n = b * k
  force = o.force_return_step or t_max
  max_window = max(o.windows)
  logits, cache = opening.open_rows(cfg, params, prompt, prompt_mask, copies=k,
                                    cache_size=p + t_max)
  slot = jnp.tile(jnp.arange(k), b)
  budget = (jnp.full((b,), k, jnp.int32) if budgets is None
            else jnp.asarray(budgets, jnp.int32).reshape(b))
  allowed = slot < jnp.repeat(budget, k)
  exempt = (jnp.zeros((cfg.vocab_size,), bool) if exempt_tokens is None
            else jnp.asarray(exempt_tokens, bool))
  z = jnp.zeros((n, t_max))
  init = parallel.shard_batch(dict(
      cache=cache, logits=logits, tokens=z.astype(jnp.int32), mask=z.astype(bool), logp=z,
      entropy=z, active=(slot == 0) & allowed, done=jnp.zeros((n,), bool),
      parent=jnp.arange(n, dtype=jnp.int32), birth=jnp.zeros((n,), jnp.int32),
      div_tok=jnp.zeros((n,), jnp.int32), in_tree=jnp.array(True),
      decode_tokens=jnp.zeros((), jnp.int32), num_forks=jnp.zeros((), jnp.int32),
      num_pruned=jnp.zeros((), jnp.int32), tree_steps=jnp.zeros((), jnp.int32)))

  def step(c, t):
    in_tree = c["in_tree"] & (t < force)
    probs = jax.nn.softmax(c["logits"], axis=-1)
    top_p, top_i = jax.lax.top_k(probs, 2)
    sampled = strategy.sample(c["logits"], jax.random.fold_in(rng, t))
    base = jnp.where(in_tree, top_i[:, 0], sampled).astype(jnp.int32)
    live = c["active"] & ~c["done"]
    cand = in_tree & live & tree_metrics.branch_candidates(top_p, o.tau_abs, o.tau_rel)[:, 1]
    # Slots past a root's budget look occupied, so they never receive a branch.
    src_local, new = fork_slots(cand.reshape(b, k), (c["active"] | ~allowed).reshape(b, k))
    src = (src_local + (jnp.arange(b) * k)[:, None]).reshape(n)
    new = new.reshape(n)
    (logits, *bufs), cache = opening.fork_rows(
        src, c["cache"], tuple(c[f] for f in ("logits", "tokens", "mask", "logp", "entropy")), new)
    tok = jnp.where(new, top_i[src, 1], base[src]).astype(jnp.int32)
    active = c["active"] | new
    done = jnp.where(new, False, c["done"])
    live = active & ~done
    parent = jnp.where(new, src, c["parent"]).astype(jnp.int32)
    birth = jnp.where(new, t, c["birth"]).astype(jnp.int32)
    div_tok = jnp.where(new, tok, c["div_tok"])
    tok, (tokens, mask, logp_buf, ent_buf) = opening.write_token(
        bufs, t, tok, live, *strategy.logp_entropy(logits, tok), pad_id=pad_id)
    done = done | (live & (tok == eos_id))

    # Lookahead pruning: children born r − 1 steps ago now have r tokens since the fork.
    prune = jnp.zeros((n,), bool)
    for r in o.windows:
      start = t - r + 1
      born = active & (birth == start) & (parent != jnp.arange(n)) & (start >= 0)
      # The parent slot may have been pruned and re-used by a younger branch: then skip.
      same_parent = born & (birth[parent] <= start) & active[parent]
      s0 = jnp.maximum(start, 0)
      child_w = jax.lax.dynamic_slice_in_dim(tokens, s0, r, axis=1)
      parent_w = child_w[parent]
      child_m = jax.lax.dynamic_slice_in_dim(mask, s0, r, axis=1)
      parent_m = child_m[parent]
      no_eos = (child_m.all(1) & parent_m.all(1) & ~(child_w == eos_id).any(1)
                & ~(parent_w == eos_id).any(1))
      check = same_parent & no_eos & ~exempt[div_tok] & in_tree
      # The O(r²) similarity DPs run only on steps where some branch reaches this window.
      alike = jax.lax.cond(
          check.any(),
          lambda a, b: tree_metrics.prune_mask(a, b, ed_threshold=o.ed_threshold,
                                               sm_threshold=o.sm_threshold,
                                               rl_threshold=o.rl_threshold),
          lambda a, b: jnp.zeros((n,), bool), child_w, parent_w)
      prune |= check & alike
    active = active & ~prune

    # Exit rule (§3.1 step 5).
    eff = active.reshape(b, k).sum(axis=1)
    all_done = ~(active & ~done).reshape(b, k).any(axis=1)
    eff = jnp.where(all_done, budget, eff)
    theta = o.thres_init - o.thres_decay * t / t_max
    full = eff.sum() >= jnp.round(budget.sum() * theta)
    young = (active & (parent != jnp.arange(n)) & (t - birth < max_window)).any()
    next_in_tree = in_tree & ~(full & ~young) & (t + 1 < force)

    logits_next, cache = models.decode_step(cfg, params, cache, tok)
    return dict(cache=cache, logits=logits_next, tokens=tokens, mask=mask, logp=logp_buf,
                entropy=ent_buf, active=active, done=done, parent=parent, birth=birth,
                div_tok=div_tok, in_tree=next_in_tree,
                decode_tokens=c["decode_tokens"] + live.sum(dtype=jnp.int32),
                num_forks=c["num_forks"] + new.sum(dtype=jnp.int32),
                num_pruned=c["num_pruned"] + prune.sum(dtype=jnp.int32),
                tree_steps=c["tree_steps"] + in_tree.astype(jnp.int32)), None

  c, _ = jax.lax.scan(step, init, jnp.arange(t_max))
  filled = ~c["active"] & allowed if o.fill else jnp.zeros((n,), bool)
  first = jnp.repeat(jnp.arange(b) * k, k)
  pick = jnp.where(filled, first, jnp.arange(n))
  keep = lambda x: x[pick] if o.fill else x
  mask = keep(c["mask"]) & (c["active"] | filled)[:, None]
  return TreeSamples(
      tokens=jnp.where(mask, keep(c["tokens"]), pad_id), mask=mask,
      logp=jnp.where(mask, keep(c["logp"]), 0.0), entropy=jnp.where(mask, keep(c["entropy"]), 0.0),
      parent=c["parent"], birth=c["birth"], filled=filled, decode_tokens=c["decode_tokens"],
      num_forks=c["num_forks"], num_pruned=c["num_pruned"], tree_steps=c["tree_steps"])
