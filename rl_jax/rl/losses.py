"""Policy losses, KL estimators, loss aggregation and DAPO helpers (§2).

Shapes: per-token arrays are `[..., T]` (usually `[N, T]` rollout rows);
`mask` is the loss mask m (multiply the advantage estimator's row `weight`
into it first). Log-ratio `δ_t = logp_t − logp_old_t`, clamped to [−20, 20]
before `exp`.

Policy losses are registered in `LOSSES` with the signature

    fn(logp, old_logp, adv, mask, *, clip_low, clip_high, clip_ratio_c, ...)
      -> (loss_tok [..., T], metrics)

and return per-token losses ℓ_t (0 on pads); combine them with `aggregate`.
A kind listed in `FORCED_AGGREGATION` must be aggregated with that mode.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

import jax
import jax.numpy as jnp
from jax import lax

from rl_jax.registry import Registry

Array = jax.Array
LossOut = Tuple[Array, Dict[str, Array]]

LOSSES = Registry('policy_loss')

# GSPO's surrogate is defined with seq-mean-token-mean (§2.3, verl forces it).
FORCED_AGGREGATION = {'gspo': 'seq-mean-token-mean'}

AGG_MODES = ('token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum',
             'seq-mean-token-sum-norm', 'dr-grpo')

_KL_ALIASES = {'kl': 'k1', 'mse': 'k2', 'low_var_kl': 'k3'}


def kl_penalty(logp: Array, ref_logp: Array, kind: str = 'k3') -> Array:
  """Per-token KL estimate with `x = logp − logp_ref` (§2.5, verl).

  k1 (verl 'kl'): x. k2 ('mse'): ½x². k3 ('low_var_kl'): `e^{−x} + x − 1`,
  computed with −x clamped to [−20, 20] and the result clamped to [−10, 10].
  'abs': |x|.
  """
  x = logp - ref_logp
  kind = _KL_ALIASES.get(kind, kind)
  if kind == 'k1':
    return x
  if kind == 'k2':
    return 0.5 * jnp.square(x)
  if kind == 'k3':
    y = jnp.clip(-x, -20.0, 20.0)
    return jnp.clip(jnp.exp(y) - y - 1.0, -10.0, 10.0)
  if kind == 'abs':
    return jnp.abs(x)
  raise ValueError(f"unknown KL kind {kind!r}; expected k1, k2, k3 or abs")


def aggregate(loss_tok: Array, mask: Array, mode: str = 'token-mean', *,
              num_tokens: Optional[Array] = None,
              num_seqs: Optional[Array] = None,
              max_len: Optional[int] = None) -> Array:
  """Reduces ℓ[..., T] under mask m to a scalar (§2.6, verl `agg_loss`).

  - 'token-mean': `Σ ℓm / Σ m`.
  - 'seq-mean-token-mean': `(1/N) Σ_i (Σ_t ℓm / Σ_t m)`.
  - 'seq-mean-token-sum': `(1/N) Σ_i Σ_t ℓm`.
  - 'seq-mean-token-sum-norm' (verl Dr.GRPO): `Σ ℓm / T_max`.
  - 'dr-grpo' (TRL): `Σ ℓm / (N · T_max)`.

  Under gradient accumulation pass the *global* normalisers of the whole
  mini-batch; every mode is then a sum over rows, so the micro-batch losses
  add up to the full-batch loss.

  Args:
    loss_tok: [..., T] per-token loss ℓ.
    mask: [..., T] loss mask m.
    mode: one of `AGG_MODES`.
    num_tokens: global `Σ m`; default the local count.
    num_seqs: global N; default the local number of rows with at least one
      mask token (so zero-weight rows such as the MC-GRPO pivot or padding
      rows leave the normaliser).
    max_len: T_max; default the static T of `loss_tok`.
  """
  m = jnp.asarray(mask, loss_tok.dtype)
  lm = jnp.where(m > 0, loss_tok, 0.0) * m
  if mode == 'token-mean':
    n_tok = jnp.sum(m) if num_tokens is None else num_tokens
    return jnp.sum(lm) / jnp.maximum(n_tok, 1)
  n_seq = jnp.sum(jnp.sum(m, -1) > 0) if num_seqs is None else num_seqs
  n_seq = jnp.maximum(n_seq, 1)
  t_max = loss_tok.shape[-1] if max_len is None else max_len
  if mode == 'seq-mean-token-mean':
    per_seq = jnp.sum(lm, -1) / jnp.maximum(jnp.sum(m, -1), 1.0)
    return jnp.sum(per_seq) / n_seq
  if mode == 'seq-mean-token-sum':
    return jnp.sum(lm) / n_seq
  if mode == 'seq-mean-token-sum-norm':
    return jnp.sum(lm) / t_max
  if mode == 'dr-grpo':
    return jnp.sum(lm) / (n_seq * t_max)
  raise ValueError(f'unknown aggregation {mode!r}; expected one of {AGG_MODES}')


# ----------------------------------------------------------------------------
# Policy losses.


def _masked_mean(x: Array, m: Array) -> Array:
  return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def _token_adv(adv: Array, logp: Array) -> Array:
  """Accepts sequence advantages [...] or token advantages [..., T]."""
  adv = jnp.asarray(adv, logp.dtype)
  return adv[..., None] if adv.ndim == logp.ndim - 1 else adv


def _clipped(ratio: Array, adv: Array, clip_low: float,
             clip_high: float) -> Tuple[Array, Array, Array]:
  """`ℓ¹ = −Aρ`, `ℓ² = −A clip(ρ, 1−ε_low, 1+ε_high)`, `max(ℓ¹, ℓ²)`."""
  l1 = -adv * ratio
  l2 = -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
  return l1, l2, jnp.maximum(l1, l2)


@LOSSES.register('ppo')
def ppo_loss(logp: Array, old_logp: Array, adv: Array, mask: Array, *,
             clip_low: float = 0.2, clip_high: float = 0.2,
             clip_ratio_c: Optional[float] = 3.0) -> LossOut:
  """PPO clip with dual clip (§2.1, verl `compute_policy_loss_vanilla`).

  `ρ = exp(clip(δ, −20, 20))`, `ℓ^clip = max(−Aρ, −A clip(ρ, 1−ε_low,
  1+ε_high))`; for A < 0, `ℓ = min(ℓ^clip, −A·c)`. DAPO clip-higher is
  `clip_high=0.28`. `clip_ratio_c=None` disables the dual clip.

  Returns:
    ℓ [..., T] and metrics: clipfrac (mean of ℓ² > ℓ¹), clipfrac_lower (dual
    clip active), ppo_kl (mean of −δ); means over mask tokens.
  """
  m = jnp.asarray(mask, logp.dtype)
  a = _token_adv(adv, logp)
  delta = jnp.clip(logp - old_logp, -20.0, 20.0)
  l1, l2, loss = _clipped(jnp.exp(delta), a, clip_low, clip_high)
  metrics = {'clipfrac': _masked_mean((l2 > l1).astype(m.dtype), m),
             'ppo_kl': _masked_mean(-delta, m)}
  if clip_ratio_c is not None:
    if clip_ratio_c <= 1.0:
      raise ValueError(f'clip_ratio_c must be > 1, got {clip_ratio_c}')
    l3 = -a * clip_ratio_c
    lower = (a < 0) & (loss > l3)
    loss = jnp.where(a < 0, jnp.minimum(loss, l3), loss)
    metrics['clipfrac_lower'] = _masked_mean(lower.astype(m.dtype), m)
  return jnp.where(m > 0, loss, 0.0), metrics


@LOSSES.register('gspo')
def gspo_loss(logp: Array, old_logp: Array, adv: Array, mask: Array, *,
              clip_low: float = 0.2, clip_high: float = 0.2,
              clip_ratio_c: Optional[float] = None) -> LossOut:
  """GSPO sequence-ratio loss (§2.3, verl `compute_policy_loss_gspo`).

  `log s_i = (1/L_i) Σ_t m δ_t`; token form `log s_{i,t} = sg(log s_i) +
  logp_t − sg(logp_t)` (value s_i, gradient through each token), capped at 10;
  `ℓ_t = max(−A s_{i,t}, −A clip(s_{i,t}, 1−ε_low, 1+ε_high))`. Recipe clips
  are ε_low=3e-4, ε_high=4e-4. Aggregate with 'seq-mean-token-mean'
  (`FORCED_AGGREGATION`). `clip_ratio_c` is accepted for a uniform interface
  and unused: verl's GSPO loss has no dual clip.
  """
  del clip_ratio_c
  m = jnp.asarray(mask, logp.dtype)
  a = _token_adv(adv, logp)
  delta = jnp.clip(logp - old_logp, -20.0, 20.0)
  seq_len = jnp.maximum(jnp.sum(m, -1, keepdims=True), 1.0)
  log_s = lax.stop_gradient(jnp.sum(delta * m, -1, keepdims=True) / seq_len)
  log_s_tok = jnp.minimum(log_s + logp - lax.stop_gradient(logp), 10.0)
  l1, l2, loss = _clipped(jnp.exp(log_s_tok), a, clip_low, clip_high)
  metrics = {'clipfrac': _masked_mean((l2 > l1).astype(m.dtype), m),
             'ppo_kl': _masked_mean(-delta, m)}
  return jnp.where(m > 0, loss, 0.0), metrics


def minpro_weight(logp: Array, behav_logp: Array, mask: Array, *,
                  inclusive: bool = False, cap: bool = True) -> Array:
  """MinPRO prefix weight `w_t = sg(min(1, min_{j<t} ρ_j))`, `w_1 = 1` (§2.4).

  Pads are +inf in the running min so they never lower a later weight.

  Args:
    logp: [..., T] current log-probs.
    behav_logp: [..., T] log-probs the ratio is taken against.
    mask: [..., T].
    inclusive: min over j ≤ t instead of j < t.
    cap: apply the min(1, ·) cap.
  """
  rho = jnp.exp(jnp.clip(logp - behav_logp, -20.0, 20.0))
  rho = jnp.where(jnp.asarray(mask) > 0, rho, jnp.inf)
  pm = lax.cummin(rho, axis=rho.ndim - 1)
  if not inclusive:
    pm = jnp.concatenate([jnp.ones_like(pm[..., :1]), pm[..., :-1]], axis=-1)
  pm = jnp.where(jnp.isfinite(pm), pm, 1.0)  # no valid token seen yet
  return lax.stop_gradient(jnp.minimum(pm, 1.0) if cap else pm)


@LOSSES.register('minpro_reconstructed')
def minpro_loss(logp: Array, old_logp: Array, adv: Array, mask: Array, *,
                clip_low: float = 0.2, clip_high: float = 0.2,
                clip_ratio_c: Optional[float] = 3.0,
                behav_logp: Optional[Array] = None, inclusive: bool = False,
                cap: bool = True) -> LossOut:
  """MinPRO, *reconstructed* objective (§2.4): `ℓ_t = w_t · ℓ^clip_t(ρ_t, A)`.

  ℓ^clip is `ppo_loss` (clip + dual clip). The exact published surrogate is
  unknown; the variant choices are options: `inclusive` (j ≤ t vs j < t),
  `cap` (min(1, ·)) and `behav_logp` (ratio for w against the rollout /
  behaviour policy; default `old_logp`). Pass the rollout log-probs when
  available: the method targets off-policy drift.
  """
  loss, metrics = ppo_loss(logp, old_logp, adv, mask, clip_low=clip_low,
                           clip_high=clip_high, clip_ratio_c=clip_ratio_c)
  ref = old_logp if behav_logp is None else behav_logp
  w = minpro_weight(logp, ref, mask, inclusive=inclusive, cap=cap)
  metrics['minpro_weight'] = _masked_mean(w, jnp.asarray(mask, logp.dtype))
  return w * loss, metrics


# Where MinPRO's weight takes its ratio (`MinPROOptions.behav_logp`).
MINPRO_BEHAV_LOGP = ('auto', 'rollout', 'old')


@dataclasses.dataclass(frozen=True)
class MinPROOptions:
  """`config.rl.minpro`: the options of `minpro_loss` a run sets (§2.4).

  inclusive, cap: forwarded to `minpro_weight`.
  behav_logp: the log-probs the weight's ratio is taken against: 'rollout' = the sampler's
    (`Rollout.logp`, the policy that generated each token), 'old' = the PPO ratio's
    `old_logp` (the trainer's recomputation when `tis_cap > 0`), 'auto' = 'rollout' where rows
    are off policy (APRIL's carried rows, `rl.partial.enabled`), else 'old'. The values are
    checked once, by `rl_jax.train.config_check`.
  """

  inclusive: bool = False
  cap: bool = True
  behav_logp: str = 'auto'

  @classmethod
  def from_config(cls, config) -> 'MinPROOptions':
    """From `config.rl.minpro`; a config without that section (older runs) takes the defaults."""
    m = config.rl.get('minpro') or {}
    return cls(**{f.name: m[f.name] for f in dataclasses.fields(cls) if f.name in m})

  def loss_options(self) -> tuple:
    """The sorted (key, value) keyword options of `minpro_loss` (`RLHyper.loss_options`)."""
    return (('cap', self.cap), ('inclusive', self.inclusive))

  def uses_rollout_logp(self, off_policy: bool) -> bool:
    """Whether the loss gets `behav_logp=` the rollout's log-probs; `off_policy`: the batch
    holds rows an earlier policy generated (APRIL)."""
    return self.behav_logp == 'rollout' or (self.behav_logp == 'auto' and off_policy)


# Loss kind -> the options dataclass a config sets for it (`from_config`); kinds absent take none.
LOSS_OPTIONS = {'minpro_reconstructed': MinPROOptions}


def policy_loss(logp: Array, old_logp: Array, adv: Array, mask: Array, *,
                kind: str = 'ppo', clip_low: float = 0.2,
                clip_high: float = 0.2, clip_ratio_c: Optional[float] = 3.0,
                **options) -> LossOut:
  """Per-token policy loss of the registered `kind` ('ppo', 'gspo',
  'minpro_reconstructed'); kind-specific `options` are forwarded.

  Args:
    logp, old_logp: [..., T] current and behaviour (old) log-probs.
    adv: [...] sequence or [..., T] token advantages A.
    mask: [..., T] loss mask.

  Returns:
    (ℓ [..., T], metrics). Aggregate with `aggregate`, using
    `FORCED_AGGREGATION.get(kind, mode)`.
  """
  return LOSSES.get(kind)(logp, old_logp, adv, mask, clip_low=clip_low,
                          clip_high=clip_high, clip_ratio_c=clip_ratio_c,
                          **options)


# ----------------------------------------------------------------------------
# DAPO helpers (§2.2).


def dapo_overlong_penalty(lengths: Array, max_len: int, cache_len: int,
                          factor: float = 1.0) -> Array:
  """Soft overlong punishment `R_len(L)`, added to the outcome reward.

  0 if `L ≤ L_max − L_cache`; `((L_max − L_cache) − L)/L_cache` inside the
  buffer; −1 beyond `L_max`; all times `factor` (verl `penalty_factor`).
  """
  ell = jnp.asarray(lengths, jnp.float32)
  pen = ((max_len - cache_len) - ell) / cache_len
  return factor * jnp.clip(pen, -1.0, 0.0)


def dapo_informative_groups(rewards: Array, valid: Array, *,
                            keep_singletons: bool = False) -> Array:
  """bool [B]: the group's valid rewards are not all equal (dynamic sampling).

  Groups with no valid member are never informative. verl's DAPO trainer
  also keeps groups with exactly one member: `keep_singletons=True`.
  """
  r = jnp.asarray(rewards, jnp.float32)
  ok = jnp.asarray(valid, bool)
  hi = jnp.max(jnp.where(ok, r, -jnp.inf), axis=-1)
  lo = jnp.min(jnp.where(ok, r, jnp.inf), axis=-1)
  informative = hi > lo
  if keep_singletons:
    informative = informative | (jnp.sum(ok, -1) == 1)
  return informative


def select_informative(informative: Array, num: int) -> Tuple[Array, Array]:
  """First `num` informative groups: `argsort(~informative, stable)[:num]`.

  Returns (idx int32 [num], valid bool [num]); valid is False where fewer
  than `num` informative groups exist (those idx point at other groups).
  """
  if num > informative.shape[0]:
    raise ValueError(f'num={num} exceeds the {informative.shape[0]} groups')
  key = jnp.logical_not(informative).astype(jnp.int32)
  idx = jnp.argsort(key, stable=True)[:num].astype(jnp.int32)
  return idx, informative[idx]
