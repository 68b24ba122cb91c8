"""One RL step's collection (docs/design.md §7): planner -> engine -> scorer -> round rules ->
batch, one typed `engines.Round` per generation round.

In: a `StepContext`. Out (`rollout`): the RL batch (`Rollout`), shaped rewards [R, K] float32 and
host metrics. `rollout` runs rounds into a `pool.Pool`:

* round 0 is `fresh(ctx, 0)`: the prompts of the round-0 engine's planner (`Engine.plan`, else
  `planner.plan`), served and scored (`engines.serve`);
* after each round the active rules (`rules.active_rules`) may ask for a fresh round
  (`fresh(ctx, k)`) or for extra rows of prompts already in the pool (`extend(ctx, k,
  requests)`, the extension engine), up to `config.rl.max_gen_rounds` rounds;
* the batch is assembled from the selected slots in the config's layout (`pool.assemble`).

Invariants: overlong shaping (`rl.overlong_buffer` L_cache > 0, docs/algorithms.md §2.2) adds
the DAPO soft punishment to the first reward component; `rollout_tokens` counts the tokens
decoded (a fork's shared prefix once), `batch_tokens` the completion tokens in the batch; every
round's valid rows are recorded in `ctx.history` (when set): per slot, attempts and successes
(first raw component > `rl.success_threshold`), at step `ctx.step`. Random streams
(`seeds.PHASE_TAGS`): round 0 'rl', fresh rounds >= 1 'rl_round', extension rounds 'rl_extend',
each a function of (seed, step, round) only, so a resumed run collects what an uninterrupted one
does; round 0 draws exactly what a run without round rules draws.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from rl_jax import seeds
from rl_jax.rollout import april  # noqa: F401  (registers the engine 'april')
from rl_jax.rollout import engines, planner
from rl_jax.rollout import pool as pool_lib
from rl_jax.rollout import rules
from rl_jax.rollout import requests as requests_lib
from rl_jax.rollout.engines import Round
from rl_jax.rollout.requests import Requests, StepContext
from rl_jax.types import Rollout

# Host counts that `rollout` sums over generation rounds (rl_jax.rewards.contained).
COUNTS = ("reward/errors", "reward/timeouts", "reward/calls")


def fresh_round(ctx: StepContext, round_idx: int) -> Round:
  """Round `round_idx`'s fresh prompts, planned by the round's engine entry
  (`engines.fresh_engine`; its `plan`, else `planner.plan`) and served."""
  exp = ctx.exp
  tag = seeds.RL if round_idx == 0 else seeds.RL_ROUND
  rng = (exp.host_rng(tag, ctx.step) if round_idx == 0
         else exp.host_rng(tag, ctx.step, round_idx))
  key = planner.round_key(exp, tag, ctx.step, round_idx)
  name = engines.fresh_engine(ctx.config, round_idx)
  plan = engines.ENGINES.get(name).plan or planner.plan
  return engines.serve(ctx, name, plan(ctx, round_idx, rng), engines.RoundKeys(key, rng))


def extend_round(ctx: StepContext, round_idx: int, requests: Requests) -> Round:
  """Extra rows for prompts already drawn (a round rule's request), from the extension engine
  in a power-of-two row count at most R_max (`engine_rows`); key from (seed, 'rl_extend', step,
  round)."""
  key = planner.round_key(ctx.exp, seeds.RL_EXTEND, ctx.step, round_idx)
  out = engines.serve(ctx, engines.EXTENSION_ENGINE, requests, engines.RoundKeys(key))
  out.metrics.setdefault("engine_rows", engines.bucketed_rows(ctx.config, requests.total))
  return out


def example_batch(exp) -> Rollout:
  """Zeros shaped like the config's RL batches (the jitted RL step's shardings), with the fields
  the config's engines (`Engine.example`) and round rules (`RoundRule.example`) add; run
  companions add theirs (`train.companions`)."""
  config = exp.config
  r = requests_lib.batch_rows(config)
  p, t = exp.train_prompts.shape[1], exp.max_new_tokens
  example = Rollout(prompt_tokens=np.zeros((r, p), np.int32), prompt_mask=np.zeros((r, p), bool),
                    tokens=np.zeros((r, t), np.int32), mask=np.zeros((r, t), bool),
                    logp=np.zeros((r, t), np.float32), group=np.zeros(r, np.int32),
                    valid=np.zeros(r, bool))
  return rules.example(config, engines.example(config, example))


def rollout(ctx: StepContext, fresh: Callable[[StepContext, int], Round] = fresh_round,
            extend: Callable[[StepContext, int, Requests], Round] = extend_round):
  """The RL batch of step `ctx.step`: (Rollout, shaped rewards [R, K] float32, host metrics with
  the allocation metrics). `fresh` / `extend` serve a round (tests pass stubs); the companions'
  state (APRIL's carry, ARRoL's head) is updated in place."""
  config, history, step = ctx.config, ctx.history, ctx.step
  rl = config.rl
  active = rules.make_rules(ctx)
  pool = pool_lib.Pool()
  counts = dict.fromkeys(COUNTS, 0)
  tokens, extra, saw_counts = 0, {}, False
  action = rules.FRESH
  k = 0
  while True:
    if action is rules.FRESH:
      rnd = fresh(ctx, k)
      ids = rnd.prompt_ids
      slots = np.full(_num_requests(rnd.rollout) if ids is None else len(ids), -1)
    else:
      rnd = extend(ctx, k, action)
      ids, slots = action.prompt_ids, action.slots
    batch, r, extra = rnd.rollout, np.asarray(rnd.rewards, np.float32), dict(rnd.metrics)
    saw_counts |= any(name in extra for name in COUNTS)
    for name in COUNTS:  # Summed over the generation rounds.
      counts[name] += int(extra.get(name, 0))
    lengths = np.asarray(batch.mask).sum(-1)
    tokens += int(extra.get("rollout_tokens", lengths.sum()))
    shaped = pool_lib.overlong_shaping(r, lengths, config.sampling.max_new_tokens,
                                       rl.overlong_buffer, rl.overlong_penalty_factor)
    targets = pool.add(batch, shaped, r, slots, ids)
    if history is not None and ids is not None:
      _record(history, step, pool, len(pool.rollouts) - 1, targets, rl.success_threshold)
    k += 1
    if k >= rl.max_gen_rounds:
      break
    action = None
    for rule in active:
      action = rule.after_round(pool, k)
      if action is not None:
        break
    if action is None:
      break
  metrics = {n: v for n, v in extra.items() if n != "rollout_tokens"}
  metrics.update(gen_rounds=k, rollout_tokens=tokens, kept_groups=rl.prompts_per_step)
  if saw_counts:
    metrics.update(counts)
  choice = None
  for rule in active:
    choice = rule.select(pool, rl.prompts_per_step)
    if choice is not None:
      break
  if choice is None:
    first = min(rl.prompts_per_step, pool.num_slots)
    choice = (np.arange(first), np.ones(first, bool))
  batch, shaped, raw = pool_lib.assemble(pool, config, choice)
  for rule in active:
    batch = rule.finish(pool, batch, np.asarray(choice[0]))
    metrics.update(rule.metrics())
  valid = np.asarray(batch.valid)
  metrics["batch_tokens"] = int(np.asarray(batch.mask).sum())
  for name, col in zip(rl.rewards, raw.T):
    metrics[f"reward_{name}"] = float(col[valid].mean()) if valid.any() else 0.0
  metrics.update(pool_lib.batch_metrics(batch, shaped, config))
  return batch, shaped, metrics


def _num_requests(batch) -> int:
  """Requests of a round that did not name its prompts: 1 + the largest valid row's group."""
  group, valid = np.asarray(batch.group), np.asarray(batch.valid)
  return int(group[valid].max()) + 1 if valid.any() else 0


def _record(history, step, pool, round_idx, targets, threshold):
  """Appends the round's attempts and successes per slot to the history."""
  raw = pool.raw[round_idx]
  rollout = pool.rollouts[round_idx]
  group, valid = np.asarray(rollout.group), np.asarray(rollout.valid)
  ids, att, suc = [], [], []
  for b, s in enumerate(targets):
    rows = (group == b) & valid
    if rows.any():
      ids.append(pool.slot_prompt[s])
      att.append(int(rows.sum()))
      suc.append(int((raw[rows, 0] > threshold).sum()))
  if ids:
    history.record(step, ids, att, suc)
