"""rl_jax.data.batching.LengthBuckets: partition, uniform sampling, and the SFT loss of a bucket's
narrow batch equals the loss of the same examples at the data's full width."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from rl_jax import models
from rl_jax.data.batching import LengthBuckets
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState, make_optimizer, optim_config
from rl_jax.types import SFTBatch


def _data(n=240, p=12, t=20, seed=0):
  rng = np.random.default_rng(seed)
  p_len = rng.integers(2, p + 1, n)
  t_len = rng.integers(1, t + 1, n)
  prompt_mask = np.arange(p)[None, :] >= p - p_len[:, None]
  mask = np.arange(t)[None, :] < t_len[:, None]
  prompts = np.where(prompt_mask, rng.integers(4, 30, (n, p)), 0).astype(np.int32)
  tokens = np.where(mask, rng.integers(4, 30, (n, t)), 0).astype(np.int32)
  return prompts, prompt_mask, tokens, mask


def test_buckets_partition_and_widths():
  _, prompt_mask, _, mask = _data()
  b = LengthBuckets(prompt_mask, mask, num_buckets=4, batch_size=16)
  members = np.concatenate(b.members)
  assert sorted(members.tolist()) == list(range(240))
  t_len = mask.sum(1)
  for m, pw, tw in zip(b.members, b.prompt_width, b.completion_width):
    assert tw == t_len[m].max() and pw == prompt_mask[m].sum(1).max()
  assert b.completion_width == sorted(b.completion_width)
  assert b.completion_width[0] < mask.shape[1]  # the short bucket is narrower than the data


def test_sampling_is_uniform_over_examples():
  _, prompt_mask, _, mask = _data()
  b = LengthBuckets(prompt_mask, mask, num_buckets=3, batch_size=8)
  counts = np.zeros(240)
  rng = np.random.default_rng(0)
  for _ in range(3000):
    idx, _, _ = b.sample(rng)
    assert len(set(idx.tolist())) == 8
    counts[idx] += 1
  expected = 3000 * 8 / 240  # 100 per example
  assert abs(counts.mean() - expected) < 1e-9
  assert counts.std() < 0.2 * expected  # binomial spread ~10, no bucket favoured
  by_bucket = [counts[m].mean() for m in b.members]
  assert max(by_bucket) - min(by_bucket) < 0.1 * expected


def test_narrow_batch_has_the_same_loss():
  prompts, prompt_mask, tokens, mask = _data(n=64)
  b = LengthBuckets(prompt_mask, mask, num_buckets=4, batch_size=8)
  cfg = models.ModelConfig(vocab_size=32, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                           d_ff=64, max_seq_len=64)
  params = models.init_params(cfg, jax.random.key(0))
  state = TrainState.create(params, make_optimizer(optim_config(1e-3), 10))
  step = jax.jit(functools.partial(steps_lib.sft_step, model_cfg=cfg))
  idx, p, t = b.sample(np.random.default_rng(1))
  wide = SFTBatch(prompts[idx], prompt_mask[idx], tokens[idx], mask[idx])
  narrow = SFTBatch(prompts[idx, -p:], prompt_mask[idx, -p:], tokens[idx, :t], mask[idx, :t])
  assert narrow.tokens.shape[1] < wide.tokens.shape[1]
  assert narrow.mask.sum() == wide.mask.sum() and narrow.prompt_mask.sum() == wide.prompt_mask.sum()
  _, m_wide = step(state, wide)
  _, m_narrow = step(state, narrow)
  np.testing.assert_allclose(m_narrow["loss"], m_wide["loss"], rtol=1e-5)
  np.testing.assert_allclose(m_narrow["grad_norm"], m_wide["grad_norm"], rtol=1e-4)


def test_too_many_buckets_is_an_error():
  _, prompt_mask, _, mask = _data(n=40)
  with pytest.raises(ValueError, match="sft.length_buckets"):
    LengthBuckets(prompt_mask, mask, num_buckets=4, batch_size=16)
