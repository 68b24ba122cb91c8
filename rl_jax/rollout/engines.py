"""Engines (docs/design.md §7): serve a round's `Requests` with a sampler, one adapter per mode.

`ENGINES` maps `config.rl.rollout` (and 'april', `rollout.april`) to an adapter
`engine(ctx, requests, keys: RoundKeys) -> Served`: the rows of every served request, prompt
b's rows contiguous in request order, scored. An entry declares `check(config)` (its options'
config check, run by `rollout.checks`) and `tree=True` when its groups carry a tree. A dense round is uniform requests (G rows each)
and takes the same adapter as a ragged one; with every n_b = G_max = G the two are the same
batch (a test).

* 'iid': independent rows from the `config.sampling.engine` sampler (`iid_rows`): one grouped
  call (`num_samples = n`) when every prompt asks for the same n and the call needs no padding,
  else one row-wise call in a power-of-two row count (`requests.engine_rows`; padding rows are
  decoded and dropped). The ragged layout reports that count as `engine_rows`.
* 'latr': k_b = round(n_b·η(step)) rows from LATR trees (slot budget k_b of round(G_max·η),
  η the piecewise-constant `rl.latr.mix_schedule`) and n_b − k_b independent rows, tree rows
  first. `rollout_tokens` = LATR's live-row tokens + the independent rows' tokens.
* 'eptree': EPTree forests of Lv = M·(1 + L·N·T) leaves per prompt; n_b of prompt b's leaves are
  kept after scoring (`eptree.select_leaves`: one correct leaf when there is one), the tree
  restricted to them. `rollout_tokens` counts the whole forest; `tree_kept_tokens` the distinct
  tokens on the kept leaves' paths (what decoding only the kept subtree would cost).
* 'treepo': TreePO's tree with a budget of n_b leaves in G_max slots; `rollout_tokens` counts
  each shared prefix once. `rl.treepo.segment='newline'` cuts its segments at the tokenizer's
  newline tokens (`newline_ids`), the task's step boundaries.
* 'echo': an ECHO entropy-confidence tree of G leaves per prompt (uniform requests only).
* 'arrol': ceil(oversample·G) rows per prompt pruned to G at a checkpoint by the run's online
  quality head (the companion 'arrol', `value.quality_head.ArrolRun`), which then trains on the
  survivors' outcomes; pruned rows never reach the batch (uniform requests only).

Multi-host: the samplers run on the global mesh and every process gets their outputs
(`parallel.to_host`); each process scores its own share of the rows (`score`) and the rewards
are gathered, so the host-side logic sees the same batch everywhere.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import numpy as np

from rl_jax import parallel
from rl_jax.data.batching import decode_completions
from rl_jax.registry import Registry
from rl_jax.rollout import requests as requests_lib
from rl_jax.rollout.requests import Requests, StepContext
from rl_jax.sampling import arrol, echo, eptree, latr, treepo
from rl_jax.sampling import engines as sampling_engines
from rl_jax.types import Rollout
from rl_jax.value.prm import segments

ENGINES = Registry("rollout engine")
FIELDS = ("tokens", "mask", "logp")
# Rollout modes that serve ragged requests; 'echo' and 'arrol' have a fixed number of rows per
# prompt in their sampler and raise a named error (`rollout.checks`).
RAGGED_ROLLOUTS = ("iid", "latr", "eptree", "treepo")
# Ragged modes whose rollout records a tree (no extension rounds: those use the iid engine).
RAGGED_TREES = ("eptree", "treepo")


def rollout_modes() -> tuple[str, ...]:
  """The values of `config.rl.rollout`: every engine but 'april' (APRIL is
  `config.rl.partial.enabled` with rollout='iid')."""
  return tuple(n for n in ENGINES.names() if n != "april")


@dataclasses.dataclass
class Served:
  """An engine's answer: `fields` (tokens / mask / logp [n, T], optional `tree` and
  `policy_version`), raw rewards [n, K], host metrics (`rollout_tokens` = tokens decoded), and
  the requests whose rows these are (None: all requested rows, in order)."""

  fields: dict
  rewards: np.ndarray
  extra: dict
  requests: Optional[Requests] = None


@dataclasses.dataclass(frozen=True)
class RoundKeys:
  """A round's randomness: `key` (a jax PRNG key) seeds the device sampler; `rng` is the host
  generator the planner drew the round's prompts with, whose later draws make an engine's host
  choices (EPTree's kept leaves); None in an extension round."""

  key: jax.Array
  rng: Optional[np.random.Generator] = None


def serve(ctx: StepContext, name: str, requests: Requests, keys: RoundKeys):
  """Runs engine `name` on `requests`: (Rollout with group = request index and every row valid,
  raw rewards [n, K], host metrics, prompt ids of the served requests)."""
  out = ENGINES.get(name)(ctx, requests, keys)
  req = requests if out.requests is None else out.requests
  exp, rows = ctx.exp, req.row_prompts
  f = out.fields
  batch = Rollout(prompt_tokens=exp.train_prompts[rows], prompt_mask=exp.train_prompt_mask[rows],
                  tokens=np.asarray(f["tokens"]), mask=np.asarray(f["mask"]),
                  logp=np.asarray(f["logp"]),
                  group=np.repeat(np.arange(len(req.counts)), req.counts).astype(np.int32),
                  valid=np.ones(len(rows), bool), tree=f.get("tree"),
                  **({"policy_version": f["policy_version"]} if "policy_version" in f else {}))
  return batch, np.asarray(out.rewards, np.float32), out.extra, req.prompt_ids


def score(exp, tokens, mask, example_ids) -> tuple[np.ndarray, dict]:
  """Rewards [R, K] of the completions (contained: a raise or a timeout scores 0) and the
  counts `reward/errors`, `reward/timeouts`; each process scores its `process_chunk` of the rows
  (the rewards and counts are gathered from all processes)."""
  n = len(example_ids)
  part = parallel.process_chunk(n)
  texts = decode_completions(exp.tokenizer, np.asarray(tokens)[part], np.asarray(mask)[part])
  local, stats = exp.reward_scorer.score_components(
      texts, [exp.task.train[i] for i in example_ids[part]], tuple(exp.config.rl.rewards))
  counts = stats.as_metrics()
  if jax.process_count() > 1:
    every = parallel.gather_chunks(np.asarray([list(counts.values())], np.int64),
                                   jax.process_count())
    counts = dict(zip(counts, (int(v) for v in every.sum(0))))
  return parallel.gather_chunks(local, n), counts


def bucketed_rows(config, n: int) -> int:
  """The row count of a row-wise engine call for n rows (`requests.engine_rows`, at most R_max,
  never below n)."""
  return max(requests_lib.engine_rows(n, requests_lib.batch_rows(config)), n)


def iid_rows(ctx: StepContext, ids, counts, key, rows: Optional[int] = None) -> dict:
  """counts[b] independent rows of prompt ids[b], in `np.repeat(ids, counts)` order, from the
  `config.sampling.engine` sampler: the grouped call when every count is equal and `rows` (the
  call's static row count; None = Σ counts for equal counts, else `bucketed_rows`) is Σ counts,
  else one row-wise call on `rows` rows (padding repeats the first prompt; dropped). Returns
  tokens / mask / logp [Σ counts, T]."""
  exp = ctx.exp
  ids, counts = np.asarray(ids, np.int64), np.asarray(counts, np.int64)
  n = int(counts.sum())
  equal = bool(len(counts)) and bool((counts == counts[0]).all())
  if rows is None:
    rows = n if equal else bucketed_rows(ctx.config, n)
  generate = sampling_engines.from_config(ctx.config)  # config.sampling.engine
  if equal and n == rows:
    sel, per = ids, int(counts[0])
  else:
    rep = np.repeat(ids, counts)
    sel, per = np.concatenate([rep, np.full(rows - n, rep[0] if n else 0, np.int64)]), 1
  out = parallel.to_host(generate(ctx.params, exp.train_prompts[sel],
                                  exp.train_prompt_mask[sel], key, num_samples=per,
                                  **exp.sampler_kwargs()))
  return {name: np.asarray(getattr(out, name))[:n] for name in FIELDS}


def mix_ratio(schedule, step: int) -> float:
  """η at `step` of a piecewise-constant schedule ((start_step, η), ...) sorted by step."""
  eta = 1.0
  for start, value in schedule:
    if step >= start:
      eta = float(value)
  return eta


def kept_tokens(tree, mask, group) -> int:
  """Distinct completion tokens on the paths of the rows of `tree` (per-row leaf_node/node_of,
  rows of prompt `group[r]`): each used node's segment once, its length read off a row through
  it. What decoding only those leaves' subtree costs."""
  node_of, mask, group = np.asarray(tree.node_of), np.asarray(mask, bool), np.asarray(group)
  n = np.asarray(tree.parent).shape[1]
  total = 0
  for b in np.unique(group):
    lens = np.zeros(n, np.int64)
    for r in np.flatnonzero(group == b):
      lens = np.maximum(lens, np.bincount(node_of[r][mask[r]], minlength=n)[:n])
    total += int(lens[1:].sum())
  return total


def _uniform_only(name: str, requests: Requests, group_size: int) -> None:
  if not (requests.uniform and requests.counts[0] == group_size):
    raise ValueError(f"rollout={name!r} serves G={group_size} rows per prompt; got requests for "
                     f"{requests.counts.tolist()} rows (ragged groups are not supported)")


# ---------------------------------------------------------------------------- the adapters


@ENGINES.register("iid")
def iid_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """Independent rows (`iid_rows`); the ragged layout reports the call's row count."""
  rows = bucketed_rows(ctx.config, requests.total)
  fields = iid_rows(ctx, requests.prompt_ids, requests.counts, keys.key, rows)
  rewards, counts = score(ctx.exp, fields["tokens"], fields["mask"], requests.row_prompts)
  extra = {"rollout_tokens": int(fields["mask"].sum()), **counts}
  if requests_lib.is_ragged(ctx.config):
    extra["engine_rows"] = rows
  return Served(fields, rewards, extra)


@ENGINES.register("latr", check=latr.LatrOptions.check_config)
def latr_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """k_b = round(n_b·η) LATR tree rows (slot budget k_b of round(G_max·η)) + n_b − k_b
  independent rows per prompt (tree rows first)."""
  exp, ids, counts = ctx.exp, requests.prompt_ids, requests.counts
  eta = mix_ratio(ctx.config.rl.latr.mix_schedule, ctx.step)
  slots = int(round(requests_lib.max_group_size(ctx.config) * eta))
  k = np.asarray([int(round(int(n) * eta)) for n in counts], np.int64)
  m = counts - k
  blocks, decoded = [], 0
  extra = {"tree_rows": float(k.mean())}
  if slots and k.any():
    tree = parallel.to_host(latr.latr_generate(
        ctx.params, exp.train_prompts[ids], exp.train_prompt_mask[ids],
        jax.random.fold_in(keys.key, 1), options=latr.LatrOptions.from_config(ctx.config),
        num_slots=slots, budgets=np.asarray(k, np.int32), **exp.sampler_kwargs()))
    keep = requests_lib.block_rows(k, slots)
    blocks.append({name: np.asarray(getattr(tree, name))[keep] for name in FIELDS})
    decoded += int(tree.decode_tokens)
    extra.update(tree_forks=int(tree.num_forks), tree_pruned=int(tree.num_pruned),
                 tree_steps=int(tree.tree_steps),  # rows copied from a root's first row:
                 tree_filled=int(np.asarray(tree.filled)[keep].sum()))  # no branch survived
  else:
    k, m = np.zeros_like(k), counts
  if m.any():
    iid = iid_rows(ctx, ids[m > 0], m[m > 0], keys.key)
    blocks.append(iid)
    decoded += int(iid["mask"].sum())
  # Blocks: Σk tree rows then Σm independent rows, each in prompt order; per prompt its tree
  # rows come first, then its independent rows.
  tree_start = np.concatenate([[0], np.cumsum(k)[:-1]]).astype(np.int64)
  iid_start = int(k.sum()) + np.concatenate([[0], np.cumsum(m)[:-1]]).astype(np.int64)
  order = np.concatenate([np.concatenate([tree_start[b] + np.arange(k[b]),
                                          iid_start[b] + np.arange(m[b])])
                          for b in range(len(ids))]).astype(np.int64)
  fields = {name: np.concatenate([blk[name] for blk in blocks])[order] for name in FIELDS}
  rewards, host = score(exp, fields["tokens"], fields["mask"], requests.row_prompts)
  extra.update(rollout_tokens=decoded, **host)
  return Served(fields, rewards, extra)


@ENGINES.register("eptree", check=eptree.EPTreeOptions.check_config, tree=True)
def eptree_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """EPTree forests of Lv leaves per prompt; n_b of prompt b's leaves kept (`select_leaves`)."""
  exp, ids, counts = ctx.exp, requests.prompt_ids, requests.counts
  opts = eptree.EPTreeOptions.from_config(ctx.config)
  out = parallel.to_host(eptree.eptree_rollout(
      ctx.params, exp.train_prompts[ids], exp.train_prompt_mask[ids], keys.key, options=opts,
      **exp.sampler_kwargs()))
  all_rewards, host = score(exp, out.tokens, out.mask, np.repeat(ids, opts.leaves))
  keep = eptree.select_leaves(all_rewards[:, 0], opts.leaves, counts, keys.rng)
  tree = eptree.restrict(out.tree, keep)
  fields = dict(tokens=out.tokens[keep], mask=out.mask[keep], logp=out.logp[keep], tree=tree)
  group = np.repeat(np.arange(len(ids)), counts)
  return Served(fields, all_rewards[keep], {
      "rollout_tokens": out.decode_tokens, "tree_leaves": opts.leaves,
      "tree_kept_tokens": kept_tokens(tree, fields["mask"], group), **host})


@functools.lru_cache(maxsize=4)
def newline_ids(tokenizer) -> tuple[int, ...]:
  """Every token id whose text holds a newline (`value.prm.segments.delimiter_ids`; read once
  per tokenizer)."""
  return segments.delimiter_ids(tokenizer, "\n")


@ENGINES.register("treepo", check=treepo.TreePOOptions.check_config, tree=True)
def treepo_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """A TreePO tree with a budget of n_b leaves per prompt in G_max slots."""
  exp, ids, counts = ctx.exp, requests.prompt_ids, requests.counts
  gm = requests_lib.max_group_size(ctx.config)
  lines = ctx.config.rl.treepo.segment == "newline"
  opts = treepo.TreePOOptions.from_config(ctx.config, newline_ids(exp.tokenizer) if lines else ())
  out = treepo.treepo_rollout(ctx.params, exp.train_prompts[ids], exp.train_prompt_mask[ids],
                              keys.key, options=opts, group=gm, budgets=counts,
                              **exp.sampler_kwargs())
  keep = requests_lib.block_rows(counts, gm)
  fields = dict(tokens=out.tokens[keep], mask=out.mask[keep], logp=out.logp[keep],
                tree=eptree.restrict(out.tree, keep))
  rewards, host = score(exp, fields["tokens"], fields["mask"], requests.row_prompts)
  return Served(fields, rewards, {
      "rollout_tokens": out.decode_tokens, "tree_filled_rows": int(out.filled[keep].sum()),
      "tree_forks": out.num_forks,
      "tree_fork_prefix_mean": out.fork_prefix_tokens / max(out.num_forks, 1), **host})


@ENGINES.register("echo", check=echo.EchoOptions.check_config, tree=True)
def echo_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """An ECHO tree of G leaves per prompt, recorded for the tree advantages."""
  exp, ids, g = ctx.exp, requests.prompt_ids, ctx.config.rl.group_size
  _uniform_only("echo", requests, g)
  out = parallel.to_host(echo.echo_generate(
      ctx.params, exp.train_prompts[ids], exp.train_prompt_mask[ids], keys.key,
      options=echo.EchoOptions.from_config(ctx.config), num_slots=g, **exp.sampler_kwargs()))
  rewards, counts = score(exp, out.tokens, out.mask, requests.row_prompts)
  fields = dict(tokens=np.asarray(out.tokens), mask=np.asarray(out.mask),
                logp=np.asarray(out.logp), tree=echo.to_tree(out))
  return Served(fields, rewards, {"rollout_tokens": int(out.decode_tokens),
                                  "tree_forks": int(out.num_children),
                                  "tree_branch_events": int(out.num_branch_events),
                                  "tree_pruned": int(out.num_pruned), **counts})


@ENGINES.register("arrol", check=arrol.ArrolOptions.check_config)
def arrol_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """ARRoL: N0 rows per prompt, pruned to G at the checkpoint by the run's quality head, which
  then trains on the survivors' outcomes. The batch holds the G survivors only."""
  exp, ids, g = ctx.exp, requests.prompt_ids, ctx.config.rl.group_size
  _uniform_only("arrol", requests, g)
  run = ctx.companion("arrol", "rollout='arrol'")
  out = parallel.to_host(arrol.arrol_generate(
      ctx.params, run.head.params, exp.train_prompts[ids], exp.train_prompt_mask[ids], keys.key,
      options=run.options, **exp.sampler_kwargs()))
  s = out.samples
  rewards, counts = score(exp, s.tokens, s.mask, requests.row_prompts)
  head_metrics = run.observe(out.features, rewards)
  pruned = len(ids) * (run.options.oversample - g)
  return Served(dict(tokens=s.tokens, mask=s.mask, logp=s.logp), rewards, {
      "rollout_tokens": int(np.asarray(s.mask).sum()) + int(out.pruned_tokens),
      "arrol/rows_pruned": pruned, "arrol/rows_stopped": int(out.pruned_live),
      "arrol/tokens_saved": int(out.saved_slot_steps),
      "arrol/pruned_tokens": int(out.pruned_tokens), "arrol/slot_steps": int(out.slot_steps),
      **head_metrics, **counts})
