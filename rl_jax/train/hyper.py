"""`config.rl` -> the static `RLHyper` of `steps.rl_step` (the jitted step's compile-time
settings)."""

from __future__ import annotations

from rl_jax.rl import losses
from rl_jax.rollout import april
from rl_jax.rollout import requests as requests_lib
from rl_jax.train import steps as steps_lib
from rl_jax.value.prm import process


def _advantage_options(config) -> dict:
  """`config.rl.advantage_options`, plus `v05.scale_by_std` / `v05.std_eps` for 'v05'."""
  opts = config.rl.advantage_options.to_dict()
  if config.rl.advantage == "v05":
    opts.setdefault("scale_by_std", bool(config.rl.v05.scale_by_std))
    opts.setdefault("eps", float(config.rl.v05.std_eps))
  return opts


def hyper_from_config(config) -> steps_lib.RLHyper:
  """`config.rl` (and the rollout temperature) -> the static RLHyper of `steps.rl_step`."""
  rl = config.rl
  return steps_lib.RLHyper(
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
