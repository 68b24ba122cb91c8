"""APRIL's partial engine: it stops when the target number of groups is complete, its rows are
the full decode's rows cut there, its log-probs are the trainer's, and a carried row resumed
under new parameters keeps its old log-probs while its new tokens get the new policy's (the
truncated importance weights then correct exactly the carried tokens)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models, sampling
from rl_jax.rl import logprobs
from rl_jax.sampling import partial
from rl_jax.train import rl_inputs

G, T, EOS = 2, 10, 1
pytestmark = pytest.mark.usefixtures("fast_compiles")  # Compiling dominates these tiny shapes.


@pytest.fixture(scope="module")
def setup():
  # max_seq_len = P + T: a resumed row's prefix and continuation share the T completion slots.
  cfg = models.ModelConfig(vocab_size=23, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2,
                           d_ff=64, max_seq_len=5 + T)
  params = models.init_params(cfg, jax.random.key(0))
  # Bias towards EOS: lengths spread over 1..T, so groups complete at different steps.
  params["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"].at[EOS].mul(12.0)
  rng = np.random.default_rng(0)
  lengths = np.array([5, 2, 3, 1, 4, 2, 5, 3])  # O = 4 groups of G = 2 rows
  p = 5
  mask = np.arange(p)[None, :] >= (p - lengths)[:, None]
  prompt = np.where(mask, rng.integers(3, cfg.vocab_size, (8, p)), 0)
  return cfg, params, jnp.asarray(prompt), jnp.asarray(mask)


def _run(cfg, params, prompt, prompt_mask, key, target, prefix=None):
  r = prompt.shape[0]
  if prefix is None:
    prefix = (np.zeros((r, T), np.int32), np.zeros((r, T), bool), np.zeros((r, T), np.float32),
              np.zeros(r, bool))
  return partial.partial_generate(params, prompt, prompt_mask, *prefix, key, cfg=cfg,
                                  strategy=sampling.Sampling(1.0), max_new_tokens=T,
                                  eos_id=EOS, pad_id=0, group_size=G, target_groups=target)


def _trainer(cfg, params, prompt, prompt_mask, out):
  return np.asarray(logprobs.completion_logprobs(cfg, params, prompt, prompt_mask, out.tokens,
                                                 out.mask))


def test_round_ends_at_the_target_count(setup):
  cfg, params, prompt, prompt_mask = setup
  key = jax.random.key(3)
  full = _run(cfg, params, prompt, prompt_mask, key, target=4)  # every group: plain decoding
  lengths = np.asarray(full.mask).sum(1)
  assert np.asarray(full.done).all() and len(set(lengths.tolist())) >= 3
  # Group o completes after max(len) - 1 decode steps; the round stops at the 2nd completion.
  finish = lengths.reshape(-1, G).max(1) - 1
  stop = np.sort(finish)[1]
  assert stop < finish.max()  # the stop rule really cuts decoding short
  out = _run(cfg, params, prompt, prompt_mask, key, target=2)
  assert int(out.steps) == stop
  complete = np.asarray(partial.complete_groups(out.done, G))
  assert complete.sum() >= 2 and (complete == (finish <= stop)).all()
  # Each row is the full decode's row cut after stop + 1 tokens (per-row keys, same draws).
  cut = np.minimum(lengths, stop + 1)
  np.testing.assert_array_equal(np.asarray(out.mask).sum(1), cut)
  keep = np.arange(T)[None, :] < cut[:, None]
  np.testing.assert_array_equal(np.where(keep, full.tokens, 0), out.tokens)
  np.testing.assert_array_equal(np.asarray(out.new), np.asarray(out.mask))
  # Sampler log-probs == trainer log-probs (finished rows and the unfinished ones alike).
  np.testing.assert_allclose(out.logp, _trainer(cfg, params, prompt, prompt_mask, out),
                             atol=1e-5)


def test_resumed_rows_mix_policies_and_tis_corrects_the_old_tokens(setup):
  cfg, params, prompt, prompt_mask = setup
  first = _run(cfg, params, prompt, prompt_mask, jax.random.key(3), target=2)
  done = np.asarray(first.done)
  assert (~done).sum() >= 2  # rows to carry
  # The next step's policy: parameters moved by an update.
  new_params = jax.tree_util.tree_map(
      lambda x: x + 0.05 * jax.random.normal(jax.random.key(1), x.shape, x.dtype), params)
  carried = (first.tokens, first.mask, first.logp, first.done)
  out = _run(cfg, new_params, prompt, prompt_mask, jax.random.key(4), target=4, prefix=carried)
  mask, new = np.asarray(out.mask), np.asarray(out.new)
  assert np.asarray(out.done).all()
  old = np.asarray(first.mask)
  np.testing.assert_array_equal(mask & ~new, old)  # the prefix is kept, token for token
  np.testing.assert_array_equal(np.where(old, out.tokens, 0), first.tokens)
  assert not new[done].any() and new[~done].any()  # finished rows draw nothing more
  # Behaviour log-probs: the old policy's on the prefix, the new policy's on the new tokens.
  lp_new = _trainer(cfg, new_params, prompt, prompt_mask, out)
  np.testing.assert_allclose(np.where(old, out.logp, 0), first.logp, atol=0)
  np.testing.assert_allclose(np.where(new, out.logp, 0), np.where(new, lp_new, 0), atol=1e-5)
  # TIS (rl.tis_cap C = 1.5): w = 1 on this step's tokens, min(π_new / μ_old, C) on the old ones.
  w = np.asarray(rl_inputs.tis_weights(lp_new, out.logp, out.mask, 1.5))
  np.testing.assert_allclose(w[new], 1.0, atol=1e-4)
  want = np.minimum(np.exp(lp_new - np.asarray(first.logp)), 1.5)
  np.testing.assert_allclose(w[old], want[old], rtol=1e-5)
  assert np.abs(w[old] - 1).max() > 1e-2  # the carried tokens really are off-policy


def test_bad_target(setup):
  cfg, params, prompt, prompt_mask = setup
  with pytest.raises(ValueError, match=r"target_groups=5 must be in \[1, O=4\]"):
    _run(cfg, params, prompt, prompt_mask, jax.random.key(0), target=5)
