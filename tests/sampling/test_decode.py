"""Sampler invariants: EOS masking, greedy == argmax of full forward, sampler logp == trainer logp."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models, sampling
from rl_jax.sampling import strategies
from rl_jax.rl import logprobs


@pytest.fixture(scope="module")
def setup():
  cfg = models.ModelConfig(vocab_size=23, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           d_ff=64, max_seq_len=32)
  params = models.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(0)
  lengths = np.array([5, 2, 3, 1])
  p = 5
  prompt_mask = np.arange(p)[None, :] >= (p - lengths)[:, None]
  prompt = np.where(prompt_mask, rng.integers(3, cfg.vocab_size, (4, p)), 0)
  return cfg, params, jnp.asarray(prompt), jnp.asarray(prompt_mask)


@pytest.mark.parametrize("strategy", [sampling.Sampling(1.0), sampling.Sampling(0.7, top_k=5),
                                      sampling.Sampling(1.3, top_p=0.8)])
def test_sampler_logp_equals_trainer_logp(setup, strategy):
  cfg, params, prompt, prompt_mask = setup
  out = sampling.generate(params, prompt, prompt_mask, jax.random.key(3), cfg=cfg,
                          strategy=strategy, max_new_tokens=8, eos_id=1)
  logp, ent = logprobs.completion_logprobs(cfg, params, prompt, prompt_mask, out.tokens,
                                           out.mask, temperature=strategy.temperature,
                                           with_entropy=True)
  np.testing.assert_allclose(out.logp, logp, atol=1e-5)
  np.testing.assert_allclose(out.entropy, ent, atol=1e-5)
  assert bool(jnp.all(out.logp <= 0)) and float(out.mask.sum()) > 0


def test_eos_masks_rest_of_row(setup):
  cfg, params, prompt, prompt_mask = setup
  eos = 1
  # Bias the model towards EOS so rows finish early at different steps.
  params = jax.tree_util.tree_map(lambda x: x, params)
  params["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"].at[eos].mul(40.0)
  out = sampling.generate(params, prompt, prompt_mask, jax.random.key(5), cfg=cfg,
                          strategy=sampling.Sampling(1.0), max_new_tokens=10, eos_id=eos)
  tokens, mask = np.asarray(out.tokens), np.asarray(out.mask)
  assert (tokens == eos).any()
  for row_t, row_m in zip(tokens, mask):
    hits = np.flatnonzero(row_t == eos)
    end = hits[0] + 1 if len(hits) else len(row_t)
    assert row_m[:end].all() and not row_m[end:].any()
    assert (row_t[end:] == 0).all()


def test_greedy_matches_full_forward_argmax(setup):
  cfg, params, prompt, prompt_mask = setup
  out = sampling.generate(params, prompt, prompt_mask, jax.random.key(0), cfg=cfg,
                          strategy=sampling.GREEDY, max_new_tokens=6, eos_id=1)
  tokens = jnp.concatenate([prompt, out.tokens], axis=1)
  mask = jnp.concatenate([prompt_mask, out.mask], axis=1)
  logits = models.forward(cfg, params, tokens, mask)
  want = jnp.argmax(logits[:, 4:-1], axis=-1)
  np.testing.assert_array_equal(np.where(out.mask, out.tokens, -1), np.where(out.mask, want, -1))


def test_new_rng_gives_new_samples(setup):
  cfg, params, prompt, prompt_mask = setup
  kw = dict(cfg=cfg, strategy=sampling.Sampling(1.0), max_new_tokens=8, eos_id=1)
  a = sampling.generate(params, prompt, prompt_mask, jax.random.key(1), **kw)
  b = sampling.generate(params, prompt, prompt_mask, jax.random.key(2), **kw)
  c = sampling.generate(params, prompt, prompt_mask, jax.random.key(1), **kw)
  assert not np.array_equal(a.tokens, b.tokens)
  np.testing.assert_array_equal(a.tokens, c.tokens)


def test_strategy_validation():
  with pytest.raises(ValueError, match="top_p"):
    sampling.Sampling(1.0, top_p=0.0)
  with pytest.raises(ValueError, match="temperature"):
    sampling.Sampling(-1.0)


@pytest.mark.parametrize("block", [7, 1024])
def test_inverse_cdf_sample_matches_probabilities(block):
  """Frequencies of 40k draws match the (unnormalized) weights; zero weights are never drawn."""
  rng = np.random.default_rng(0)
  w = rng.random(20) ** 3
  w[[0, 6, 7, 13, 19]] = 0.0  # Zeros at block edges (block 7) and at both ends.
  probs = jnp.asarray(np.stack([w, 2.5 * w[::-1]]), jnp.float32)
  keys = jax.random.split(jax.random.key(0), 40000)
  draws = np.asarray(jax.vmap(lambda k: strategies.inverse_cdf_sample(probs, k, block))(keys))
  for row, weights in enumerate(np.asarray(probs)):
    freq = np.bincount(draws[:, row], minlength=20) / len(keys)
    assert (freq[weights == 0] == 0).all()
    np.testing.assert_allclose(freq, weights / weights.sum(), atol=0.01)


@pytest.mark.parametrize("strategy,allowed", [
    (sampling.Sampling(1.0, top_k=3), [9, 8, 7]),
    (sampling.Sampling(1.0, top_p=0.5), [9, 8]),  # 0.32 + 0.27 reaches 0.5
])
def test_truncated_draws_stay_in_the_kept_set(strategy, allowed):
  probs = np.array([0.01] * 5 + [0.04, 0.1, 0.2, 0.25, 0.30])
  probs /= probs.sum()
  logits = jnp.log(jnp.asarray(np.tile(probs, (2, 1)), jnp.float32))
  keys = jax.random.split(jax.random.key(1), 4000)
  toks, logp, ent = jax.vmap(lambda k: strategy.draw(logits, k))(keys)
  toks = np.asarray(toks).ravel()
  assert set(np.unique(toks)) == set(allowed)
  kept = probs[allowed] / probs[allowed].sum()
  freq = np.array([(toks == a).mean() for a in allowed])
  np.testing.assert_allclose(freq, kept, atol=0.03)
  # The reported log-prob is the untruncated one.
  np.testing.assert_allclose(np.asarray(logp).ravel(), np.log(probs)[toks], atol=1e-5)
  np.testing.assert_allclose(np.asarray(ent), -np.sum(probs * np.log(probs)), atol=1e-5)


def test_num_samples_equals_repeated_prompts(setup):
  """Prefilling each prompt once and copying its cache rows == prefilling every copy."""
  cfg, params, prompt, prompt_mask = setup
  kw = dict(cfg=cfg, strategy=sampling.Sampling(1.0), max_new_tokens=7, eos_id=1)
  once = sampling.generate(params, prompt, prompt_mask, jax.random.key(4), num_samples=3, **kw)
  rep = sampling.generate(params, jnp.repeat(prompt, 3, 0), jnp.repeat(prompt_mask, 3, 0),
                          jax.random.key(4), **kw)
  assert once.tokens.shape == (12, 7)
  np.testing.assert_array_equal(once.tokens, rep.tokens)
  np.testing.assert_allclose(once.logp, rep.logp, atol=1e-6)
  # Samples of one prompt differ from each other.
  assert not np.array_equal(once.tokens[0], once.tokens[1])


def _eos_biased(params, eos, scale):
  params = jax.tree_util.tree_map(lambda x: x, params)
  params["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"].at[eos].mul(scale)
  return params


@pytest.mark.usefixtures("fast_compiles")  # The last tests of the module: compiling dominates.
@pytest.mark.parametrize("case", ["mixed", "all_stop_early", "none_stop"])
def test_stop_when_done_equals_fixed_scan(setup, case):
  """The while loop over chunks (exit_every = 1, 3) gives the fixed scan's outputs bit for bit;
  it stops early exactly when every row has ended (cache index = slots written)."""
  cfg, params, prompt, prompt_mask = setup
  t, p = 12, prompt.shape[1]
  scale, eos, everies = {"mixed": (25.0, 1, (1, 3)), "all_stop_early": (200.0, 1, (1, 3)),
                         "none_stop": (1.0, cfg.vocab_size, (3,))}[case]  # vocab_size: never drawn
  params = _eos_biased(params, 1, scale)
  kw = dict(cfg=cfg, strategy=sampling.Sampling(1.0), max_new_tokens=t, eos_id=eos,
            num_samples=2)
  for seed in range(3):
    key = jax.random.key(seed)
    fixed, fixed_cache = sampling.decode.generate_with_cache(params, prompt, prompt_mask, key,
                                                             exit_every=0, **kw)
    last = np.asarray(fixed.mask).sum(1).max() - 1  # The step at which the last row ended.
    for every in everies:
      out, cache = sampling.decode.generate_with_cache(params, prompt, prompt_mask, key,
                                                       exit_every=every, **kw)
      for name in ("tokens", "mask", "logp", "entropy"):
        np.testing.assert_array_equal(getattr(out, name), getattr(fixed, name), err_msg=name)
      # Steps run: the (T - 1) mod k leftover steps, then whole chunks up to step `last`.
      first = (t - 1) % every
      steps = first + max(0, -(-(last - first) // every)) * every
      assert int(cache.index) == p + steps, (every, last)
      if case == "all_stop_early":
        assert steps < t - 1
    assert int(fixed_cache.index) == p + t - 1
    if case == "all_stop_early":
      assert last < t // 2
    elif case == "none_stop":
      assert last == t - 1 and fixed.mask.all()
