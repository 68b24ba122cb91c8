"""Host-side RL rollouts: sample groups, score them, DAPO dynamic sampling and overlong shaping.

One step's batch has `prompts_per_step` groups of `group_size` rows (static shapes; see `planner`
for ragged groups):

* Rewards are the `config.rl.rewards` components [R, K] (`rl_jax.rewards.REWARDS`).
* Overlong shaping (`overlong_buffer` L_cache > 0; ALGORITHMS.md §2.2): the soft punishment
  `losses.dapo_overlong_penalty(L, L_max=sampling.max_new_tokens, L_cache)` is added to the first
  reward component (the correctness reward), L = completion tokens including EOS.
* Rollout mode (`rollout`): 'iid' samples G independent rows per prompt; 'latr' takes
  round(G·η(step)) rows from LATR trees (`rl_jax.sampling.latr`, options `config.rl.latr`, η the
  piecewise-constant `mix_schedule`) and the rest independently; 'eptree' grows EPTree trees
  (`rl_jax.sampling.eptree`, options `config.rl.eptree`) and keeps G of their leaves per prompt,
  recording the tree for the tree advantages; 'treepo' grows a segment-wise TreePO tree of G
  leaves per prompt (`rl_jax.sampling.treepo`, options `config.rl.treepo`), tree recorded; 'echo'
  grows an ECHO entropy-confidence tree of G leaves per prompt (`rl_jax.sampling.echo`, options
  `config.rl.echo`), tree recorded. 'arrol'
  samples ceil(oversample·G) rows per prompt and keeps G of them at a pruning checkpoint, chosen
  by an online quality head (`rl_jax.sampling.arrol`, `rl_jax.value.quality_head`, options
  `config.rl.arrol`; ALGORITHMS.md §6.6 [R]); the pruned rows are not in the batch. `rollout_tokens` counts the tokens decoded to
  make the batch (a fork's shared prefix once), `batch_tokens` the completion tokens in it.
* Dynamic sampling (`dynamic_sampling=True`): groups whose rewards are all equal carry no
  gradient and are dropped; further generation rounds of `prompts_per_step` fresh prompts are
  drawn until that many informative groups exist or `max_gen_rounds` rounds have run. Missing
  groups are filled with dropped groups marked valid=False (loss weight 0).

Multi-host: the samplers run on the global mesh and every process gets their outputs
(`parallel.to_host`); each process scores its own share of the rows (`parallel.process_chunk`)
and the rewards are gathered, so the host-side logic sees the same batch everywhere.

Round 0 draws exactly what a run without dynamic sampling draws, so the option changes nothing
for steps whose first round is fully informative. Randomness depends only on (seed, step, round).

The loop itself is `rounds.collect` (planner -> engine -> round rules, DESIGN.md §7); dynamic
sampling is the round rule 'dapo_dynamic' (`round_rules`). With `config.rl.max_group_size` > 0
the batch is ragged (`planner`): an allocator's counts served by the iid engine in R_max rows,
or for 'latr' / 'eptree' / 'treepo' by their tree sampler (`ragged_trees`).
With `config.rl.partial.enabled` (APRIL, `april`) round 0 is the partial engine: over-provisioned
groups, the first B complete ones make the batch, the rest are carried (with per-token policy
versions) into the next step by the `april.Carry` that the RL phase holds and checkpoints.
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np

from rl_jax import parallel
from rl_jax import rewards as rewards_lib
from rl_jax import seeds
from rl_jax.data.batching import decode_completions
from rl_jax.rl import losses
from rl_jax.sampling import arrol, echo, engines, eptree, latr, treepo
from rl_jax.train import allocate, april, planner, ragged_trees, rl_inputs, round_rules, rounds
from rl_jax.experiment import Experiment
from rl_jax.types import Rollout

ROLLOUTS = ("iid", "latr", "eptree", "treepo", "echo", "arrol")
overlong_shaping = rounds.overlong_shaping


def mix_ratio(schedule, step: int) -> float:
  """η at `step` of a piecewise-constant schedule ((start_step, η), ...) sorted by step."""
  eta = 1.0
  for start, value in schedule:
    if step >= start:
      eta = float(value)
  return eta


def check_config(config) -> None:
  """Raises ValueError for inconsistent `config.rl` rollout settings."""
  rl = config.rl
  if not rl.rewards:
    raise ValueError("config.rl.rewards is empty; expected reward names such as ('task_score',)")
  for name in rl.rewards:
    if name not in rewards_lib.REWARDS:
      raise ValueError(f"config.rl.rewards names an unknown reward {name!r}; expected one of "
                       f"{list(rewards_lib.REWARDS.names())}")
  if rl.reward_weights and len(rl.reward_weights) != len(rl.rewards):
    raise ValueError(f"config.rl.reward_weights has {len(rl.reward_weights)} entries for "
                     f"{len(rl.rewards)} rewards {tuple(rl.rewards)}")
  if rl.max_gen_rounds < 1:
    raise ValueError(f"config.rl.max_gen_rounds must be >= 1, got {rl.max_gen_rounds}")
  if not 0 <= rl.overlong_buffer <= config.sampling.max_new_tokens:
    raise ValueError(f"config.rl.overlong_buffer={rl.overlong_buffer}: expected an integer in "
                     f"[0, sampling.max_new_tokens={config.sampling.max_new_tokens}]")
  if rl.rollout not in ROLLOUTS:
    raise ValueError(f"config.rl.rollout={rl.rollout!r}; expected one of {ROLLOUTS}")
  if rl.rollout == "latr":
    latr.LatrOptions.from_config(config)
    steps = [s for s, _ in rl.latr.mix_schedule]
    if steps != sorted(steps) or any(not 0 <= e <= 1 for _, e in rl.latr.mix_schedule):
      raise ValueError(f"config.rl.latr.mix_schedule must be (step, eta) pairs sorted by step "
                       f"with eta in [0, 1], got {rl.latr.mix_schedule}")
  if rl.rollout == "eptree":
    leaves = eptree.EPTreeOptions.from_config(config).leaves
    for field in ("group_size", "max_group_size"):
      if rl[field] > leaves:
        raise ValueError(f"config.rl.{field}={rl[field]} exceeds the {leaves} leaves per "
                         f"prompt of config.rl.eptree (num_chains·(1 + rounds·forks_per_round·"
                         f"branches))")
  # Ragged batches carry a tree per slot across rounds (ragged_trees.assemble_tree); dense ones
  # only the one round's tree.
  tree_across_rounds = planner.is_ragged(config) and rl.rollout in planner.RAGGED_TREES
  if rl.rollout in ("eptree", "treepo", "echo") and rl.dynamic_sampling and (
      not tree_across_rounds):
    raise ValueError(f"config.rl.dynamic_sampling is not supported with rollout="
                     f"{rl.rollout!r} (groups carry a tree) in dense groups; use rollout='iid' "
                     "or 'latr', or ragged groups (config.rl.max_group_size > 0)")
  if rl.rollout == "treepo":
    treepo.TreePOOptions.from_config(config)
  if rl.rollout == "echo":
    _check_echo(config)
  if rl.rollout == "arrol":
    arrol.ArrolOptions.from_config(config)
  if not 0.0 <= rl.success_threshold < 1.0:
    raise ValueError(f"config.rl.success_threshold must be in [0, 1) (a rollout succeeds when "
                     f"its first reward component exceeds it), got {rl.success_threshold}")
  planner.check_config(config)
  april.check_config(config)
  round_rules.active_rules(config)
  if rl.advantage == "v05":
    _check_v05(config)


def _check_v05(config) -> None:
  """advantage='v05' needs ragged groups that can hold n_max rows, and a known prior."""
  from rl_jax.value import priors  # pylint: disable=import-outside-toplevel
  rl, v = config.rl, config.rl.v05
  if not rl.group_size <= v.n_max <= rl.max_group_size:
    raise ValueError(f"config.rl.advantage='v05' with group_size={rl.group_size}, "
                     f"v05.n_max={v.n_max}, max_group_size={rl.max_group_size}; expected "
                     "group_size <= v05.n_max <= max_group_size (ragged groups, e.g. "
                     "--config.rl.max_group_size=16 --config.rl.rows=2*B*G)")
  if rl.dynamic_sampling:
    raise ValueError("config.rl.advantage='v05' with dynamic_sampling=True; expected "
                     "dynamic_sampling=False (V0.5 draws its own extra rounds)")
  if v.prior not in priors.PRIORS:
    raise ValueError(f"config.rl.v05.prior={v.prior!r}; expected one of "
                     f"{list(priors.PRIORS.names())}")
  if not 0 < v.p0_clip[0] < v.p0_clip[1] < 1:
    raise ValueError(f"config.rl.v05.p0_clip={tuple(v.p0_clip)}; expected (lo, hi) with "
                     "0 < lo < hi < 1")


def _check_echo(config) -> None:
  """rollout='echo': valid `config.rl.echo` options, and fewer branching rows than G (0 = no
  branching)."""
  opts = echo.EchoOptions.from_config(config)
  g = config.rl.group_size
  if opts.branch_roots >= g:
    raise ValueError(f"config.rl.echo.branch_roots={opts.branch_roots}: expected fewer than "
                     f"group_size={g} (the other slots hold the branches; 0 = no branching)")


def informative_groups(rewards: np.ndarray, valid: np.ndarray, group_size: int,
                       weights, multi_reward: bool) -> np.ndarray:
  """bool [B]: the group's estimator input is not constant.

  Scalar estimators see `Σ_k w_k r_k`; multi-reward ones each component (a group is informative
  if any component varies).
  """
  r = np.asarray(rewards, np.float32)
  k = r.shape[1]
  w = np.ones(k, np.float32) if not weights else np.asarray(weights, np.float32)
  cols = r if multi_reward else (r @ w)[:, None]
  by_col = cols.reshape(-1, group_size, cols.shape[1]).transpose(0, 2, 1)  # [B, K', G]
  v = np.broadcast_to(np.asarray(valid).reshape(-1, 1, group_size), by_col.shape)
  return np.asarray(losses.dapo_informative_groups(by_col, v)).any(axis=-1)


def generation_round(exp: Experiment, params, step: int, round_idx: int, stream=None,
                     history=None, carry=None):
  """Samples the planner's rows for B fresh prompts; returns (rollout, raw rewards [R, K], host
  metrics, prompt ids [B]).

  The prompts are the host RNG's draw of (seed, step, round), or the next batch of `stream`
  (a `data.grain_source.ProblemStream`; config.data.source='grain'). Dense layout: G rows each
  from the rollout mode's sampler. Ragged layout: counts from the allocator
  (`planner.allocate`, statistics from `history`), served by the iid engine in a power-of-two
  row count (`planner.engine_rows`; uniform counts: the dense round's own sampler call), or for
  the tree modes by their sampler (`ragged_trees.tree_round`: Σ n_b rows).
  With APRIL (`carry`, a `train.april.Carry`; config.rl.partial) round 0 is `april.april_round`.
  """
  rl = exp.config.rl
  tag = seeds.RL if round_idx == 0 else seeds.RL_ROUND
  rng = exp.host_rng(seeds.RL, step) if round_idx == 0 else exp.host_rng(tag, step, round_idx)
  key = planner.round_key(exp, tag, step, round_idx)
  if carry is not None and round_idx == 0:
    return april.april_round(exp, params, step, carry, key, rng,
                             score=lambda tokens, mask, ids: _score(exp, tokens, mask, ids))
  # rl.prompt_pool: draw from a fixed random N of the train problems (allocate.prompt_pool; 0 =
  # all); data-selection allocators draw more candidates than prompts_per_step and keep B.
  idx = (stream.next_indices() if stream is not None else allocate.draw_prompts(
      exp.config, len(exp.train_prompts), allocate.candidate_count(exp.config), rng))
  if planner.is_ragged(exp.config):
    stats = prompt_stats(exp, params, idx, step, history)
    counts = planner.allocate(exp.config, stats, round_idx)
    idx, counts = idx[counts > 0], counts[counts > 0]
    requests = planner.Requests(idx, counts)
    if rl.rollout != "iid":  # Tree modes (ragged_trees): their sampler, Σ n_b rows.
      return (*ragged_trees.tree_round(
          exp, params, requests, key, rng, step,
          score=lambda tokens, mask, ids: _score(exp, tokens, mask, ids)), idx)
    # Decode only the rows asked for, in a bucketed number of rows (planner.engine_rows).
    rows = planner.engine_rows(requests.total, planner.batch_rows(exp.config))
    return (*_engine_round(exp, params, requests, key, max(rows, requests.total)), idx)
  rows = np.repeat(idx, rl.group_size)
  sample = {"iid": _iid_rows, "latr": _latr_rows, "eptree": _eptree_rows,
            "treepo": _treepo_rows, "echo": _echo_rows, "arrol": _arrol_rows}[rl.rollout]
  out, rewards, extra = sample(exp, params, idx, key, rng, step)
  batch = Rollout(prompt_tokens=exp.train_prompts[rows], prompt_mask=exp.train_prompt_mask[rows],
                  tokens=np.asarray(out["tokens"]), mask=np.asarray(out["mask"]),
                  logp=np.asarray(out["logp"]),
                  group=np.repeat(np.arange(len(idx)), rl.group_size).astype(np.int32),
                  valid=np.ones(len(rows), bool), tree=out.get("tree"))
  return batch, rewards, extra, idx


def prompt_stats(exp: Experiment, params, idx, step: int, history) -> planner.PromptStats:
  """The allocator's view of prompts `idx`: history counts and the predictions of
  `config.rl.allocator_prior` (p_hat, sigma0_sq) when one is set."""
  ids = np.asarray(idx, np.int64)
  if history is None:
    att = suc = np.zeros(len(ids), np.int64)
  else:
    att, suc = history.stats(ids)
  predictions = {}
  name = exp.config.rl.allocator_prior
  if name:
    from rl_jax.value import priors  # pylint: disable=import-outside-toplevel
    p0, s2 = priors.make(name, exp, history).predict(params, ids)
    predictions = {"p_hat": np.asarray(p0), "sigma0_sq": np.asarray(s2)}
  return planner.PromptStats(ids, att, suc, predictions, history, step)


def _engine_round(exp: Experiment, params, requests: planner.Requests, key, rows: int):
  """One iid engine call: (Rollout with group = request index, rewards [rows, K], metrics)."""
  fields, group, valid, rewards, extra = planner.sample_requests(
      exp, params, requests, key, rows=rows,
      score=lambda tokens, mask, ids: _score(exp, tokens, mask, ids))
  row_ids = np.concatenate([np.repeat(requests.prompt_ids, requests.counts),
                            np.zeros(rows - requests.total, np.int64)])
  batch = Rollout(prompt_tokens=exp.train_prompts[row_ids],
                  prompt_mask=exp.train_prompt_mask[row_ids], tokens=fields["tokens"],
                  mask=fields["mask"], logp=fields["logp"], group=group, valid=valid)
  return batch, rewards, dict(extra, engine_rows=rows)


def extend_round(exp: Experiment, params, step: int, round_idx: int,
                 requests: planner.Requests):
  """Extra rows for prompts already drawn (a round rule's request), in a power-of-two row count
  at most R_max (`planner.engine_rows`); key and randomness from (seed,
  seeds.RL_EXTEND, step, round)."""
  rows = planner.engine_rows(requests.total, planner.batch_rows(exp.config))
  key = planner.round_key(exp, seeds.RL_EXTEND, step, round_idx)
  return _engine_round(exp, params, requests, key, max(rows, requests.total))


def _score(exp: Experiment, tokens, mask, example_ids) -> tuple[np.ndarray, dict]:
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


def _sample_iid(exp: Experiment, params, idx, key, per_prompt: int):
  """`per_prompt` samples of each prompt in `idx`, rows in `np.repeat(idx, per_prompt)` order,
  from the `config.sampling.engine` sampler (rl_jax/sampling/engines.py)."""
  return parallel.to_host(engines.from_config(exp.config)(
      params, exp.train_prompts[idx], exp.train_prompt_mask[idx], key, cfg=exp.model_cfg,
      strategy=exp.rollout_strategy, max_new_tokens=exp.max_new_tokens,
      eos_id=exp.tokenizer.eos_id, pad_id=exp.tokenizer.pad_id, num_samples=per_prompt))


def _iid_rows(exp: Experiment, params, idx, key, rng, step):
  del rng, step
  g = exp.config.rl.group_size
  out = _sample_iid(exp, params, idx, key, g)
  rewards, counts = _score(exp, out.tokens, out.mask, np.repeat(idx, g))
  fields = dict(tokens=out.tokens, mask=out.mask, logp=out.logp)
  return fields, rewards, {"rollout_tokens": int(np.asarray(out.mask).sum()), **counts}


def _latr_rows(exp: Experiment, params, idx, key, rng, step):
  """round(G·η) LATR tree leaves + the rest independent samples, per prompt (tree rows first)."""
  del rng
  rl = exp.config.rl
  g, b, t = rl.group_size, len(idx), exp.max_new_tokens
  n_kt = int(round(g * mix_ratio(rl.latr.mix_schedule, step)))
  parts, decoded, extra = [], 0, {"tree_rows": n_kt}
  if n_kt:
    tree = latr.latr_generate(params, exp.train_prompts[idx], exp.train_prompt_mask[idx],
                              jax.random.fold_in(key, 1), cfg=exp.model_cfg,
                              strategy=exp.rollout_strategy,
                              options=latr.LatrOptions.from_config(exp.config),
                              num_slots=n_kt, max_new_tokens=t, eos_id=exp.tokenizer.eos_id,
                              pad_id=exp.tokenizer.pad_id)
    tree = parallel.to_host(tree)
    parts.append(tree)
    decoded += int(tree.decode_tokens)
    extra.update(tree_forks=int(tree.num_forks), tree_pruned=int(tree.num_pruned),
                 tree_steps=int(tree.tree_steps))
  if g - n_kt:
    iid = _sample_iid(exp, params, idx, key, g - n_kt)
    parts.append(iid)
    decoded += int(np.asarray(iid.mask).sum())
  fields = {}
  for name in ("tokens", "mask", "logp"):
    blocks = [np.asarray(getattr(p, name)).reshape(b, -1, t) for p in parts]
    fields[name] = np.concatenate(blocks, axis=1).reshape(b * g, t)
  rewards, counts = _score(exp, fields["tokens"], fields["mask"], np.repeat(idx, g))
  extra.update(rollout_tokens=decoded, **counts)
  return fields, rewards, extra


def _eptree_rows(exp: Experiment, params, idx, key, rng, step):
  """EPTree leaves; G of each prompt's leaves are kept (one correct leaf when there is one)."""
  del step
  rl = exp.config.rl
  opts = eptree.EPTreeOptions.from_config(exp.config)
  out = eptree.eptree_rollout(params, exp.train_prompts[idx], exp.train_prompt_mask[idx], key,
                              cfg=exp.model_cfg, strategy=exp.rollout_strategy, options=opts,
                              max_new_tokens=exp.max_new_tokens, eos_id=exp.tokenizer.eos_id,
                              pad_id=exp.tokenizer.pad_id)
  out = parallel.to_host(out)
  all_rewards, counts = _score(exp, out.tokens, out.mask, np.repeat(idx, opts.leaves))
  keep = eptree.select_leaves(all_rewards[:, 0], opts.leaves, rl.group_size, rng)
  fields = dict(tokens=out.tokens[keep], mask=out.mask[keep], logp=out.logp[keep],
                tree=eptree.restrict(out.tree, keep))
  return fields, all_rewards[keep], {"rollout_tokens": out.decode_tokens,
                                     "tree_leaves": opts.leaves, **counts}


def _treepo_rows(exp: Experiment, params, idx, key, rng, step):
  """A TreePO tree of G leaves per prompt (rl_jax.sampling.treepo), recorded for the tree
  advantages."""
  del rng, step
  g = exp.config.rl.group_size
  out = treepo.treepo_rollout(params, exp.train_prompts[idx], exp.train_prompt_mask[idx], key,
                              cfg=exp.model_cfg, strategy=exp.rollout_strategy,
                              options=treepo.TreePOOptions.from_config(exp.config), group=g,
                              max_new_tokens=exp.max_new_tokens, eos_id=exp.tokenizer.eos_id,
                              pad_id=exp.tokenizer.pad_id)
  rewards, counts = _score(exp, out.tokens, out.mask, np.repeat(idx, g))
  fields = dict(tokens=out.tokens, mask=out.mask, logp=out.logp, tree=out.tree)
  return fields, rewards, {"rollout_tokens": out.decode_tokens,
                           "tree_filled_rows": int(out.filled.sum()), **counts}


def _echo_rows(exp: Experiment, params, idx, key, rng, step):
  """An ECHO tree of G leaves per prompt (rl_jax.sampling.echo), recorded for the tree
  advantages."""
  del rng, step
  out = parallel.to_host(echo.echo_generate(
      params, exp.train_prompts[idx], exp.train_prompt_mask[idx], key, cfg=exp.model_cfg,
      strategy=exp.rollout_strategy, options=echo.EchoOptions.from_config(exp.config),
      num_slots=exp.config.rl.group_size, max_new_tokens=exp.max_new_tokens,
      eos_id=exp.tokenizer.eos_id, pad_id=exp.tokenizer.pad_id))
  g = exp.config.rl.group_size
  rewards, counts = _score(exp, out.tokens, out.mask, np.repeat(idx, g))
  fields = dict(tokens=np.asarray(out.tokens), mask=np.asarray(out.mask),
                logp=np.asarray(out.logp), tree=echo.to_tree(out))
  return fields, rewards, {"rollout_tokens": int(out.decode_tokens),
                           "tree_forks": int(out.num_children),
                           "tree_branch_events": int(out.num_branch_events),
                           "tree_pruned": int(out.num_pruned), **counts}


def _arrol_rows(exp: Experiment, params, idx, key, rng, step):
  """ARRoL (rl_jax/sampling/arrol.py): N0 rows per prompt, pruned to G at the checkpoint by the
  run's quality head, which then trains on the survivors' outcomes (value/quality_head.py). The
  batch holds the G survivors only: pruned rows never reach the loss."""
  del rng, step
  from rl_jax.value import quality_head  # pylint: disable=import-outside-toplevel
  run = quality_head.ArrolRun.of(exp)
  g = exp.config.rl.group_size
  out = parallel.to_host(arrol.arrol_generate(
      params, run.head.params, exp.train_prompts[idx], exp.train_prompt_mask[idx], key,
      cfg=exp.model_cfg, strategy=exp.rollout_strategy, max_new_tokens=exp.max_new_tokens,
      eos_id=exp.tokenizer.eos_id, pad_id=exp.tokenizer.pad_id, options=run.options))
  s = out.samples
  rewards, counts = _score(exp, s.tokens, s.mask, np.repeat(idx, g))
  head_metrics = run.observe(out.features, rewards)
  fields = dict(tokens=s.tokens, mask=s.mask, logp=s.logp)
  pruned = len(idx) * (run.options.oversample - g)
  return fields, rewards, {
      "rollout_tokens": int(np.asarray(s.mask).sum()) + int(out.pruned_tokens),
      "arrol/rows_pruned": pruned, "arrol/rows_stopped": int(out.pruned_live),
      "arrol/tokens_saved": int(out.saved_slot_steps),
      "arrol/pruned_tokens": int(out.pruned_tokens), "arrol/slot_steps": int(out.slot_steps),
      **head_metrics, **counts}


def collect(draw: Callable, config, **kwargs):
  """`rounds.collect` (kept here for callers of the rollouts module)."""
  return rounds.collect(draw, config, **kwargs)


def rollout(exp: Experiment, params, step: int, stream=None, history=None, carry=None):
  """The RL batch of `step`: (Rollout, rewards [R, K] float32, host metrics); `stream` as in
  `generation_round`; `history` (a `value.history.RolloutHistory`) receives every round's
  attempts and successes and feeds the allocator and the round rules; `carry`: APRIL's carried
  groups (`train.april.Carry`, updated in place), or None."""
  batch, shaped, metrics = rounds.collect(
      lambda k: generation_round(exp, params, step, k, stream, history, carry), exp.config,
      extend=lambda k, req: extend_round(exp, params, step, k, req), history=history, step=step,
      context={"exp": exp, "params": params})
  metrics.update(allocate.batch_metrics(batch, shaped, exp.config))
  return batch, shaped, metrics
