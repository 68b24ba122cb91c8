"""One RL step's collection loop (docs/design.md §7): planner -> engine -> round rules -> batch.

`rollout(ctx)` is the RL phase's call: `collect(draw, config, ...)` with the fresh rounds of the
planner and engine (`fresh_round`) and the extension rounds a rule asks for (`extend_round`).
`collect` runs generation rounds into a `pool.Pool`:

* round 0 is `draw(0)`: the planner's prompts for the step, served by the engine;
* after each round the active rules (`rules.active_rules`) may ask for a fresh round
  (`draw(k)`) or for extra rows of prompts already in the pool (`extend(k, requests)`), up to
  `config.rl.max_gen_rounds` rounds;
* the batch is assembled from the selected slots in the config's layout (`pool.assemble`).

`draw(k)` and `extend(k, requests)` return `(rollout, raw rewards [R, K])`, optionally with host
metrics and the prompt ids of the round's requests: `(rollout, rewards, extra, prompt_ids)`, so
each box can be tested with a fake engine. `rollout.group` is the row's request index within the
round; rows with valid=False are padding.

Rewards are the `config.rl.rewards` components [R, K]; overlong shaping (`overlong_buffer`
L_cache > 0, docs/algorithms.md §2.2) adds the DAPO soft punishment to the first component.
`rollout_tokens` counts the tokens decoded to make the batch (a fork's shared prefix once),
`batch_tokens` the completion tokens in it. Every round's valid rows are recorded in the history
(when given): per slot, attempts and successes (first raw reward component >
`config.rl.success_threshold`), at policy step `step`.

Random streams (`seeds.PHASE_TAGS`): round 0 uses the RL phase's stream ('rl'), fresh rounds
>= 1 'rl_round', extension rounds 'rl_extend'; each depends only on (seed, step, round), so a
resumed run collects what an uninterrupted one does. Round 0 draws exactly what a run without
round rules draws.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from rl_jax import seeds
from rl_jax.rollout import april, engines, planner
from rl_jax.rollout import pool as pool_lib
from rl_jax.rollout import rules
from rl_jax.rollout.requests import Requests, StepContext

# Host counts that `collect` sums over generation rounds (rl_jax.rewards.contained).
COUNTS = ("reward/errors", "reward/timeouts", "reward/calls")


def engine_name(config, round_idx: int) -> str:
  """The engine of a fresh round: 'april' for round 0 with `rl.partial.enabled`, else the
  rollout mode."""
  return "april" if round_idx == 0 and april.enabled(config) else config.rl.rollout


def fresh_round(ctx: StepContext, round_idx: int):
  """Round `round_idx`'s fresh prompts, planned (`planner.plan`; APRIL: the carried groups then
  fresh prompts) and served by the engine: (Rollout, raw rewards, host metrics, prompt ids)."""
  exp, rl = ctx.exp, ctx.config.rl
  tag = seeds.RL if round_idx == 0 else seeds.RL_ROUND
  rng = (exp.host_rng(tag, ctx.step) if round_idx == 0
         else exp.host_rng(tag, ctx.step, round_idx))
  key = planner.round_key(exp, tag, ctx.step, round_idx)
  name = engine_name(ctx.config, round_idx)
  if name == "april":
    carry = ctx.companion("april", "config.rl.partial.enabled")
    fresh = planner.draw_prompts(ctx.config, len(exp.train_prompts),
                                 april.launch_groups(ctx.config) - carry.num_groups, rng)
    requests = april.launch_requests(carry, fresh, rl.group_size)
  else:
    requests = planner.plan(ctx, round_idx, rng)
  return engines.serve(ctx, name, requests, engines.RoundKeys(key, rng))


def extend_round(ctx: StepContext, round_idx: int, requests: Requests):
  """Extra rows for prompts already drawn (a round rule's request), from the iid engine in a
  power-of-two row count at most R_max; key and randomness from (seed, 'rl_extend', step,
  round)."""
  tag = seeds.RL_EXTEND
  key = planner.round_key(ctx.exp, tag, ctx.step, round_idx)
  batch, rewards, extra, ids = engines.serve(ctx, "iid", requests, engines.RoundKeys(key))
  extra.setdefault("engine_rows", engines.bucketed_rows(ctx.config, requests.total))
  return batch, rewards, extra, ids


def rollout(ctx: StepContext):
  """The RL batch of step `ctx.step`: (Rollout, shaped rewards [R, K] float32, host metrics).
  `ctx.history` receives every round's attempts and successes and feeds the allocator and the
  round rules; the companions' state (APRIL's carry, ARRoL's head) is updated in place."""
  batch, shaped, metrics = collect(
      lambda k: fresh_round(ctx, k), ctx.config, extend=lambda k, req: extend_round(ctx, k, req),
      history=ctx.history, step=ctx.step,
      context={"exp": ctx.exp, "params": ctx.params, "companions": ctx.companions})
  metrics.update(pool_lib.batch_metrics(batch, shaped, ctx.config))
  return batch, shaped, metrics


def _unpack(out):
  out = tuple(out)
  batch, r = out[0], out[1]
  extra = out[2] if len(out) > 2 else {}
  ids = out[3] if len(out) > 3 else None
  return batch, np.asarray(r, np.float32), dict(extra), ids


def collect(draw: Callable, config, *, extend: Optional[Callable] = None, history=None,
            step: int = 0, context: Optional[dict] = None):
  """Runs the rounds of one step; returns (rollout, shaped rewards [R, K], host metrics)."""
  rl = config.rl
  context = dict(context or {}, step=step, history=history)
  active = rules.make_rules(config, context)
  pool = pool_lib.Pool()
  counts = dict.fromkeys(COUNTS, 0)
  tokens, extra, saw_counts = 0, {}, False
  action = rules.FRESH
  k = 0
  while True:
    if action is rules.FRESH:
      batch, r, extra, ids = _unpack(draw(k))
      slots = np.full(_num_requests(batch) if ids is None else len(ids), -1)
    else:
      if extend is None:
        raise ValueError("a round rule asked for extra rows but collect() got no extend()")
      batch, r, extra, ids = _unpack(extend(k, action))
      ids, slots = action.prompt_ids, action.slots
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
