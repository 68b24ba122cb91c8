"""Shared defaults for every experiment config (`get_config` files start from `base()`)."""

from __future__ import annotations

import dataclasses

import ml_collections

from rl_jax import models


def model(preset: str) -> ml_collections.ConfigDict:
  """Every ModelConfig field of `preset`; vocab_size 0 means 'the tokenizer's size'."""
  fields = {f.name: f.default for f in dataclasses.fields(models.ModelConfig)
            if f.default is not dataclasses.MISSING}
  fields.update(vocab_size=0, **models.PRESETS[preset])
  return ml_collections.ConfigDict(fields)


def optim(lr: float, *, warmup_steps: int = 0, schedule: str = "constant",
          end_lr_frac: float = 0.0, weight_decay: float = 0.0, b1: float = 0.9, b2: float = 0.99,
          eps: float = 1e-8, grad_clip: float = 1.0) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      lr=lr, warmup_steps=warmup_steps, schedule=schedule, end_lr_frac=end_lr_frac,
      weight_decay=weight_decay, b1=b1, b2=b2, eps=eps, grad_clip=grad_clip))


def base() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.progress = True
  c.interrupt_at = ""  # 'phase:step' stops the run after that step (tests preemption/resume).
  c.init_from = ""  # A work dir whose final SFT checkpoint is used instead of running SFT.
  c.task = ml_collections.ConfigDict(dict(
      name="chain_sum",
      options=ml_collections.ConfigDict(dict(min_terms=2, max_terms=2, min_digits=1,
                                             max_digits=2, allow_negation=False)),
      train_size=20000, eval_size=500, demo_noise=0.0))
  # Pieces may span spaces, so the task's fixed instruction becomes one token (short prompts).
  c.tokenizer = ml_collections.ConfigDict(dict(
      vocab_size=96, options=ml_collections.ConfigDict(dict(
          split_by_whitespace=False, max_sentencepiece_length=64))))
  c.model = model("tiny")
  c.sampling = ml_collections.ConfigDict(dict(max_new_tokens=5, temperature=1.0, top_k=0,
                                              top_p=1.0))
  c.sft = ml_collections.ConfigDict(dict(steps=500, batch_size=128, eval_every=0,
                                         optim=optim(1e-3, warmup_steps=50, schedule="cosine",
                                                     end_lr_frac=0.1, weight_decay=0.01)))
  # RL (rl_jax/train/steps.py RLHyper and rl_jax/train/rollouts.py document each field).
  # group_size is the rows per prompt: MC-GRPO with G=2 (+1 pivot) is group_size=3.
  c.rl = ml_collections.ConfigDict(dict(
      steps=100, prompts_per_step=32, group_size=8, advantage="grpo",
      advantage_options=ml_collections.ConfigDict(), loss="ppo", clip_low=0.2, clip_high=0.2,
      clip_ratio_c=3.0, kl_coef=0.0, kl_kind="k3", aggregation="token-mean", sft_coef=0.0,
      eval_every=25, optim=optim(1e-4),
      # Reward components (rl_jax.rewards.REWARDS) and weights (() = all 1).
      rewards=("task_score",), reward_weights=(),
      kl_in_reward=False,  # kl_coef * k1 goes into the reward instead of the loss.
      num_minibatches=1,  # Gradient accumulation: micro-batches per update.
      num_iterations=1,  # Updates per rollout batch (PPO epochs).
      tis_cap=0.0,  # Truncated importance sampling cap, sampler vs trainer log-probs (0 = off).
      # DAPO: dynamic sampling (drop all-equal groups, up to max_gen_rounds generation rounds)
      # and soft overlong punishment over the last overlong_buffer tokens (0 = off).
      dynamic_sampling=False, max_gen_rounds=4, overlong_buffer=0,
      overlong_penalty_factor=1.0))
  c.control = ml_collections.ConfigDict(dict(enabled=True))
  c.eval = ml_collections.ConfigDict(dict(num_samples=4, temperatures=(0.3, 0.5, 0.7, 1.0),
                                          batch_size=500))
  c.mesh = ml_collections.ConfigDict(dict(shape=(1, 1, 1)))
  c.checkpoint = ml_collections.ConfigDict(dict(every=50, max_to_keep=2))
  return c
