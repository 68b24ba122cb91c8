"""Host-side RL rollouts: sample groups, score them, DAPO dynamic sampling and overlong shaping.

One step's batch always has `prompts_per_step` groups of `group_size` rows (static shapes):

* Rewards are the `config.rl.rewards` components [R, K] (`rl_jax.rewards.REWARDS`).
* Overlong shaping (`overlong_buffer` L_cache > 0; ALGORITHMS.md §2.2): the soft punishment
  `losses.dapo_overlong_penalty(L, L_max=sampling.max_new_tokens, L_cache)` is added to the first
  reward component (the correctness reward), L = completion tokens including EOS.
* Dynamic sampling (`dynamic_sampling=True`): groups whose rewards are all equal carry no
  gradient and are dropped; further generation rounds of `prompts_per_step` fresh prompts are
  drawn until that many informative groups exist or `max_gen_rounds` rounds have run. Missing
  groups are filled with dropped groups marked valid=False (loss weight 0).

Round 0 draws exactly what a run without dynamic sampling draws, so the option changes nothing
for steps whose first round is fully informative. Randomness depends only on (seed, step, round).
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np

from rl_jax import rewards as rewards_lib
from rl_jax import sampling
from rl_jax.data.batching import decode_completions
from rl_jax.rl import losses
from rl_jax.train import rl_inputs
from rl_jax.train.experiment import Experiment
from rl_jax.types import Rollout

# Random-stream tags (phases.PHASE_TAGS): round 0 uses the RL phase's stream, rounds >= 1 their own.
RL_TAG, EXTRA_ROUND_TAG = 2, 5


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


def generation_round(exp: Experiment, params, step: int, round_idx: int):
  """Samples G completions for each of B fresh prompts; returns (rollout, raw rewards [R, K])."""
  rl = exp.config.rl
  if round_idx == 0:
    rng = exp.host_rng(RL_TAG, step)
    key = jax.random.fold_in(jax.random.fold_in(exp.root_key(), RL_TAG), step)
  else:
    rng = exp.host_rng(EXTRA_ROUND_TAG, step, round_idx)
    key = jax.random.fold_in(jax.random.fold_in(
        jax.random.fold_in(exp.root_key(), EXTRA_ROUND_TAG), step), round_idx)
  idx = rng.choice(len(exp.train_prompts), rl.prompts_per_step, replace=False)
  rows = np.repeat(idx, rl.group_size)
  out = sampling.generate(params, exp.train_prompts[rows], exp.train_prompt_mask[rows], key,
                          cfg=exp.model_cfg, strategy=exp.rollout_strategy,
                          max_new_tokens=exp.max_new_tokens, eos_id=exp.tokenizer.eos_id,
                          pad_id=exp.tokenizer.pad_id)
  texts = decode_completions(exp.tokenizer, out.tokens, out.mask)
  rewards = rewards_lib.score_components(exp.task, texts, [exp.task.train[i] for i in rows],
                                         tuple(rl.rewards))
  batch = Rollout(prompt_tokens=exp.train_prompts[rows], prompt_mask=exp.train_prompt_mask[rows],
                  tokens=out.tokens, mask=out.mask, logp=out.logp,
                  group=np.repeat(np.arange(len(idx)), rl.group_size).astype(np.int32),
                  valid=np.ones(len(rows), bool))
  return batch, rewards


def collect(draw: Callable[[int], tuple[Rollout, np.ndarray]], config):
  """Runs generation rounds `draw(round) -> (rollout, raw rewards)` and builds the batch.

  Returns (rollout, shaped rewards [R, K], host metrics).
  """
  rl = config.rl
  multi = rl.advantage in rl_inputs.MULTI_REWARD
  rounds, tokens, raw = [], 0, []
  for k in range(rl.max_gen_rounds if rl.dynamic_sampling else 1):
    batch, r = draw(k)
    lengths = np.asarray(batch.mask).sum(-1)
    tokens += int(lengths.sum())
    shaped = overlong_shaping(r, lengths, config.sampling.max_new_tokens, rl.overlong_buffer,
                              rl.overlong_penalty_factor)
    inf = informative_groups(shaped, np.asarray(batch.valid), rl.group_size,
                             tuple(rl.reward_weights), multi)
    rounds.append((batch, shaped, inf))
    raw.append(r)
    if sum(int(x.sum()) for _, _, x in rounds) >= rl.prompts_per_step:
      break
  metrics = {"gen_rounds": len(rounds), "rollout_tokens": tokens}
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
  for name, col in zip(rl.rewards, kept_raw.T):
    metrics[f"reward_{name}"] = float(col[valid].mean()) if valid.any() else 0.0
  return batch, shaped, metrics


def rollout(exp: Experiment, params, step: int):
  """The RL batch of `step`: (Rollout, rewards [R, K] float32, host metrics)."""
  return collect(lambda k: generation_round(exp, params, step, k), exp.config)
