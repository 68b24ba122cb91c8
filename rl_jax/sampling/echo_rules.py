"""ECHO's entropy-confidence rules (docs/methods.md#echo, docs/algorithms.md §3.5): the per-step
statistics H_t and C_t from the top-k next-token log-probs, their windowed means (C^G, C^tail,
ΔH), the branch rule and width, the online prune rule. Pure jnp functions over rows [R], used by
`echo.echo_generate` and tested on hand-made numbers.
"""

from __future__ import annotations

import dataclasses
import math

import flax.struct
import jax
import jax.numpy as jnp

_EPS = 1e-9
CONFIDENCES = ("neg_logp", "prob")


@dataclasses.dataclass(frozen=True)
class EchoOptions:
  """ECHO hyper-parameters (static). Defaults: docs/algorithms.md §3.5 / the reference's
  `DeepConfParams` [V], except the [R] tree knobs `branch_roots`, `nested` and `prune`.

  Attributes:
    top_k: log-probs per step the statistics read (k).
    conf_top_k: tokens of the confidence C_t.
    confidence: 'neg_logp' (code [V]) or 'prob' (paper summary [P]).
    min_depth: first step that may branch.
    entropy_window, group_window, tail_window: the windows of ΔH, C^G, C^tail.
    entropy_high, entropy_low: H_high (branch threshold) and H_low (width scale).
    branch_threshold: c_b, branch only if C^G ≤ c_b.
    entropy_delta_threshold: δ, branch only if ΔH ≥ δ.
    min_branches, max_branches: w_min, w_max.
    alpha, beta: the width's entropy and confidence weights.
    prune: prune rows online [R switch; the reference prunes whenever branching is on].
    prune_threshold: c_p (running min of C^G).
    tail_decline_steps, tail_threshold: the tail-decline rule.
    delta_rise_steps, delta_upper: the entropy-spike rule.
    branch_roots: rows per prompt that may branch from the start (the reference: 1, its first
      completion) [R for > 1].
    nested: children may branch too (each row at most once) [R; the reference: False].
  """

  top_k: int = 64
  conf_top_k: int = 5
  confidence: str = "neg_logp"
  min_depth: int = 4
  entropy_window: int = 4
  group_window: int = 4
  tail_window: int = 8
  entropy_high: float = 3.5
  entropy_low: float = 1.0
  branch_threshold: float = 1.2
  entropy_delta_threshold: float = 0.2
  min_branches: int = 1
  max_branches: int = 4
  alpha: float = 2.0
  beta: float = 1.0
  prune: bool = True
  prune_threshold: float = 0.4
  tail_decline_steps: int = 3
  tail_threshold: float = 1.0
  delta_rise_steps: int = 3
  delta_upper: float = 0.5
  branch_roots: int = 1
  nested: bool = False

  @classmethod
  def from_config(cls, config) -> "EchoOptions":
    """`config.rl.echo` -> EchoOptions (every field by name)."""
    return cls(**config.rl.echo.to_dict())

  @classmethod
  def check_config(cls, config) -> None:
    """ValueError naming the field for `config.rl.echo` out of range, or `branch_roots` not
    below `rl.group_size` (the other slots hold the branches; 0 = no branching)."""
    opts, g = cls.from_config(config), config.rl.group_size
    if opts.branch_roots >= g:
      raise ValueError(f"config.rl.echo.branch_roots={opts.branch_roots}: expected fewer than "
                       f"group_size={g} (the other slots hold the branches; 0 = no branching)")

  def __post_init__(self):
    bad = lambda field, expected: ValueError(
        f"config.rl.echo.{field}={getattr(self, field)!r}: expected {expected}")
    for name in ("top_k", "conf_top_k", "entropy_window", "group_window", "tail_window",
                 "min_branches", "max_branches", "tail_decline_steps", "delta_rise_steps"):
      if getattr(self, name) < 1:
        raise bad(name, "an integer >= 1")
    for name in ("min_depth", "branch_roots"):
      if getattr(self, name) < 0:
        raise bad(name, "an integer >= 0")
    for name in ("entropy_high", "entropy_low", "branch_threshold", "entropy_delta_threshold",
                 "prune_threshold", "tail_threshold", "delta_upper", "alpha", "beta"):
      if not math.isfinite(getattr(self, name)):
        raise bad(name, "a finite number")
    for name in ("alpha", "beta"):
      if getattr(self, name) < 0:
        raise bad(name, "a finite number in [0, inf)")
    for name in ("prune", "nested"):
      if not isinstance(getattr(self, name), bool):
        raise bad(name, "one of [True, False]")
    if self.confidence not in CONFIDENCES:
      raise bad("confidence", f"one of {list(CONFIDENCES)}")
    if self.conf_top_k > self.top_k:
      raise bad("conf_top_k", f"at most top_k={self.top_k}")
    if self.max_branches > self.top_k:
      raise bad("max_branches", f"at most top_k={self.top_k} (children take top tokens)")
    if self.min_branches > self.max_branches:
      raise bad("min_branches", f"at most max_branches={self.max_branches}")
    if not self.entropy_high > self.entropy_low:
      raise bad("entropy_high", f"more than entropy_low={self.entropy_low} (the width divides "
                "by their gap)")
    if self.branch_threshold == 0.0:
      raise bad("branch_threshold", "a nonzero number (the width divides by its magnitude)")


def step_stats(logits: jax.Array, o: EchoOptions):
  """Per-row H_t, C_t and the top tokens (best first) from float32 logits [R, V].

  Over the top-k (`top_k`) logits renormalised (p): H_t = −Σ p log p (p clipped to [1e-9, 1]);
  C_t = −mean(log(p + 1e-9)) ('neg_logp') or mean(p) ('prob') over the top `conf_top_k`.
  """
  k = min(o.top_k, logits.shape[-1])
  top_logits, top_idx = jax.lax.top_k(logits, k)
  p = jax.nn.softmax(top_logits, axis=-1)
  pc = jnp.clip(p, _EPS, 1.0)
  entropy = -jnp.sum(pc * jnp.log(pc), axis=-1)
  top_c = p[:, :min(o.conf_top_k, k)]
  conf = (-jnp.mean(jnp.log(top_c + _EPS), axis=-1) if o.confidence == "neg_logp"
          else jnp.mean(top_c, axis=-1))
  return entropy, conf, top_idx.astype(jnp.int32)


def _window_mean(buf: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
  """Mean of buf[:, j] over lo <= j <= hi (per step, the same for every row)."""
  j = jnp.arange(buf.shape[1])
  inside = (j >= lo) & (j <= hi)
  return jnp.sum(jnp.where(inside, buf, 0.0), axis=1) / jnp.maximum(inside.sum(), 1)


def window_stats(h_buf: jax.Array, c_buf: jax.Array, t: jax.Array, o: EchoOptions):
  """(C^G_t, C^tail_t, ΔH_t) per row from the step-statistic buffers [R, T] filled up to t:
  the means of C over the last `group_window` / `tail_window` steps (t included), and
  H_t − the mean of H over the `entropy_window` steps before t (0 at t = 0)."""
  group = _window_mean(c_buf, t - o.group_window + 1, t)
  tail = _window_mean(c_buf, t - o.tail_window + 1, t)
  h_t = jax.lax.dynamic_index_in_dim(h_buf, t, axis=1, keepdims=False)
  bar = jnp.where(t > 0, _window_mean(h_buf, t - o.entropy_window, t - 1), h_t)
  return group, tail, h_t - bar


def branch_width(entropy: jax.Array, group_conf: jax.Array, o: EchoOptions) -> jax.Array:
  """w = clip(round(w_min + α(H − H_low)/(H_high − H_low) − β(C^G − c_b)/|c_b|), w_min, w_max)."""
  raw = (o.min_branches + o.alpha * (entropy - o.entropy_low) / (o.entropy_high - o.entropy_low)
         - o.beta * (group_conf - o.branch_threshold) / abs(o.branch_threshold))
  return jnp.clip(jnp.round(raw), o.min_branches, o.max_branches).astype(jnp.int32)


def wants_branch(entropy, group_conf, delta_h, t, o: EchoOptions) -> jax.Array:
  """bool per row: the branch rule fires at step t (before the width's w > 1 test):
  t >= min_depth, H_t >= H_high, C^G_t <= c_b and ΔH_t >= δ."""
  return ((t >= o.min_depth) & (entropy >= o.entropy_high)
          & (group_conf <= o.branch_threshold) & (delta_h >= o.entropy_delta_threshold))


@flax.struct.dataclass
class PruneState:
  """Per-row state of the online prune rule: running min of C^G, the previous C^tail, and the
  lengths of the current runs of C^tail declines and of ΔH > 0."""

  run_min: jax.Array
  prev_tail: jax.Array
  declines: jax.Array
  rises: jax.Array

  @classmethod
  def init(cls, rows: int) -> "PruneState":
    z = jnp.zeros((rows,), jnp.int32)
    return cls(jnp.full((rows,), jnp.inf), jnp.full((rows,), -jnp.inf), z, z)

  def take(self, rows: jax.Array) -> "PruneState":
    return jax.tree_util.tree_map(lambda x: x[rows], self)


def prune_update(state: PruneState, group_conf, tail, delta_h, o: EchoOptions):
  """One step of `should_prune` per row: (new state, prune now). Prune when the running min of
  C^G < c_p, or C^tail declined `tail_decline_steps` steps in a row and C^tail <=
  `tail_threshold`, or ΔH > 0 `delta_rise_steps` steps in a row and ΔH > `delta_upper`."""
  run_min = jnp.minimum(state.run_min, group_conf)
  declines = jnp.where(tail < state.prev_tail, state.declines + 1, 0)
  rises = jnp.where(delta_h > 0, state.rises + 1, 0)
  prune = ((run_min < o.prune_threshold)
           | ((declines >= o.tail_decline_steps) & (tail <= o.tail_threshold))
           | ((rises >= o.delta_rise_steps) & (delta_h > o.delta_upper)))
  return PruneState(run_min, tail, declines, rises), prune


def child_tokens(top_idx: jax.Array, sampled: jax.Array, num: int) -> jax.Array:
  """[R, num]: the best tokens other than the row's sampled one, best first (a branch of width w
  gives its w − 1 children the first w − 1: the reference's top-w with the sampled token kept by
  the row itself)."""
  cand = top_idx[:, :num + 1]
  other = cand != sampled[:, None]
  rank = jnp.cumsum(other, axis=1) - 1
  slot = jnp.where(other & (rank < num), rank, num)
  out = jnp.zeros((cand.shape[0], num + 1), jnp.int32)
  out = jax.vmap(lambda o_, s, c: o_.at[s].set(c, mode="drop"))(out, slot, cand)
  return out[:, :num]
