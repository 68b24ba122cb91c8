"""Host-side RL rollouts: sample groups, score them, DAPO dynamic sampling and overlong shaping.

One step's batch always has `prompts_per_step` groups of `group_size` rows (static shapes):

* Rewards are the `config.rl.rewards` components [R, K] (`rl_jax.rewards.REWARDS`).
* Overlong shaping (`overlong_buffer` L_cache > 0; ALGORITHMS.md §2.2): the soft punishment
  `losses.dapo_overlong_penalty(L, L_max=sampling.max_new_tokens, L_cache)` is added to the first
  reward component (the correctness reward), L = completion tokens including EOS.
* Rollout mode (`rollout`): 'iid' samples G independent rows per prompt; 'latr' takes
  round(G·η(step)) rows from LATR trees (`rl_jax.sampling.latr`, options `config.rl.latr`, η the
  piecewise-constant `mix_schedule`) and the rest independently; 'eptree' grows EPTree trees
  (`rl_jax.sampling.eptree`, options `config.rl.eptree`) and keeps G of their leaves per prompt,
  recording the tree for the tree advantages; 'treepo' grows a segment-wise TreePO tree of G
  leaves per prompt (`rl_jax.sampling.treepo`, options `config.rl.treepo`), tree recorded. `rollout_tokens` counts the tokens decoded to
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
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np

from rl_jax import parallel
from rl_jax import rewards as rewards_lib
from rl_jax.data.batching import decode_completions
from rl_jax.rl import losses
from rl_jax.sampling import engines, eptree, latr, treepo
from rl_jax.train import rl_inputs
from rl_jax.train.experiment import Experiment
from rl_jax.types import Rollout

# Random-stream tags (phases.PHASE_TAGS): round 0 uses the RL phase's stream, rounds >= 1 their own.
RL_TAG, EXTRA_ROUND_TAG = 2, 5
ROLLOUTS = ("iid", "latr", "eptree", "treepo")
# Host counts that `collect` sums over generation rounds (rl_jax.rewards.contained).
_COUNTS = ("reward/errors", "reward/timeouts")


def latr_options(config) -> latr.LatrOptions:
  """`config.rl.latr` -> LatrOptions (thresholds < 0 disable a pruning criterion)."""
  c = config.rl.latr
  off = lambda x: None if x < 0 else float(x)
  return latr.LatrOptions(
      tau_abs=c.tau_abs, tau_rel=c.tau_rel, windows=tuple(c.windows),
      ed_threshold=off(c.ed_threshold), sm_threshold=off(c.sm_threshold),
      rl_threshold=off(c.rl_threshold), thres_init=c.thres_init, thres_decay=c.thres_decay,
      force_return_step=c.force_return_step, fill=c.fill)


def eptree_options(config) -> eptree.EPTreeOptions:
  c = config.rl.eptree
  return eptree.EPTreeOptions(num_chains=c.num_chains, forks_per_round=c.forks_per_round,
                              rounds=c.rounds, branches=c.branches,
                              min_tokens_left=c.min_tokens_left,
                              min_prefix_fraction=c.min_prefix_fraction)


def treepo_options(config) -> treepo.TreePOOptions:
  c = config.rl.treepo
  return treepo.TreePOOptions(segment_len=c.segment_len, first_width=c.first_width,
                              branches=c.branches)


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
    raise ValueError(f"config.rl.overlong_buffer must be in [0, sampling.max_new_tokens="
                     f"{config.sampling.max_new_tokens}], got {rl.overlong_buffer}")
  if rl.rollout not in ROLLOUTS:
    raise ValueError(f"config.rl.rollout={rl.rollout!r}; expected one of {ROLLOUTS}")
  if rl.rollout == "latr":
    latr_options(config)
    steps = [s for s, _ in rl.latr.mix_schedule]
    if steps != sorted(steps) or any(not 0 <= e <= 1 for _, e in rl.latr.mix_schedule):
      raise ValueError(f"config.rl.latr.mix_schedule must be (step, eta) pairs sorted by step "
                       f"with eta in [0, 1], got {rl.latr.mix_schedule}")
  if rl.rollout == "eptree":
    leaves = eptree_options(config).leaves
    if rl.group_size > leaves:
      raise ValueError(f"config.rl.group_size={rl.group_size} exceeds the {leaves} leaves per "
                       f"prompt of config.rl.eptree (num_chains·(1 + rounds·forks_per_round·"
                       f"branches))")
  if rl.rollout in ("eptree", "treepo") and rl.dynamic_sampling:
    raise ValueError(f"config.rl.dynamic_sampling is not supported with rollout="
                     f"{rl.rollout!r} (groups carry a tree); use rollout='iid' or 'latr'")
  if rl.rollout == "treepo":
    treepo_options(config)


def overlong_shaping(rewards: np.ndarray, lengths: np.ndarray, max_len: int, buffer: int,
                     factor: float = 1.0) -> np.ndarray:
  """rewards [R, K] with the DAPO soft overlong penalty of `lengths` [R] added to column 0."""
  out = np.array(rewards, np.float32, copy=True)
  if buffer > 0:
    out[:, 0] += np.asarray(losses.dapo_overlong_penalty(lengths, max_len, buffer, factor))
  return out


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


def select_groups(informative: list[np.ndarray], num_groups: int,
                  group_size: int) -> tuple[np.ndarray, np.ndarray, int]:
  """Chooses the step's B groups from the generation rounds.

  Args:
    informative: bool [B] per round.
    num_groups: B, groups in the batch.
    group_size: G.

  Returns:
    rows int [B*G] into the rounds' rows concatenated, keep bool [B*G], and the number of
    informative groups kept: the informative groups in round order, then (if fewer than B)
    dropped groups, which get keep=False.
  """
  picks = [(i, b) for i, inf in enumerate(informative) for b in np.flatnonzero(inf)]
  fillers = [(i, b) for i, inf in enumerate(informative) for b in np.flatnonzero(~inf)]
  kept = min(len(picks), num_groups)
  chosen = picks[:kept] + fillers[:num_groups - kept]
  per_round = len(informative[0]) * group_size
  rows = np.concatenate([i * per_round + b * group_size + np.arange(group_size)
                         for i, b in chosen])
  return rows, np.repeat(np.arange(num_groups) < kept, group_size), kept


def generation_round(exp: Experiment, params, step: int, round_idx: int, stream=None):
  """Samples G completions for each of B fresh prompts; returns (rollout, raw rewards [R, K]).

  The prompts are the host RNG's draw of (seed, step, round), or the next batch of `stream`
  (a `data.grain_source.ProblemStream`; config.data.source='grain').
  """
  rl = exp.config.rl
  if round_idx == 0:
    rng = exp.host_rng(RL_TAG, step)
    key = jax.random.fold_in(jax.random.fold_in(exp.root_key(), RL_TAG), step)
  else:
    rng = exp.host_rng(EXTRA_ROUND_TAG, step, round_idx)
    key = jax.random.fold_in(jax.random.fold_in(
        jax.random.fold_in(exp.root_key(), EXTRA_ROUND_TAG), step), round_idx)
  idx = (rng.choice(len(exp.train_prompts), rl.prompts_per_step, replace=False)
         if stream is None else stream.next_indices())
  rows = np.repeat(idx, rl.group_size)
  sample = {"iid": _iid_rows, "latr": _latr_rows, "eptree": _eptree_rows,
            "treepo": _treepo_rows}[rl.rollout]
  out, rewards, extra = sample(exp, params, idx, key, rng, step)
  batch = Rollout(prompt_tokens=exp.train_prompts[rows], prompt_mask=exp.train_prompt_mask[rows],
                  tokens=np.asarray(out["tokens"]), mask=np.asarray(out["mask"]),
                  logp=np.asarray(out["logp"]),
                  group=np.repeat(np.arange(len(idx)), rl.group_size).astype(np.int32),
                  valid=np.ones(len(rows), bool), tree=out.get("tree"))
  return batch, rewards, extra


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
                              strategy=exp.rollout_strategy, options=latr_options(exp.config),
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
  opts = eptree_options(exp.config)
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
                              options=treepo_options(exp.config), group=g,
                              max_new_tokens=exp.max_new_tokens, eos_id=exp.tokenizer.eos_id,
                              pad_id=exp.tokenizer.pad_id)
  rewards, counts = _score(exp, out.tokens, out.mask, np.repeat(idx, g))
  fields = dict(tokens=out.tokens, mask=out.mask, logp=out.logp, tree=out.tree)
  return fields, rewards, {"rollout_tokens": out.decode_tokens,
                           "tree_filled_rows": int(out.filled.sum()), **counts}


def collect(draw: Callable[[int], tuple[Rollout, np.ndarray]], config):
  """Runs generation rounds `draw(round) -> (rollout, raw rewards[, host metrics])`; builds the batch.

  Returns (rollout, shaped rewards [R, K], host metrics).
  """
  rl = config.rl
  multi = rl.advantage in rl_inputs.MULTI_REWARD
  rounds, tokens, raw, extra = [], 0, [], {}
  counts = dict.fromkeys(_COUNTS, 0)
  for k in range(rl.max_gen_rounds if rl.dynamic_sampling else 1):
    out = draw(k)
    batch, r, extra = out if len(out) == 3 else (*out, {})
    for name in _COUNTS:  # Summed over the generation rounds.
      counts[name] += int(extra.get(name, 0))
    lengths = np.asarray(batch.mask).sum(-1)
    tokens += int(extra.get("rollout_tokens", lengths.sum()))
    shaped = overlong_shaping(r, lengths, config.sampling.max_new_tokens, rl.overlong_buffer,
                              rl.overlong_penalty_factor)
    inf = informative_groups(shaped, np.asarray(batch.valid), rl.group_size,
                             tuple(rl.reward_weights), multi)
    rounds.append((batch, shaped, inf))
    raw.append(r)
    if sum(int(x.sum()) for _, _, x in rounds) >= rl.prompts_per_step:
      break
  metrics = {k: v for k, v in extra.items() if k != "rollout_tokens"}
  metrics.update(gen_rounds=len(rounds), rollout_tokens=tokens)
  if any(name in extra for name in _COUNTS):
    metrics.update(counts)
  if rl.dynamic_sampling:
    rows, keep, metrics["kept_groups"] = select_groups([inf for _, _, inf in rounds],
                                                       rl.prompts_per_step, rl.group_size)
    cat = jax.tree_util.tree_map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]),
                                 *[b for b, _, _ in rounds])
    batch = jax.tree_util.tree_map(lambda x: x[rows], cat)
    batch = batch.replace(valid=batch.valid & keep, group=np.repeat(
        np.arange(rl.prompts_per_step), rl.group_size).astype(np.int32))
    shaped = np.concatenate([s for _, s, _ in rounds])[rows]
    kept_raw = np.concatenate(raw)[rows]
  else:
    batch, shaped, _ = rounds[0]
    metrics["kept_groups"] = rl.prompts_per_step
    kept_raw = raw[0]
  valid = np.asarray(batch.valid)
  metrics["batch_tokens"] = int(np.asarray(batch.mask).sum())
  for name, col in zip(rl.rewards, kept_raw.T):
    metrics[f"reward_{name}"] = float(col[valid].mean()) if valid.any() else 0.0
  return batch, shaped, metrics


def rollout(exp: Experiment, params, step: int, stream=None):
  """The RL batch of `step`: (Rollout, rewards [R, K] float32, host metrics); `stream` as in
  `generation_round`."""
  return collect(lambda k: generation_round(exp, params, step, k, stream), exp.config)
