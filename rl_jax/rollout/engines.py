"""Engines (docs/design.md §7): a round's `Requests` -> one typed `Round` (rows, raw rewards).

In: `serve(ctx, name, requests, keys)` runs the entry `ENGINES[name]`. Out: a `Round` whose
`rollout` has prompt b's rows contiguous in the order of the served requests (`group` = request
index, every row valid), `rewards` [n, K] float32 raw, `metrics` the host metrics.

One line, the same for every engine: entry.serve -> `Served` (tokens, mask, logp, the requests
whose rows these are, optional tree / policy versions / companion features, engine metrics) ->
`score` (once, every engine) -> entry.select (EPTree: keeps leaves by reward) -> the run
companions' round hooks (`StepContext.on_round`, e.g. ARRoL's head training) -> `Round`.

Each entry (`Engine`) declares what its method needs: whether it serves ragged requests and
records a tree, the fields it adds to the RL batch (`example`), the run companion it reads, the
config switch that makes it serve round 0 instead of `config.rl.rollout` (APRIL) and its own
planner. The adapters' methods are described in docs/methods.md. Invariant: a dense round
(uniform requests) and a ragged one with every n_b = G_max = G give the same batch (a test).

Multi-host: the samplers run on the global mesh and every process gets their outputs
(`parallel.to_host`); each process scores its own share of the rows (`score`) and the rewards
are gathered, so the host-side logic sees the same batch everywhere.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional

import jax
import numpy as np

from rl_jax import parallel
from rl_jax.data.batching import decode_completions
from rl_jax.registry import Registry
from rl_jax.rollout import requests as requests_lib
from rl_jax.rollout.requests import Requests, StepContext
from rl_jax.sampling import arrol, echo, eptree, latr, treepo
from rl_jax.sampling import engines as sampling_engines
from rl_jax.types import Rollout, Tree
from rl_jax.value.prm import segments

ENGINES = Registry("rollout engine")
FIELDS = ("tokens", "mask", "logp")


@dataclasses.dataclass
class Served:
  """An engine's rows before scoring: tokens / mask / logp [n, T], the requests whose rows these
  are (prompt b's rows contiguous), and what some engines add: the tree, per-token policy
  versions [n, T], features for the engine's companion (ARRoL: the quality head's inputs), the
  row count of the sampler call (`engine_rows`, iid) and host metrics (`rollout_tokens` = tokens
  decoded)."""

  tokens: np.ndarray
  mask: np.ndarray
  logp: np.ndarray
  requests: Requests
  tree: Optional[Tree] = None
  policy_version: Optional[np.ndarray] = None
  features: Any = None
  engine_rows: Optional[int] = None
  metrics: dict = dataclasses.field(default_factory=dict)

  def rows(self, keep: np.ndarray, requests: Requests, tree: Optional[Tree]) -> "Served":
    """These rows restricted to `keep`, now the rows of `requests`."""
    return dataclasses.replace(
        self, tokens=self.tokens[keep], mask=self.mask[keep], logp=self.logp[keep],
        requests=requests, tree=tree,
        policy_version=None if self.policy_version is None else self.policy_version[keep])


@dataclasses.dataclass
class Round:
  """One generation round, typed from the engine to the pool: `rollout` (group = request index;
  rows with valid=False are padding), raw `rewards` [n, K] float32, host `metrics`, the prompt
  ids of the round's requests (None: not named, e.g. a stub) and the engine's companion
  `features` (None for most engines)."""

  rollout: Rollout
  rewards: np.ndarray
  metrics: dict = dataclasses.field(default_factory=dict)
  prompt_ids: Optional[np.ndarray] = None
  features: Any = None


@dataclasses.dataclass(frozen=True)
class Engine:
  """A registry entry: `serve(ctx, requests, keys) -> Served`, and what the method declares.

  select: (ctx, served, rewards, requests, keys) -> (served, rewards), run after scoring (EPTree
    keeps n_b leaves by reward); None keeps every row.
  ragged: serves ragged requests (else G rows per prompt only, `uniform_only`).
  tree: its rollouts record a tree.
  example: (config, batch) -> batch with the fields its rollouts add (the jitted step's shapes).
  companion: the run companion (`train.companions`) it reads, or None.
  switch: config -> bool; when set, the engine is not a value of `config.rl.rollout` but serves
    round 0 whenever switch(config) holds (APRIL: `rl.partial.enabled`).
  plan: (ctx, round_idx, rng) -> Requests, its own planner (None: `planner.plan`).
  check: config -> None, raising ValueError naming the field for a config the method cannot run
    (its options dataclass's `check_config`; `rollout.checks` runs it); None: nothing to check.
  """

  serve: Callable
  select: Optional[Callable] = None
  ragged: bool = False
  tree: bool = False
  example: Optional[Callable] = None
  companion: Optional[str] = None
  switch: Optional[Callable] = None
  plan: Optional[Callable] = None
  check: Optional[Callable] = None


def register(name: str, **declared) -> Callable:
  """Decorator: registers `serve` as engine `name` with the `Engine` fields `declared`."""

  def deco(serve):
    ENGINES.register(name)(Engine(serve, **declared))
    return serve

  return deco


def rollout_modes() -> tuple[str, ...]:
  """The values of `config.rl.rollout`: every engine that no config switch turns on."""
  return tuple(n for n in ENGINES.names() if ENGINES.get(n).switch is None)


def ragged_modes() -> tuple[str, ...]:
  """Rollout modes that serve ragged requests (the others raise a named error, `uniform_only`)."""
  return tuple(n for n, e in ENGINES.entries() if e.switch is None and e.ragged)


def tree_modes() -> tuple[str, ...]:
  """Ragged modes whose rollout records a tree (extension rounds, iid, cannot join it)."""
  return tuple(n for n in ragged_modes() if ENGINES.get(n).tree)


def switched_on(config) -> tuple[str, ...]:
  """The engines that are not values of `config.rl.rollout` but whose switch `config` turns on
  (APRIL), in registration order."""
  return tuple(n for n, e in ENGINES.entries() if e.switch is not None and e.switch(config))


def fresh_engine(config, round_idx: int) -> str:
  """The engine of fresh round `round_idx`: in round 0 the first engine switched on (APRIL),
  else `config.rl.rollout`."""
  on = switched_on(config) if round_idx == 0 else ()
  return on[0] if on else config.rl.rollout


def engines_of(config) -> tuple[Engine, ...]:
  """The entries a config's fresh rounds use: `config.rl.rollout`'s and any switched on."""
  return tuple(ENGINES.get(n) for n in (config.rl.rollout, *switched_on(config)))


def example(config, batch: Rollout) -> Rollout:
  """`batch` with the fields the config's engines add (`Engine.example`)."""
  for entry in engines_of(config):
    if entry.example is not None:
      batch = entry.example(config, batch)
  return batch


@dataclasses.dataclass(frozen=True)
class RoundKeys:
  """A round's randomness: `key` (a jax PRNG key) seeds the device sampler; `rng` is the host
  generator the planner drew the round's prompts with, whose later draws make an engine's host
  choices (EPTree's kept leaves); None in an extension round."""

  key: jax.Array
  rng: Optional[np.random.Generator] = None


def serve(ctx: StepContext, name: str, requests: Requests, keys: RoundKeys) -> Round:
  """Engine `name` on `requests`, scored once, then the companions' round hooks: a `Round`.

  Metrics: the engine's, the hooks', the scorer's counts, then `engine_rows` (ragged layout)."""
  entry = ENGINES.get(name)
  served = entry.serve(ctx, requests, keys)
  rewards, counts = score(ctx.exp, served.tokens, served.mask, served.requests.row_prompts)
  if entry.select is not None:
    served, rewards = entry.select(ctx, served, rewards, requests, keys)
  req, exp = served.requests, ctx.exp
  rows = req.row_prompts
  extra = {} if served.policy_version is None else {"policy_version": served.policy_version}
  rollout = Rollout(prompt_tokens=exp.train_prompts[rows], prompt_mask=exp.train_prompt_mask[rows],
                    tokens=np.asarray(served.tokens), mask=np.asarray(served.mask),
                    logp=np.asarray(served.logp),
                    group=np.repeat(np.arange(len(req.counts)), req.counts).astype(np.int32),
                    valid=np.ones(len(rows), bool), tree=served.tree, **extra)
  out = Round(rollout, np.asarray(rewards, np.float32), dict(served.metrics), req.prompt_ids,
              served.features)
  for hook in ctx.on_round:
    out.metrics.update(hook(ctx, out))
  out.metrics.update(counts)
  if served.engine_rows is not None and requests_lib.is_ragged(ctx.config):
    out.metrics["engine_rows"] = served.engine_rows
  return out


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


def uniform_only(name: str, requests: Requests, group_size: int) -> None:
  """Raises ValueError unless every request asks for G = `group_size` rows."""
  if not (requests.uniform and requests.counts[0] == group_size):
    raise ValueError(f"rollout={name!r} serves G={group_size} rows per prompt; got requests for "
                     f"{requests.counts.tolist()} rows (ragged groups are not supported)")


@functools.lru_cache(maxsize=4)
def newline_ids(tokenizer) -> tuple[int, ...]:
  """Every token id whose text holds a newline (`value.prm.segments.delimiter_ids`; read once
  per tokenizer)."""
  return segments.delimiter_ids(tokenizer, "\n")


# ---------------------------------------------------------------------------- the adapters
# Each: serve(ctx, requests, keys) -> Served, unscored (docs/methods.md describes the methods).


@register("iid", ragged=True)
def iid_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """Independent rows (`iid_rows`) in one call of `bucketed_rows` rows (reported as
  `engine_rows` in the ragged layout)."""
  rows = bucketed_rows(ctx.config, requests.total)
  f = iid_rows(ctx, requests.prompt_ids, requests.counts, keys.key, rows)
  return Served(f["tokens"], f["mask"], f["logp"], requests, engine_rows=rows,
                metrics={"rollout_tokens": int(f["mask"].sum())})


# Extension rounds (a round rule's extra rows for prompts already drawn) use this engine.
EXTENSION_ENGINE = "iid"


@register("latr", ragged=True, check=latr.LatrOptions.check_config)
def latr_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """k_b = round(n_b·η) LATR tree rows (slot budget k_b of round(G_max·η), η from
  `rl.latr.mix_schedule`) + n_b − k_b independent rows per prompt, tree rows first.
  `rollout_tokens` = LATR's live-row tokens + the independent rows' tokens."""
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
  f = {name: np.concatenate([blk[name] for blk in blocks])[order] for name in FIELDS}
  extra["rollout_tokens"] = decoded
  return Served(f["tokens"], f["mask"], f["logp"], requests, metrics=extra)


def _eptree_example(config, batch: Rollout) -> Rollout:
  """The EPTree tree: parent/depth [B, N], leaf_node [R, N], node_of [R, T]."""
  n = eptree.EPTreeOptions.from_config(config).max_nodes
  b, (r, t) = config.rl.prompts_per_step, np.shape(batch.tokens)
  return batch.replace(tree=Tree(
      parent=np.zeros((b, n), np.int32), depth=np.zeros((b, n), np.int32),
      leaf_node=np.zeros((r, n), bool), node_of=np.zeros((r, t), np.int32)))


def _eptree_select(ctx: StepContext, served: Served, rewards, requests: Requests,
                   keys: RoundKeys):
  """Keeps n_b of prompt b's Lv scored leaves (`eptree.select_leaves`, drawing with `keys.rng`),
  the tree restricted to them; reports `tree_kept_tokens`."""
  leaves = eptree.EPTreeOptions.from_config(ctx.config).leaves
  keep = eptree.select_leaves(rewards[:, 0], leaves, requests.counts, keys.rng)
  out = served.rows(keep, requests, eptree.restrict(served.tree, keep))
  group = np.repeat(np.arange(len(requests.prompt_ids)), requests.counts)
  out.metrics = dict(served.metrics, tree_kept_tokens=kept_tokens(out.tree, out.mask, group))
  return out, rewards[keep]


@register("eptree", ragged=True, tree=True, select=_eptree_select, example=_eptree_example,
          check=eptree.EPTreeOptions.check_config)
def eptree_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """EPTree forests of Lv = M·(1 + L·N·T) leaves per prompt, every leaf served (scored, then
  `_eptree_select` keeps n_b). `rollout_tokens` counts the whole forest."""
  exp, ids = ctx.exp, requests.prompt_ids
  opts = eptree.EPTreeOptions.from_config(ctx.config)
  out = parallel.to_host(eptree.eptree_rollout(
      ctx.params, exp.train_prompts[ids], exp.train_prompt_mask[ids], keys.key, options=opts,
      **exp.sampler_kwargs()))
  forest = Requests.of_group_size(ids, opts.leaves)
  return Served(out.tokens, out.mask, out.logp, forest, tree=out.tree, metrics={
      "rollout_tokens": out.decode_tokens, "tree_leaves": opts.leaves})


@register("treepo", ragged=True, tree=True, check=treepo.TreePOOptions.check_config)
def treepo_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """A TreePO tree with a budget of n_b leaves per prompt in G_max slots; `rollout_tokens`
  counts each shared prefix once; `rl.treepo.segment='newline'` cuts segments at
  `newline_ids`."""
  exp, ids, counts = ctx.exp, requests.prompt_ids, requests.counts
  gm = requests_lib.max_group_size(ctx.config)
  lines = ctx.config.rl.treepo.segment == "newline"
  opts = treepo.TreePOOptions.from_config(ctx.config, newline_ids(exp.tokenizer) if lines else ())
  out = treepo.treepo_rollout(ctx.params, exp.train_prompts[ids], exp.train_prompt_mask[ids],
                              keys.key, options=opts, group=gm, budgets=counts,
                              **exp.sampler_kwargs())
  keep = requests_lib.block_rows(counts, gm)
  return Served(out.tokens[keep], out.mask[keep], out.logp[keep], requests,
                tree=eptree.restrict(out.tree, keep), metrics={
                    "rollout_tokens": out.decode_tokens,
                    "tree_filled_rows": int(out.filled[keep].sum()),
                    "tree_forks": out.num_forks,
                    "tree_fork_prefix_mean": out.fork_prefix_tokens / max(out.num_forks, 1)})


@register("echo", tree=True, check=echo.EchoOptions.check_config)
def echo_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """An ECHO tree of G leaves per prompt (uniform requests only), recorded for the tree
  advantages."""
  exp, ids, g = ctx.exp, requests.prompt_ids, ctx.config.rl.group_size
  uniform_only(ctx.config.rl.rollout, requests, g)
  out = parallel.to_host(echo.echo_generate(
      ctx.params, exp.train_prompts[ids], exp.train_prompt_mask[ids], keys.key,
      options=echo.EchoOptions.from_config(ctx.config), num_slots=g, **exp.sampler_kwargs()))
  return Served(np.asarray(out.tokens), np.asarray(out.mask), np.asarray(out.logp), requests,
                tree=echo.to_tree(out), metrics={
                    "rollout_tokens": int(out.decode_tokens), "tree_forks": int(out.num_children),
                    "tree_branch_events": int(out.num_branch_events),
                    "tree_pruned": int(out.num_pruned)})


@register("arrol", companion="arrol", check=arrol.ArrolOptions.check_config)
def arrol_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """ceil(oversample·G) rows per prompt pruned to G at the checkpoint by the run's quality head
  (companion 'arrol'; uniform requests only); only the G survivors are served, with the head's
  `features` (its companion trains on them after scoring)."""
  exp, ids, g = ctx.exp, requests.prompt_ids, ctx.config.rl.group_size
  uniform_only(ctx.config.rl.rollout, requests, g)
  run = ctx.companion("arrol", "rollout='arrol'")
  out = parallel.to_host(arrol.arrol_generate(
      ctx.params, run.head.params, exp.train_prompts[ids], exp.train_prompt_mask[ids], keys.key,
      options=run.options, **exp.sampler_kwargs()))
  s = out.samples
  pruned = len(ids) * (run.options.oversample - g)
  return Served(s.tokens, s.mask, s.logp, requests, features=out.features, metrics={
      "rollout_tokens": int(np.asarray(s.mask).sum()) + int(out.pruned_tokens),
      "arrol/rows_pruned": pruned, "arrol/rows_stopped": int(out.pruned_live),
      "arrol/tokens_saved": int(out.saved_slot_steps),
      "arrol/pruned_tokens": int(out.pruned_tokens), "arrol/slot_steps": int(out.slot_steps)})
