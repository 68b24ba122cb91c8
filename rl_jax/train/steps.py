"""Pure train steps: `step(state, ..., batch, *, hyper) -> (state, metrics)`.

They are jitted once in the loop with explicit shardings and donation; the hyper-parameters
that change the program are frozen dataclasses passed as static arguments.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from rl_jax import models
from rl_jax.rl import advantages, logprobs, losses
from rl_jax.train.state import TrainState
from rl_jax.types import Rollout, SFTBatch


def sft_step(state: TrainState, batch: SFTBatch, *,
             model_cfg: models.ModelConfig) -> tuple[TrainState, dict]:
  """One cross-entropy step on target completions (token-mean over the batch)."""

  def loss_fn(params):
    logp = logprobs.completion_logprobs(model_cfg, params, batch.prompt_tokens, batch.prompt_mask,
                                        batch.tokens, batch.mask)
    m = batch.mask.astype(jnp.float32)
    return -jnp.sum(logp * m) / jnp.maximum(jnp.sum(m), 1.0)

  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  metrics = {"loss": loss, "grad_norm": _global_norm(grads)}
  return state.apply_gradients(grads), metrics


@dataclasses.dataclass(frozen=True)
class RLHyper:
  """Static RL hyper-parameters of the update (hashable; built from `config.rl`).

  Attributes:
    group_size: G, rollouts per prompt.
    advantage: registered estimator name (`rl_jax.rl.advantages`).
    advantage_options: sorted (key, value) pairs passed to the estimator.
    loss: registered policy-loss kind (`rl_jax.rl.losses`).
    clip_low, clip_high, clip_ratio_c: PPO clip range and dual-clip constant.
    kl_coef: beta of the KL-to-reference term in the loss (0 = off, no reference pass).
    kl_kind: KL estimator ('k1', 'k2', 'k3', 'abs').
    aggregation: loss aggregation mode.
    temperature: the rollout temperature (the trainer's log-probs use the same scaling).
    sft_coef: weight of an extra cross-entropy term on the *correct* samples
      (reward >= 1); 0 = plain policy gradient.
  """

  group_size: int
  advantage: str = "grpo"
  advantage_options: tuple = ()
  loss: str = "ppo"
  clip_low: float = 0.2
  clip_high: float = 0.2
  clip_ratio_c: float = 3.0
  kl_coef: float = 0.0
  kl_kind: str = "k3"
  aggregation: str = "token-mean"
  temperature: float = 1.0
  sft_coef: float = 0.0


def rl_step(state: TrainState, ref_params: Any, rollout: Rollout, rewards: jax.Array, *,
            model_cfg: models.ModelConfig, hyper: RLHyper) -> tuple[TrainState, dict]:
  """One policy-gradient update on a rollout batch.

  Args:
    state: policy train state.
    ref_params: frozen reference policy (used only when hyper.kl_coef > 0).
    rollout: R = B * G rows, grouped contiguously (row r belongs to prompt r // G).
    rewards: [R] float32 scalar rewards.
  """
  g = hyper.group_size
  r_bg = rewards.reshape(-1, g)
  valid_bg = rollout.valid.reshape(-1, g)
  adv, weight = advantages.get(hyper.advantage)(r_bg, valid_bg, **dict(hyper.advantage_options))
  adv, weight = adv.reshape(-1), weight.reshape(-1)
  mask = rollout.mask & (weight > 0)[:, None]
  lp_args = (rollout.prompt_tokens, rollout.prompt_mask, rollout.tokens, rollout.mask)
  ref_logp = None
  if hyper.kl_coef:
    ref_logp = jax.lax.stop_gradient(logprobs.completion_logprobs(
        model_cfg, ref_params, *lp_args, temperature=hyper.temperature))

  def loss_fn(params):
    logp = logprobs.completion_logprobs(model_cfg, params, *lp_args,
                                        temperature=hyper.temperature)
    pg, pg_metrics = losses.policy_loss(logp, rollout.logp, adv, mask, kind=hyper.loss,
                                        clip_low=hyper.clip_low, clip_high=hyper.clip_high,
                                        clip_ratio_c=hyper.clip_ratio_c)
    mode = losses.FORCED_AGGREGATION.get(hyper.loss, hyper.aggregation)
    total_tok = pg
    aux = dict(pg_metrics, pg_loss=losses.aggregate(pg, mask, mode))
    if hyper.kl_coef:
      kl = losses.kl_penalty(logp, ref_logp, hyper.kl_kind)
      total_tok = total_tok + hyper.kl_coef * kl
      aux["kl"] = losses.aggregate(kl, mask, "token-mean")
    loss = losses.aggregate(total_tok, mask, mode)
    if hyper.sft_coef:
      good = mask & (rewards >= 1.0)[:, None]
      aux["sft_loss"] = losses.aggregate(-logp, good, "token-mean")
      loss = loss + hyper.sft_coef * aux["sft_loss"]
    return loss, aux

  (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  m = rollout.mask.astype(jnp.float32)
  metrics = dict(aux, loss=loss, grad_norm=_global_norm(grads),
                 reward_mean=jnp.sum(rewards * rollout.valid) / jnp.maximum(rollout.valid.sum(), 1),
                 adv_abs_mean=jnp.sum(jnp.abs(adv) * weight) / jnp.maximum(weight.sum(), 1.0),
                 completion_len=jnp.sum(m) / m.shape[0],
                 informative_frac=jnp.mean(jnp.any(jnp.abs(adv.reshape(-1, g)) > 0, axis=-1)))
  return state.apply_gradients(grads), metrics


def _global_norm(tree) -> jax.Array:
  return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32)))
                      for x in jax.tree_util.tree_leaves(tree)))
