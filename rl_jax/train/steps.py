"""Pure train steps: `step(state, ..., batch, *, hyper) -> (state, metrics)`.

In: a TrainState (master weights and optimizer state, `config.train.master_dtype`), one batch
(`SFTBatch`, or a `Rollout` and its rewards) and static settings (`model_cfg`; `hyper.RLHyper`,
a jit static argument). Out: the new state and scalar metrics. Invariants: a step whose loss or
gradient norm is not finite is not applied (`finite_or_skip`, metric `nonfinite`); log-probs,
losses and normalizers are float32; the model runs on one `model_cfg.param_dtype` copy of the
master weights per update and gradients accumulate in the master dtype (float32 throughout: no
casts). `rl_step`: rewards -> advantages (`rl_inputs`), then `num_iterations` updates, each over
`num_minibatches` micro-batches with the normalizers of the whole batch (docs/algorithms.md §2.6).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from rl_jax import models
from rl_jax.rl import logprobs, losses
from rl_jax.train import rl_inputs
from rl_jax.train.hyper import RLHyper
from rl_jax.train_state import TrainState
from rl_jax.types import Rollout, SFTBatch, check_rollout, check_sft_batch


def sft_step(state: TrainState, batch: SFTBatch, *,
             model_cfg: models.ModelConfig) -> tuple[TrainState, dict]:
  """One cross-entropy step on target completions (token-mean over the batch).

  The model runs on `models.cast_params(model_cfg, state.params)`; the update is applied to the
  master weights in `state.params` (see the module docstring).
  """
  check_sft_batch(batch)

  def loss_fn(params):
    logp = logprobs.completion_logprobs(model_cfg, params, batch.prompt_tokens, batch.prompt_mask,
                                        batch.tokens, batch.mask)
    m = batch.mask.astype(jnp.float32)
    return -jnp.sum(logp * m) / jnp.maximum(jnp.sum(m), 1.0)

  loss, grads = jax.value_and_grad(loss_fn)(models.cast_params(model_cfg, state.params))
  grads = _like(grads, state.params)
  metrics = {"loss": loss, "grad_norm": _global_norm(grads)}
  return finite_or_skip(state, state.apply_gradients(grads), metrics)


def finite_or_skip(old: TrainState, new: TrainState, metrics: dict) -> tuple[TrainState, dict]:
  """`new` if the step's `loss` and `grad_norm` are finite, else `old` unchanged (params,
  optimizer state and step count): a non-finite step is not applied.

  Adds `metrics["nonfinite"]` (1.0 for a skipped step, else 0.0), which the loop counts.
  """
  ok = jnp.isfinite(metrics["loss"]) & jnp.isfinite(metrics["grad_norm"])
  state = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, old)
  return state, dict(metrics, nonfinite=1.0 - ok.astype(jnp.float32))


def rl_step(state: TrainState, ref_params: Any, rollout: Rollout, rewards: jax.Array, *,
            model_cfg: models.ModelConfig, hyper: RLHyper) -> tuple[TrainState, dict]:
  """`num_iterations` policy-gradient updates on one rollout batch.

  Args:
    state: policy train state (master weights; the model runs on their `model_cfg.param_dtype`
      copy).
    ref_params: frozen reference policy (used only when hyper.kl_coef > 0), in any float dtype
      (cast to `model_cfg.param_dtype`).
    rollout: R = B * G rows, grouped contiguously (row r belongs to prompt r // G), or with
      `hyper.max_group_size` R_max ragged rows grouped by `rollout.group`; rows with
      valid=False get loss weight 0 and leave every normalizer.
    rewards: [R] or [R, K] float32 rewards (K reward components).

  Returns:
    The new state (`step` advanced by num_iterations) and metrics; loss terms and gradient norms
    are means over the iterations. If the loss or gradient norm is not finite, the input state
    unchanged and `nonfinite` = 1 (`finite_or_skip`).
  """
  check_rollout(rollout, rewards)
  old_state = state
  m_count = hyper.num_minibatches
  lp = functools.partial(logprobs.completion_logprobs, model_cfg,
                         temperature=hyper.temperature, group_size=hyper.prompt_group)
  seqs = (rollout.prompt_tokens, rollout.prompt_mask, rollout.tokens, rollout.mask)
  mask = rollout.mask & rollout.valid[:, None]
  extra = {}
  old_logp = rollout.logp
  if hyper.tis_cap:
    # The trainer's log-probs under the parameters that generated the batch are the PPO
    # behaviour policy; the sampler's log-probs enter only through the TIS weight.
    old_logp = _no_grad_logprobs(lp, models.cast_params(model_cfg, state.params), seqs, m_count,
                                 hyper.prompt_group)
    extra["tis_weight"] = rl_inputs.tis_weights(old_logp, rollout.logp, mask, hyper.tis_cap)
  ref_logp = (_no_grad_logprobs(lp, models.cast_params(model_cfg, ref_params), seqs, m_count,
                                hyper.prompt_group) if hyper.kl_coef else None)
  token_kl = None
  if hyper.kl_in_reward and hyper.kl_coef:
    token_kl = jnp.where(mask, old_logp - ref_logp, 0.0)
  elif hyper.kl_coef:
    extra["ref_logp"] = ref_logp
  adv, weight, scalar_r = rl_inputs.advantages(rewards, rollout, hyper, token_kl)
  loss_mask = mask & (weight > 0)[:, None]
  good = loss_mask & (rl_inputs.as_components(rewards)[:, 0] >= 1.0)[:, None]
  norms = rl_inputs.normalizers(loss_mask, good)
  rows = dict(prompt_tokens=rollout.prompt_tokens, prompt_mask=rollout.prompt_mask,
              tokens=rollout.tokens, mask=rollout.mask, loss_mask=loss_mask, good=good,
              old_logp=old_logp, adv=adv, **extra)
  if hyper.loss_behav_logp:
    rows["behav_logp"] = rollout.logp
  micro = rl_inputs.split_rows(rows, m_count, hyper.prompt_group)
  update = functools.partial(_update, micro=micro, norms=norms, model_cfg=model_cfg,
                             hyper=hyper)
  state, per_iter = jax.lax.scan(update, state, None, length=hyper.num_iterations)
  metrics = {k: jnp.mean(v) for k, v in per_iter.items()}
  # A non-finite loss or gradient in any iteration makes its mean non-finite: the whole step
  # (every iteration) is then not applied.
  state, metrics = finite_or_skip(old_state, state, metrics)
  metrics.update(rl_inputs.batch_metrics(scalar_r, rollout, adv, weight, loss_mask,
                                         hyper.group_size, hyper.num_groups))
  if token_kl is not None:
    metrics["kl"] = jnp.sum(token_kl) / jnp.maximum(jnp.sum(mask), 1)
  if hyper.tis_cap:
    tw = extra["tis_weight"]
    metrics["tis_weight_mean"] = jnp.sum(tw * loss_mask) / jnp.maximum(jnp.sum(loss_mask), 1)
  return state, metrics


def _no_grad_logprobs(lp, params, seqs, num_micro: int, group: int) -> jax.Array:
  """Log-probs [R, T] of the completions, computed one micro-batch at a time."""
  micro = rl_inputs.split_rows(seqs, num_micro, group)
  out = jax.lax.map(lambda mb: lp(params, *mb), micro)
  return jax.lax.stop_gradient(rl_inputs.merge_rows(out, group))


def _update(state: TrainState, _, *, micro: dict, norms: dict, model_cfg, hyper: RLHyper):
  """One optimizer update on the gradient accumulated (in the master dtype) over the
  micro-batches; the model runs on one `param_dtype` copy of the master weights."""
  grad_fn = jax.value_and_grad(micro_loss, has_aux=True)
  params = models.cast_params(model_cfg, state.params)

  def accumulate(grads, mb):
    (loss, aux), g = grad_fn(params, mb, norms, model_cfg=model_cfg, hyper=hyper)
    return jax.tree_util.tree_map(jnp.add, grads, _like(g, grads)), dict(aux, loss=loss)

  zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params)
  grads, aux = jax.lax.scan(accumulate, zeros, micro)
  # Every term is normalized by whole-batch counts, so the batch's value is the sum.
  metrics = {k: jnp.sum(v) for k, v in aux.items()}
  metrics["grad_norm"] = _global_norm(grads)
  return state.apply_gradients(grads), metrics


def micro_loss(params, mb: dict, norms: dict, *, model_cfg, hyper: RLHyper):
  """This micro-batch's share of the batch loss (normalized by whole-batch counts)."""
  logp = logprobs.completion_logprobs(model_cfg, params, mb["prompt_tokens"], mb["prompt_mask"],
                                      mb["tokens"], mb["mask"], temperature=hyper.temperature,
                                      group_size=hyper.prompt_group)
  m = mb["loss_mask"]
  options = dict(hyper.loss_options)
  if "behav_logp" in mb:
    options["behav_logp"] = mb["behav_logp"]
  pg, pg_metrics = losses.policy_loss(logp, mb["old_logp"], mb["adv"], m, kind=hyper.loss,
                                      clip_low=hyper.clip_low, clip_high=hyper.clip_high,
                                      clip_ratio_c=hyper.clip_ratio_c, **options)
  if "tis_weight" in mb:
    pg = pg * mb["tis_weight"]
  mode = losses.FORCED_AGGREGATION.get(hyper.loss, hyper.aggregation)
  agg = functools.partial(losses.aggregate, mode=mode, num_tokens=norms["num_tokens"],
                          num_seqs=norms["num_seqs"])
  # Masked means over this micro-batch, weighted by its share of the batch's loss tokens.
  share = jnp.sum(m) / jnp.maximum(norms["num_tokens"], 1)
  aux = {k: v * share for k, v in pg_metrics.items()}
  aux["pg_loss"] = agg(pg, m)
  total = pg
  if "ref_logp" in mb:
    kl = losses.kl_penalty(logp, mb["ref_logp"], hyper.kl_kind)
    total = total + hyper.kl_coef * kl
    aux["kl"] = losses.aggregate(kl, m, "token-mean", num_tokens=norms["num_tokens"])
  loss = agg(total, m)
  if hyper.sft_coef:
    aux["sft_loss"] = losses.aggregate(-logp, mb["good"], "token-mean",
                                       num_tokens=norms["num_good"])
    loss = loss + hyper.sft_coef * aux["sft_loss"]
  return loss, aux


def _like(tree, target):
  """`tree` with each leaf in the dtype of `target`'s leaf (no op where they already agree)."""
  return jax.tree_util.tree_map(lambda x, t: x if x.dtype == t.dtype else x.astype(t.dtype),
                                tree, target)


def _global_norm(tree) -> jax.Array:
  return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32)))
                      for x in jax.tree_util.tree_leaves(tree)))
