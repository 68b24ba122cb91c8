"""A Gemma-3-shaped model whose sliding window is shorter than the sequences: the KV cache and the
samplers honour the window (cached decode == full forward; sampler log-probs == trainer log-probs).

The window (3 positions) is measured in token positions, so it holds whatever the cache's slot
layout is: left-padded prompts, per-row write slots (refill), forked rows (LATR, EPTree).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models, sampling
from rl_jax.sampling import arrol, echo, eptree, latr, partial, refill, treepo
import jitted_models  # tests/jitted_models.py

EOS = 1
pytestmark = pytest.mark.usefixtures("fast_compiles")

# Layers 0 and 2 local (window 3, RoPE base 100), layer 1 global (base 10,000).
GEMMA3_TINY = models.ModelConfig(
    vocab_size=19, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64,
    max_seq_len=64, qk_norm=True, post_norms=True, mlp_activation="gelu_tanh",
    scale_embeddings=True, norm_plus_one=True, sliding_window=3, sliding_window_pattern=2,
    rope_local_theta=100.0, query_pre_attn_scalar=12.0)


def _params(cfg):
  params = jitted_models.init_params(cfg, jax.random.key(0))
  # Larger attention weights and a flatter head: attention patterns matter, branching happens.
  scale = lambda path, x: x * (6.0 if "self_attn" in jax.tree_util.keystr(path) else 1.0)
  params = jax.tree_util.tree_map_with_path(scale, params)
  params["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"] * 3.0
  return params


@pytest.fixture(scope="module", params=["unrolled", "scanned"])
def setup(request):
  cfg = dataclasses.replace(GEMMA3_TINY, scan_layers=request.param == "scanned")
  params = _params(GEMMA3_TINY)
  if cfg.scan_layers:
    params = models.stack_layers(params)
  rng = np.random.default_rng(0)
  lengths = np.array([6, 2, 4])
  p = 6
  prompt_mask = np.arange(p)[None, :] >= (p - lengths)[:, None]
  prompt = np.where(prompt_mask, rng.integers(3, cfg.vocab_size, (3, p)), 0).astype(np.int32)
  return cfg, params, prompt, prompt_mask


def _trainer_logp(cfg, params, prompt, prompt_mask, tokens, mask, temperature=1.0, group=1):
  return jitted_models.completion_logprobs(cfg, params, jnp.asarray(prompt),
                                           jnp.asarray(prompt_mask), jnp.asarray(tokens),
                                           jnp.asarray(mask), temperature=temperature,
                                           group_size=group)


def test_cached_decode_equals_full_forward_past_the_window(setup):
  cfg, params, prompt, prompt_mask = setup
  b, p = prompt.shape
  steps = 7  # Sequences of up to 13 tokens against a window of 3.
  cache = models.init_cache(cfg, b, p + steps)
  logits, cache = jitted_models.prefill(cfg, params, cache, jnp.asarray(prompt),
                                        jnp.asarray(prompt_mask))
  fed = np.random.default_rng(1).integers(2, cfg.vocab_size, (b, steps)).astype(np.int32)
  cached = [logits]
  for t in range(steps):
    logits, cache = jitted_models.decode_step(cfg, params, cache, jnp.asarray(fed[:, t]))
    cached.append(logits)
  seq = np.concatenate([prompt, fed], axis=1)
  seq_mask = np.concatenate([prompt_mask, np.ones((b, steps), bool)], axis=1)
  full = np.asarray(jitted_models.forward(cfg, params, jnp.asarray(seq), jnp.asarray(seq_mask)))
  np.testing.assert_allclose(np.stack(cached, axis=1), full[:, p - 1:], atol=1e-4)
  # The window is what the model computes: without it the same parameters give other logits.
  wide = dataclasses.replace(cfg, sliding_window=64)
  full_wide = np.asarray(jitted_models.forward(wide, params, jnp.asarray(seq),
                                               jnp.asarray(seq_mask)))
  assert np.abs(full_wide[:, -1] - full[:, -1]).max() > 1e-2


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_decode_logp_equals_trainer_logp(setup, temperature):
  cfg, params, prompt, prompt_mask = setup
  g = 2
  out = sampling.generate(params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                          jax.random.key(3), cfg=cfg, strategy=sampling.Sampling(temperature),
                          max_new_tokens=8, eos_id=EOS, num_samples=g)
  rows = np.repeat(np.arange(3), g)
  assert int(np.asarray(out.mask).sum(-1).max()) >= 4  # Completions outrun the window.
  for group in (1, g):  # The trainer's plain pass and its shared-prompt pass.
    ref = _trainer_logp(cfg, params, prompt[rows], prompt_mask[rows], out.tokens, out.mask,
                        temperature, group)
    np.testing.assert_allclose(out.logp, ref, atol=1e-5)


def test_refill_logp_equals_trainer_logp(setup):
  cfg, params, prompt, prompt_mask = setup
  out = refill.refill_generate(params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                               jax.random.key(4), cfg=cfg, strategy=sampling.Sampling(1.0),
                               max_new_tokens=8, eos_id=EOS, num_samples=2, num_slots=3)
  s = out.samples
  rows = np.repeat(np.arange(3), 2)
  ref = _trainer_logp(cfg, params, prompt[rows], prompt_mask[rows], s.tokens, s.mask)
  np.testing.assert_allclose(s.logp, ref, atol=1e-5)


def test_latr_logp_equals_trainer_logp(setup):
  cfg, params, prompt, prompt_mask = setup
  opts = latr.LatrOptions(tau_abs=0.0, tau_rel=1.0, windows=(2, 3), sm_threshold=None,
                          rl_threshold=0.99)
  k, t = 3, 8
  out = latr.latr_generate(params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                           jax.random.key(1), cfg=cfg, strategy=sampling.Sampling(1.0),
                           options=opts, num_slots=k, max_new_tokens=t, eos_id=EOS)
  assert int(out.num_forks) > 0
  rows = np.repeat(np.arange(3), k)
  ref = _trainer_logp(cfg, params, prompt[rows], prompt_mask[rows], out.tokens, out.mask)
  np.testing.assert_allclose(out.logp, ref, atol=1e-5)


def test_eptree_logp_equals_trainer_logp(setup):
  cfg, params, prompt, prompt_mask = setup
  opts = eptree.EPTreeOptions(num_chains=2, forks_per_round=1, rounds=1, branches=2)
  out = eptree.eptree_rollout(params, prompt, prompt_mask, jax.random.key(3), cfg=cfg,
                              strategy=sampling.Sampling(1.0), options=opts, max_new_tokens=8,
                              eos_id=-1)
  rows = np.repeat(np.arange(3), opts.leaves)
  ref = _trainer_logp(cfg, params, prompt[rows], prompt_mask[rows], out.tokens, out.mask)
  np.testing.assert_allclose(out.logp, ref, atol=1e-5)


def test_treepo_logp_equals_trainer_logp(setup):
  cfg, params, prompt, prompt_mask = setup
  g = 8  # 2 paths, then 4, then 8 over 3 segments of 3 tokens.
  out = treepo.treepo_rollout(params, prompt, prompt_mask, jax.random.key(1), cfg=cfg,
                              strategy=sampling.Sampling(1.0),
                              options=treepo.TreePOOptions(segment_len=3, first_width=2,
                                                           branches=2),
                              group=g, max_new_tokens=9, eos_id=cfg.vocab_size)  # no EOS
  assert out.num_forks > 0
  rows = np.repeat(np.arange(3), g)
  ref = _trainer_logp(cfg, params, prompt[rows], prompt_mask[rows], out.tokens, out.mask)
  np.testing.assert_allclose(out.logp, ref, atol=1e-5)


def test_echo_logp_equals_trainer_logp(setup):
  cfg, params, prompt, prompt_mask = setup
  k = 4
  out = jax.device_get(echo.echo_generate(
      params, jnp.asarray(prompt), jnp.asarray(prompt_mask), jax.random.key(1), cfg=cfg,
      strategy=sampling.Sampling(1.0), options=echo.EchoOptions(), num_slots=k,
      max_new_tokens=9, eos_id=cfg.vocab_size))
  rows = np.repeat(np.arange(3), k)
  ref = _trainer_logp(cfg, params, prompt[rows], prompt_mask[rows], out.tokens, out.mask)
  np.testing.assert_allclose(out.logp, np.where(out.mask, ref, 0.0), atol=1e-5)


def test_partial_resumed_logp_equals_trainer_logp(setup):
  """A round stopped early, then resumed from its prefixes (per-row write slots after a
  right-padded prefix block)."""
  cfg, params, prompt, prompt_mask = setup
  t = 8
  kw = dict(cfg=cfg, strategy=sampling.Sampling(1.0), max_new_tokens=t, eos_id=EOS, pad_id=0,
            group_size=1)
  prompt, prompt_mask = jnp.asarray(prompt), jnp.asarray(prompt_mask)
  r = prompt.shape[0]
  empty = (jnp.zeros((r, t), jnp.int32), jnp.zeros((r, t), bool), jnp.zeros((r, t)),
           jnp.zeros((r,), bool))
  first = partial.partial_generate(params, prompt, prompt_mask, *empty, jax.random.key(5),
                                   target_groups=1, **kw)
  assert int(np.asarray(first.mask).sum(1).min()) >= 2
  out = partial.partial_generate(params, prompt, prompt_mask, first.tokens, first.mask,
                                 first.logp, first.done, jax.random.key(6), target_groups=r,
                                 **kw)
  assert int(np.asarray(out.mask).sum(1).max()) > int(np.asarray(first.mask).sum(1).max())
  ref = _trainer_logp(cfg, params, prompt, prompt_mask, out.tokens, out.mask)
  np.testing.assert_allclose(out.logp, ref, atol=1e-5)


def test_arrol_survivors_logp_equals_trainer_logp(setup):
  cfg, params, prompt, prompt_mask = setup
  keep = 2
  head = {"head": {"kernel": jax.random.normal(jax.random.key(1), (cfg.d_model,)),
                   "bias": jnp.float32(0.0)}}
  out = arrol.arrol_generate(params, head, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                             jax.random.key(3), cfg=cfg, strategy=sampling.Sampling(1.0),
                             max_new_tokens=8, eos_id=EOS,
                             options=arrol.ArrolOptions(oversample=4, keep=keep, prune_at=4))
  s = out.samples
  rows = np.repeat(np.arange(3), keep)
  ref = _trainer_logp(cfg, params, prompt[rows], prompt_mask[rows], s.tokens, s.mask)
  np.testing.assert_allclose(s.logp, ref, atol=1e-5)


def test_soft_capped_logits_match_between_sampler_and_trainer():
  cfg = dataclasses.replace(GEMMA3_TINY, final_logit_softcap=2.0)
  params = _params(cfg)
  prompt = jnp.asarray([[0, 5, 7, 9], [4, 3, 8, 2]], jnp.int32)
  prompt_mask = prompt > 0
  out = sampling.generate(params, prompt, prompt_mask, jax.random.key(2), cfg=cfg,
                          strategy=sampling.Sampling(0.8), max_new_tokens=6, eos_id=EOS)
  logp, ent = jitted_models.completion_logprobs(cfg, params, prompt, prompt_mask, out.tokens,
                                                out.mask, temperature=0.8, with_entropy=True)
  np.testing.assert_allclose(out.logp, logp, atol=1e-5)
  np.testing.assert_allclose(out.entropy, ent, atol=1e-5)
  logits = np.asarray(jitted_models.forward(cfg, params, prompt, prompt_mask))
  assert np.abs(logits).max() <= 2.0 + 1e-6
