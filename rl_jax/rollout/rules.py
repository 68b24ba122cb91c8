"""Round rules: host-side rules run after every generation round of a step (docs/design.md §7).

In: the step's `pool.Pool` after each round (all rows drawn so far, by slot = one prompt's
group). Out of `after_round`: None, `FRESH` (another round of fresh prompts, new slots) or a
`Requests` with `slots` set (extra rows for prompts already in the pool). When no rule asks for
more (or `rl.max_gen_rounds` rounds have run), the first rule whose `select` returns a choice
picks the batch's B slots (and which are kept); without one, the first B slots are the batch.
After assembly each rule's `finish` may add fields to the batch (declared by its `example`).

Rules are registered in `ROUND_RULES` as classes (or factories) `make(ctx: StepContext) ->
rule`; a rule that a config turns on by itself declares it (`wanted(config)`: 'dapo_dynamic'
with `rl.dynamic_sampling`, 'v05_extra' when the advantage entry declares `per_row_prior`,
'allocation_probe' with `rl.allocation.probe` > 0); `rl.round_rules` names more.
"""

from __future__ import annotations

import numpy as np

from rl_jax.registry import Registry
from rl_jax.rl import advantages
from rl_jax.rl.advantages import v05
from rl_jax.rollout import planner
from rl_jax.rollout import requests as requests_lib
from rl_jax.rollout.pool import Pool
from rl_jax.rollout.requests import Requests, StepContext
from rl_jax.value import priors
from rl_jax.value.history import RolloutHistory

ROUND_RULES = Registry("round rule")
FRESH = "fresh"


def active_rules(config) -> tuple[str, ...]:
  """The rules the config turns on (`wanted`, in registration order), then `rl.round_rules`;
  ValueError for an unknown name."""
  rl = config.rl
  names = tuple(n for n, make in ROUND_RULES.entries()
                if getattr(make, "wanted", None) is not None and make.wanted(config))
  names += tuple(rl.round_rules)
  for name in names:
    if name not in ROUND_RULES:
      raise ValueError(f"config.rl.round_rules names an unknown round rule {name!r}; expected "
                       f"one of {list(ROUND_RULES.names())}")
  return names


def make_rules(ctx: StepContext) -> list:
  """The active rules of `ctx.config`, built for this step."""
  return [ROUND_RULES.get(name)(ctx) for name in active_rules(ctx.config)]


def example(config, batch):
  """`batch` with the fields the config's active rules add (`RoundRule.example`)."""
  for name in active_rules(config):
    add = getattr(ROUND_RULES.get(name), "example", None)
    if add is not None:
      batch = add(config, batch)
  return batch


class RoundRule:
  """Base: asks for nothing, selects nothing, adds no field, reports no metrics; turned on only
  by name (`rl.round_rules`)."""

  @classmethod
  def wanted(cls, config) -> bool:
    """Whether the config turns this rule on by itself."""
    del config
    return False

  @classmethod
  def example(cls, config, batch):
    """`batch` (zeros of the RL batch's shapes) with the fields `finish` adds."""
    del config
    return batch

  def after_round(self, pool: Pool, round_idx: int):
    """None, `FRESH`, or a `Requests` with `slots` set (extra rows for those slots)."""
    del pool, round_idx
    return None

  def select(self, pool: Pool, num_slots: int):
    """None, or (slots int [B], keep bool [B]): the batch's slots and which are kept."""
    del pool, num_slots
    return None

  def finish(self, pool: Pool, batch, slots: np.ndarray):
    """The assembled batch (Rollout; batch row group b < B is pool slot `slots[b]`), possibly
    with fields added (V0.5's per-row prior)."""
    del pool, slots
    return batch

  def metrics(self) -> dict:
    return {}


@ROUND_RULES.register("dapo_dynamic")
class DapoDynamic(RoundRule):
  """DAPO dynamic sampling (docs/algorithms.md §2.2): groups whose rewards are all equal carry no
  gradient; fresh rounds of B prompts are drawn until B informative groups exist (or
  `max_gen_rounds`). The batch: informative groups in round order, then dropped groups marked
  kept=False (loss weight 0)."""

  @classmethod
  def wanted(cls, config):
    return bool(config.rl.dynamic_sampling)

  def __init__(self, ctx: StepContext):
    rl = ctx.config.rl
    self.weights = tuple(rl.reward_weights)
    self.multi = advantages.declares(rl.advantage, "multi_reward")
    self.num = rl.prompts_per_step
    self.kept = 0

  def after_round(self, pool, round_idx):
    del round_idx
    return None if pool.informative(self.weights, self.multi).sum() >= self.num else FRESH

  def select(self, pool, num_slots):
    inf = pool.informative(self.weights, self.multi)
    picks, fillers = np.flatnonzero(inf), np.flatnonzero(~inf)
    self.kept = min(len(picks), num_slots)
    chosen = np.concatenate([picks[:self.kept], fillers[:num_slots - self.kept]])
    return chosen.astype(np.int64), np.arange(num_slots) < self.kept

  def metrics(self):
    return {"kept_groups": self.kept}


@ROUND_RULES.register("v05_extra")
class V05Extra(RoundRule):
  """V0.5's extra rounds and per-row prior (docs/algorithms.md §4.2, RECONSTRUCTED;
  `rl.advantages.v05`).

  After each round every slot is tested against its prior p0 (successes = first raw reward
  component > `rl.success_threshold`); a rejected slot below n_max asks for its group to be
  doubled (capped at n_max). The rows of a step are limited by the batch (R_max = `rl.rows`):
  rejected slots are served in order of |z| (largest first) while rows remain; the rest keep
  their rows and use the empirical mean. `finish` writes (p0, w) per row into `batch.prior`,
  w = 0 for slots whose prior is rejected at their final size.

  The prior (`config.rl.v05.prior`, `value.priors`) sees the history of earlier steps only
  (`history.truncate(step)`), never the rollouts it is tested against. Turned on by an advantage
  entry that declares `per_row_prior`.
  """

  @classmethod
  def wanted(cls, config):
    return advantages.declares(config.rl.advantage, "per_row_prior")

  @classmethod
  def example(cls, config, batch):
    """(p0, w) per row: `prior` [R, 2] float32."""
    del config
    return batch.replace(prior=np.zeros((np.shape(batch.tokens)[0], 2), np.float32))

  def __init__(self, ctx: StepContext):
    config = ctx.config
    self.opts = config.rl.v05
    self.threshold = config.rl.success_threshold
    self.rows = requests_lib.batch_rows(config)
    self.params = ctx.params
    past = RolloutHistory() if ctx.history is None else ctx.history.truncate(ctx.step)
    self.prior = priors.make(self.opts.prior, ctx.exp, past, ctx.companions)
    self.p0 = np.zeros(0)
    self.s2 = np.zeros(0)
    self.first_reject = np.zeros(0, bool)
    self.extra_rows = 0
    self.short = 0
    self._metrics = {}

  def _kn(self, pool):
    raw = pool.all_raw()
    k = np.asarray([(raw[r, 0] > self.threshold).sum() for r in pool.slot_rows], np.int64)
    return k, pool.sizes()

  def _predict(self, pool):
    new = np.arange(len(self.p0), pool.num_slots)
    if len(new):
      p0, s2 = self.prior.predict(self.params, np.asarray(pool.slot_prompt)[new])
      s2 = np.full(len(new), self.opts.sigma0_sq) if self.opts.sigma0_sq > 0 else s2
      self.p0 = np.concatenate([self.p0, np.asarray(p0, np.float64)])
      self.s2 = np.concatenate([self.s2, np.asarray(s2, np.float64)])

  def _reject(self, k, n, p0):
    o = self.opts
    return v05.reject(k, np.maximum(n, 1), p0, alpha=o.alpha, test=o.test,
                           clip=tuple(o.p0_clip)) & (n > 0)

  def after_round(self, pool, round_idx):
    self._predict(pool)
    k, n = self._kn(pool)
    rejected = self._reject(k, n, self.p0)
    if round_idx == 1:
      self.first_reject = rejected.copy()
    want = np.asarray([v05.next_size(m, self.opts.n_max) - m for m in n])
    ask = np.flatnonzero(rejected & (want > 0))
    if not len(ask):
      return None
    z = np.abs(v05.z_statistic(k[ask], np.maximum(n[ask], 1), self.p0[ask],
                                    tuple(self.opts.p0_clip)))
    left = self.rows - int(n.sum())
    slots, counts = [], []
    for s in ask[np.argsort(-z, kind="stable")]:
      if want[s] <= left:
        slots.append(s)
        counts.append(want[s])
        left -= want[s]
      else:
        self.short += 1
    if not slots:
      return None
    self.extra_rows += int(sum(counts))
    slots = np.asarray(slots, np.int64)
    return Requests(np.asarray(pool.slot_prompt)[slots], counts, slots)

  def finish(self, pool, batch, slots):
    self._predict(pool)
    k, n = self._kn(pool)
    o = self.opts
    rejected = self._reject(k, n, self.p0)
    w = np.where(rejected, 0.0, v05.fusion_weight(self.p0, self.s2, np.maximum(n, 1),
                                                       form=o.fusion, clip=tuple(o.p0_clip)))
    group = np.asarray(batch.group)
    inside = (group < len(slots)) & np.asarray(batch.valid)
    slot_of = np.asarray(slots)[np.minimum(group, len(slots) - 1)]
    prior = np.zeros((len(group), 2), np.float32)
    prior[inside, 0] = self.p0[slot_of[inside]]
    prior[inside, 1] = w[slot_of[inside]]
    chosen = np.asarray(slots)
    first = self.first_reject if len(self.first_reject) else rejected
    self._metrics = {
        "v05/rejected_frac": float(first[chosen].mean()),
        "v05/rejected_final_frac": float(rejected[chosen].mean()),
        "v05/extra_rows": self.extra_rows, "v05/short": self.short,
        "v05/w_mean": float(w[chosen].mean()), "v05/p0_mean": float(self.p0[chosen].mean()),
        "v05/sigma0_sq_mean": float(self.s2[chosen].mean()),
        "v05/group_size_mean": float(n[chosen].mean())}
    return batch.replace(prior=prior)

  def metrics(self):
    return dict(self._metrics)


@ROUND_RULES.register("allocation_probe")
class AllocationProbe(RoundRule):
  """Two-stage allocation (`rl.allocation.probe` > 0): after the probe round, asks once for the
  rest of the budget as extra rows of the probed prompts (the allocator sees the history with
  the probe's outcomes)."""

  @classmethod
  def wanted(cls, config):
    return "allocation" in config.rl and bool(config.rl.allocation.probe)

  def __init__(self, ctx: StepContext):
    self.config = ctx.config
    self.step = ctx.step
    self.history = ctx.history
    self.asked = False

  def after_round(self, pool, round_idx):
    if self.asked:
      return None
    self.asked = True
    if self.history is None:
      raise ValueError("allocation.probe needs the rollout history (StepContext.history)")
    ids = np.asarray(pool.slot_prompt, np.int64)
    rng = planner.alloc_rng(self.config, self.step, 1000 + round_idx)
    extra = planner.StepAllocator(self.config).second(self.step, ids, self.history, rng)
    keep = extra > 0
    if not keep.any():
      return None
    return Requests(ids[keep], extra[keep], np.flatnonzero(keep))
