"""Slot refill: the same tokens as the linear sampler with per-request keys, the trainer's
log-probs, every request served, fewer slot-steps than the fixed scan."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models, sampling
from rl_jax.rl import logprobs
from rl_jax.sampling import engines, refill

G, T = 3, 12
pytestmark = pytest.mark.usefixtures("fast_compiles")  # Compiling dominates these tiny shapes.


@pytest.fixture(scope="module")
def setup():
  cfg = models.ModelConfig(vocab_size=23, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           d_ff=64, max_seq_len=32)
  params = models.init_params(cfg, jax.random.key(0))
  # Bias towards EOS (id 1): lengths from 1 to T, so slots free up at different steps.
  params["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"].at[1].mul(25.0)
  rng = np.random.default_rng(0)
  lengths = np.array([5, 2, 3, 1])
  p = 5
  prompt_mask = np.arange(p)[None, :] >= (p - lengths)[:, None]
  prompt = np.where(prompt_mask, rng.integers(3, cfg.vocab_size, (4, p)), 0)
  return cfg, params, jnp.asarray(prompt), jnp.asarray(prompt_mask)


def test_refill_equals_linear_sampler_with_request_keys(setup):
  cfg, params, prompt, prompt_mask = setup
  strategy = sampling.Sampling(1.0)
  kw = dict(cfg=cfg, strategy=strategy, max_new_tokens=T, eos_id=1, num_samples=G)
  key = jax.random.key(7)
  ref = sampling.generate(params, prompt, prompt_mask, key, row_keys=True, **kw)
  lengths = np.asarray(ref.mask).sum(1)
  assert lengths.min() < T // 2 and lengths.max() == T  # A long tail: slots do free up.
  q, slots = len(lengths), 2
  out = refill.refill_generate(params, prompt, prompt_mask, key, num_slots=slots, **kw)
  got = out.samples
  np.testing.assert_array_equal(got.tokens, ref.tokens)
  np.testing.assert_array_equal(got.mask, ref.mask)
  np.testing.assert_allclose(got.logp, ref.logp, atol=1e-6)
  np.testing.assert_allclose(got.entropy, ref.entropy, atol=1e-6)
  # Work: Q first draws + S per decode step. Each request needs (length - 1) decode steps, and
  # a slot idles only after the queue is empty, for less than the longest request.
  iters = int(out.iterations)
  assert int(out.slot_steps) == q + slots * iters
  assert (lengths.sum() - q) / slots <= iters < (lengths.sum() - q) / slots + T
  assert int(out.slot_steps) < q * T
  # Sampler log-probs == trainer log-probs (the rows' prompts are np.repeat(prompt, G)).
  lp, ent = logprobs.completion_logprobs(cfg, params, jnp.repeat(prompt, G, 0),
                                         jnp.repeat(prompt_mask, G, 0), got.tokens, got.mask,
                                         temperature=strategy.temperature, with_entropy=True)
  np.testing.assert_allclose(got.logp, lp, atol=1e-5)
  np.testing.assert_allclose(got.entropy, ent, atol=1e-5)


def test_requests_ending_at_their_first_token(setup):
  """Most requests end at once (EOS first, drawn from the prompt's logits, no decode step): the
  queue still drains and the rows are the linear sampler's."""
  cfg, params, prompt, prompt_mask = setup
  params = jax.tree_util.tree_map(lambda x: x, params)
  params["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"].at[1].mul(1e3)
  kw = dict(cfg=cfg, strategy=sampling.Sampling(1.0), max_new_tokens=T, eos_id=1, num_samples=G)
  out = refill.refill_generate(params, prompt, prompt_mask, jax.random.key(0), num_slots=2, **kw)
  ref = sampling.generate(params, prompt, prompt_mask, jax.random.key(0), row_keys=True, **kw)
  lengths = np.asarray(ref.mask).sum(1)
  assert (lengths == 1).sum() >= 8
  np.testing.assert_array_equal(out.samples.tokens, ref.tokens)
  np.testing.assert_array_equal(out.samples.mask, ref.mask)


def test_bad_num_slots(setup):
  cfg, params, prompt, prompt_mask = setup
  with pytest.raises(ValueError, match=r"num_slots=13 must be in \[1, B·G=12\]"):
    refill.refill_generate(params, prompt, prompt_mask, jax.random.key(0), cfg=cfg,
                           strategy=sampling.Sampling(1.0), max_new_tokens=T, eos_id=1,
                           num_samples=G, num_slots=13)


def test_engines_by_name(setup):
  """'scan' and 'stop' give the same samples, 'stop' spends fewer draws once every row ended;
  'refill' is `refill_generate`. Unknown names and bad options name the config field."""
  cfg, params, prompt, prompt_mask = setup
  params = jax.tree_util.tree_map(lambda x: x, params)
  params["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"].at[1].mul(8.0)
  kw = dict(cfg=cfg, strategy=sampling.Sampling(1.0), max_new_tokens=T, eos_id=1, pad_id=0,
            num_samples=G)
  key = jax.random.key(3)
  opts = engines.EngineOptions(exit_every=1, num_slots=2)
  res = {name: engines.DECODE_LOOPS.get(name)(params, prompt, prompt_mask, key, options=opts, **kw)
         for name in ("scan", "stop", "refill")}
  np.testing.assert_array_equal(res["stop"].samples.tokens, res["scan"].samples.tokens)
  np.testing.assert_array_equal(res["stop"].samples.logp, res["scan"].samples.logp)
  lengths = np.asarray(res["scan"].samples.mask).sum(1)
  assert int(res["scan"].slot_steps) == len(lengths) * T
  assert int(res["stop"].slot_steps) == len(lengths) * lengths.max()
  assert int(res["refill"].slot_steps) < int(res["stop"].slot_steps)
  with pytest.raises(KeyError, match="unknown sampling engine 'beam'"):
    engines.DECODE_LOOPS.get("beam")
  with pytest.raises(ValueError, match="config.sampling.exit_every must be >= 1"):
    engines.EngineOptions(exit_every=0)


def test_refill_engine_in_rl_rollout(smoke_config, tmp_path):
  """config.sampling.engine='refill' through the RL rollout: the batch's shapes, and its
  behaviour log-probs equal the trainer's."""
  from rl_jax.rollout import collect  # pylint: disable=g-import-not-at-top
  from rl_jax.rollout.requests import StepContext  # pylint: disable=g-import-not-at-top
  from rl_jax import experiment  # pylint: disable=g-import-not-at-top
  from rl_jax.train import phases  # pylint: disable=g-import-not-at-top
  smoke_config.sampling.update(engine="refill", num_slots=5)
  exp = experiment.build(smoke_config, str(tmp_path))
  params = phases.init_params(exp)
  batch, rewards, _ = collect.rollout(StepContext(exp, params, 0))
  rows = smoke_config.rl.prompts_per_step * smoke_config.rl.group_size
  assert batch.tokens.shape == (rows, smoke_config.sampling.max_new_tokens)
  assert rewards.shape == (rows, 1) and batch.mask.any(1).all()
  lp = logprobs.completion_logprobs(exp.model_cfg, params, jnp.asarray(batch.prompt_tokens),
                                    jnp.asarray(batch.prompt_mask), jnp.asarray(batch.tokens),
                                    jnp.asarray(batch.mask), temperature=1.0)
  np.testing.assert_allclose(batch.logp, lp, atol=1e-5)
