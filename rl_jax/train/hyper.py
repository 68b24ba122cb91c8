"""`RLHyper`, the static settings of `steps.rl_step`, and its builder `hyper_from_config`.

In: a config that passed `config_check.check` (ranges are checked there, once). Out: a frozen,
hashable RLHyper (a jit static argument: equal configs give equal hypers, one compiled step).
Method-specific fields come from the registry entries (`ADVANTAGES.declared(name,
'config_options')`, `losses.LOSS_OPTIONS`); no method is named here.
"""

from __future__ import annotations

import dataclasses

from rl_jax.rl import advantages, losses
from rl_jax.rollout import april
from rl_jax.rollout import requests as requests_lib
from rl_jax.value.prm import process


@dataclasses.dataclass(frozen=True)
class RLHyper:
  """Static RL hyper-parameters of the update (hashable; built from `config.rl`).

  Attributes:
    group_size: rows per prompt. For `mc_grpo` this is G+1 (the pivot row included): MC-GRPO
      with G=2 means group_size=3.
    advantage: registered estimator name (`rl_jax.rl.advantages`).
    advantage_options: sorted (key, value) pairs passed to the estimator.
    loss: registered policy-loss kind (`rl_jax.rl.losses`).
    loss_options: sorted (key, value) keyword options passed to the loss (`losses.LOSS_OPTIONS`).
    loss_behav_logp: the loss also gets `behav_logp=` the rollout's log-probs (`Rollout.logp`,
      the sampler's: the policy that generated each token, an earlier one for APRIL's carried
      rows), beside the PPO ratio's `old_logp`.
    clip_low, clip_high, clip_ratio_c: PPO clip range and dual-clip constant.
    kl_coef: beta of the KL to the reference policy (0 = off, no reference pass).
    kl_kind: KL estimator of the loss term ('k1', 'k2', 'k3', 'abs').
    kl_in_reward: put the KL in the reward instead of the loss (always k1; see
      `rl_inputs.advantages`).
    aggregation: loss aggregation mode.
    temperature: the rollout temperature (the trainer's log-probs use the same scaling).
    sft_coef: weight of an extra cross-entropy term on the *correct* samples (first reward
      component >= 1); 0 = plain policy gradient.
    reward_weights: weights w_k of the K reward components (() = all 1). Scalar estimators see
      `r = Σ_k w_k r_k`; multi-reward ones (`rl_inputs.MULTI_REWARD`) get [B, G, K] and w.
    num_minibatches: micro-batches per update (gradient accumulation: one optimizer update on the
      gradient of the whole batch, computed in `num_minibatches` pieces to bound memory).
    num_iterations: optimizer updates on the same rollout. The PPO ratio is always taken against
      the behaviour log-probs, so from the second update on ρ != 1 and clipping acts.
    tis_cap: truncated importance sampling cap C (0 = off); see `rl_inputs.tis_weights`.
    process_reward: 'none', or the process estimator (`rl.process_rewards.PROCESS_ADVANTAGES`)
      that turns the outcome advantage and the rollout's step rewards into token advantages.
    process_options: its sorted (key, value) options.
    shared_prompts: the G rows of each group share one prompt (every rollout mode builds its
      batch that way), so the reference pass and the policy's forward and backward run each
      prompt once per group (`logprobs.completion_logprobs(group_size=G)`): the same loss with
      fewer FLOPs. Micro-batches then hold whole groups. Off for ragged batches.
    num_groups, max_group_size: a ragged batch (`rollout.requests`, docs/algorithms.md §0
      pattern 2) of B = num_groups prompts with at most G_max = max_group_size rows each, grouped
      by `rollout.group`; 0 = the dense layout (groups of `group_size` contiguous rows).
  """

  group_size: int
  advantage: str = "grpo"
  advantage_options: tuple = ()
  loss: str = "ppo"
  loss_options: tuple = ()
  loss_behav_logp: bool = False
  clip_low: float = 0.2
  clip_high: float = 0.2
  clip_ratio_c: float = 3.0
  kl_coef: float = 0.0
  kl_kind: str = "k3"
  kl_in_reward: bool = False
  aggregation: str = "token-mean"
  temperature: float = 1.0
  sft_coef: float = 0.0
  reward_weights: tuple = ()
  num_minibatches: int = 1
  num_iterations: int = 1
  tis_cap: float = 0.0
  shared_prompts: bool = False
  num_groups: int = 0
  max_group_size: int = 0
  process_reward: str = "none"
  process_options: tuple = ()

  @property
  def prompt_group(self) -> int:
    """Rows per shared prompt in the log-prob passes (1 = every row runs its own prompt)."""
    return self.group_size if self.shared_prompts and not self.max_group_size else 1

  def __post_init__(self):
    if self.max_group_size and self.num_groups < 1:
      raise ValueError(f"a ragged batch (max_group_size={self.max_group_size}) needs "
                       f"num_groups >= 1, got {self.num_groups}")


def hyper_from_config(config) -> RLHyper:
  """`config.rl` (and the rollout temperature) -> the static RLHyper of `steps.rl_step`."""
  rl = config.rl
  return RLHyper(
      group_size=rl.group_size, advantage=rl.advantage,
      advantage_options=tuple(sorted(_advantage_options(config).items())),
      loss=rl.loss, clip_low=rl.clip_low, clip_high=rl.clip_high, clip_ratio_c=rl.clip_ratio_c,
      kl_coef=rl.kl_coef, kl_kind=rl.kl_kind, kl_in_reward=rl.kl_in_reward,
      aggregation=rl.aggregation, temperature=config.sampling.temperature,
      sft_coef=rl.sft_coef, reward_weights=tuple(float(w) for w in rl.reward_weights),
      num_minibatches=rl.num_minibatches, num_iterations=rl.num_iterations, tis_cap=rl.tis_cap,
      shared_prompts=rl.shared_prompts,
      num_groups=rl.prompts_per_step if requests_lib.is_ragged(config) else 0,
      max_group_size=rl.max_group_size, **_loss_hyper(config), **_process_hyper(config))


def _advantage_options(config) -> dict:
  """`config.rl.advantage_options`, plus the options the estimator's entry declares it reads
  from its own config section (`config_options(config)`; `advantage_options` wins)."""
  opts = config.rl.advantage_options.to_dict()
  from_section = advantages.ADVANTAGES.declared(config.rl.advantage, "config_options")
  if from_section is not None:
    for key, value in from_section(config).items():
      opts.setdefault(key, value)
  return opts


def _loss_hyper(config) -> dict:
  """RLHyper's loss-option fields: from the loss's options dataclass (`losses.LOSS_OPTIONS`,
  e.g. `config.rl.minpro`); none for a loss that takes no options."""
  options_cls = losses.LOSS_OPTIONS.get(config.rl.loss)
  if options_cls is None:
    return {}
  options = options_cls.from_config(config)
  return {"loss_options": options.loss_options(),
          "loss_behav_logp": options.uses_rollout_logp(april.enabled(config))}


def _process_hyper(config) -> dict:
  """RLHyper's process-reward fields (none for configs without `rl.process_reward`)."""
  if "process_reward" not in config.rl or config.rl.process_reward == "none":
    return {}
  return {"process_reward": config.rl.process_reward,
          "process_options": process.estimator_options(config)}
