"""ARRoL's pruning engine (docs/algorithms.md §6.6 [R]): the keep rule's worked numbers, survivors
equal to the unpruned sampler's rows and the trainer's log-probs, constant heads, named errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models, sampling
from rl_jax.rl import logprobs
from rl_jax.sampling import arrol

N0, N, T, TP = 6, 4, 10, 3
pytestmark = pytest.mark.usefixtures("fast_compiles")


@pytest.fixture(scope="module")
def setup():
  cfg = models.ModelConfig(vocab_size=23, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2,
                           d_ff=64, max_seq_len=32)
  params = models.init_params(cfg, jax.random.key(0))
  # Bias towards EOS (id 1): some rows end before the checkpoint, some run to T.
  params["embed_tokens"]["embedding"] = params["embed_tokens"]["embedding"].at[1].mul(12.0)
  rng = np.random.default_rng(0)
  lengths = np.array([5, 2, 3])
  p = 5
  prompt_mask = np.arange(p)[None, :] >= (p - lengths)[:, None]
  prompt = np.where(prompt_mask, rng.integers(3, cfg.vocab_size, (3, p)), 0)
  return cfg, params, jnp.asarray(prompt), jnp.asarray(prompt_mask)


def _head(cfg, kernel=None, bias=0.0):
  k = jnp.zeros((cfg.d_model,)) if kernel is None else kernel
  return {"head": {"kernel": k, "bias": jnp.asarray(bias, jnp.float32)}}


def _kw(cfg, rule="balanced", keep=N):
  return dict(cfg=cfg, strategy=sampling.Sampling(1.0), max_new_tokens=T, eos_id=1,
              options=arrol.ArrolOptions(oversample=N0, keep=keep, prune_at=TP, rule=rule))


def test_balanced_rule_worked_example():
  g = jnp.asarray([[0.9, 0.1, 0.6, 0.4, 0.8, 0.2]])
  np.testing.assert_array_equal(arrol.keep_balanced(g, 4, 0.5), [[0, 1, 4, 5]])  # §6.6 test
  np.testing.assert_array_equal(arrol.keep_highest(g, 4, 0.5), [[0, 2, 3, 4]])
  flat = jnp.full((1, 6), 0.3)  # constant: ties by index
  np.testing.assert_array_equal(arrol.keep_balanced(flat, 4, 0.5), [[0, 1, 4, 5]])
  np.testing.assert_array_equal(arrol.keep_highest(flat, 4, 0.5), [[0, 1, 2, 3]])
  # rho = 0.75 with N = 4: the 3 highest and the 1 lowest.
  np.testing.assert_array_equal(arrol.keep_balanced(g, 4, 0.75), [[0, 1, 2, 4]])
  # Balance: whenever at least ⌈ρN⌉ rows of a group score above and N − ⌈ρN⌉ below 0.5, the
  # survivors' predicted positive fraction is exactly ρ (random groups of N₀ = 12, N = 8).
  x = jax.random.uniform(jax.random.key(0), (64, 12))
  kept = np.take_along_axis(np.asarray(x), np.asarray(arrol.keep_balanced(x, 8, 0.5)), 1)
  ok = ((np.asarray(x) > 0.5).sum(1) >= 4) & ((np.asarray(x) <= 0.5).sum(1) >= 4)
  assert ok.sum() > 40
  np.testing.assert_array_equal((kept[ok] > 0.5).sum(1), 4)


def test_survivors_are_the_unpruned_rows_and_match_the_trainer(setup):
  cfg, params, prompt, prompt_mask = setup
  key = jax.random.key(3)
  head = _head(cfg, jax.random.normal(jax.random.key(1), (cfg.d_model,)))
  out = arrol.arrol_generate(params, head, prompt, prompt_mask, key, **_kw(cfg))
  kw = _kw(cfg)
  del kw["options"]
  full = sampling.generate(params, prompt, prompt_mask, key, num_samples=N0, row_keys=True, **kw)
  b = prompt.shape[0]
  flat = (np.arange(b)[:, None] * N0 + np.asarray(out.survivors)).reshape(-1)
  got = out.samples
  np.testing.assert_array_equal(got.tokens, np.asarray(full.tokens)[flat])
  np.testing.assert_array_equal(got.mask, np.asarray(full.mask)[flat])
  np.testing.assert_allclose(got.logp, np.asarray(full.logp)[flat], atol=1e-5)
  # The rule picked the survivors from the scores, and the scores are the head on the prefix.
  np.testing.assert_array_equal(out.survivors, arrol.keep_balanced(out.scores, N, 0.5))
  assert len(np.unique(np.asarray(out.scores))) > b  # a real, row-dependent score
  lengths = np.asarray(full.mask).sum(1)
  assert lengths.min() <= TP < lengths.max()  # rows ended before and after the checkpoint
  # Work: pruned rows that were still live stopped at t_p.
  pruned = np.ones(b * N0, bool)
  pruned[flat] = False
  assert int(out.pruned_live) == int((pruned & (lengths > TP)).sum())
  assert int(out.pruned_tokens) == int(np.minimum(lengths, TP)[pruned].sum())
  steps2 = int(np.asarray(got.mask).sum(1).max()) - TP
  assert int(out.saved_slot_steps) == b * (N0 - N) * max(steps2, 0)
  # Sampler log-probs == trainer log-probs on the survivors.
  lp = logprobs.completion_logprobs(cfg, params, jnp.repeat(prompt, N, 0),
                                    jnp.repeat(prompt_mask, N, 0), got.tokens, got.mask,
                                    temperature=1.0)
  np.testing.assert_allclose(got.logp, lp, atol=1e-5)
  # The features the head read are the hidden states of the survivors' prefixes at t_p.
  from rl_jax.models import heads  # pylint: disable=g-import-not-at-top
  vals = heads.token_values(cfg, {"body": params, **head}, jnp.repeat(prompt, N, 0),
                            jnp.repeat(prompt_mask, N, 0), got.tokens, got.mask)
  at = np.minimum(np.asarray(got.mask).sum(1), TP)  # index t + 1 after token t
  want = jax.nn.sigmoid(np.asarray(vals)[np.arange(len(at)), at])
  np.testing.assert_allclose(jax.nn.sigmoid(heads.head_logits(head, out.features)), want,
                             atol=1e-4)
  np.testing.assert_allclose(np.take_along_axis(np.asarray(out.scores), np.asarray(
      out.survivors), 1).reshape(-1), want, atol=1e-4)


def test_constant_head_prunes_the_allowed_rows_blind(setup):
  """A constant ĝ ranks nothing: whether the head says every row fails or passes, every group
  loses exactly its N₀ − N allowed rows, the same score-blind ones (the first ⌈ρN⌉ and last
  N − ⌈ρN⌉ kept); N = N₀ prunes nothing and is the unpruned sampler."""
  cfg, params, prompt, prompt_mask = setup
  key = jax.random.key(5)
  kw = _kw(cfg)
  for bias in (-20.0, 20.0):  # the head is an argument: one compilation for both
    out = arrol.arrol_generate(params, _head(cfg, bias=bias), prompt, prompt_mask, key, **kw)
    np.testing.assert_array_equal(out.survivors, np.tile([0, 1, 4, 5], (3, 1)))
    assert int(out.saved_slot_steps) > 0
  none = arrol.arrol_generate(params, _head(cfg, bias=-20.0), prompt, prompt_mask, key,
                              **_kw(cfg, keep=N0))
  assert int(none.pruned_live) == 0 and int(none.saved_slot_steps) == 0
  del kw["options"]
  full = sampling.generate(params, prompt, prompt_mask, key, num_samples=N0, row_keys=True, **kw)
  np.testing.assert_array_equal(none.samples.tokens, full.tokens)
  np.testing.assert_array_equal(none.samples.mask, full.mask)


def test_bad_options():
  with pytest.raises(ValueError, match=r"keeps N=5 of N0=4 rows"):
    arrol.ArrolOptions(oversample=4, keep=5, prune_at=2)
  with pytest.raises(ValueError, match=r"t_p=0 tokens; expected t_p >= 1"):
    arrol.ArrolOptions(oversample=4, keep=2, prune_at=0)
  with pytest.raises(ValueError, match=r"config.rl.arrol.rule='median': expected one of"):
    arrol.ArrolOptions(oversample=4, keep=2, prune_at=2, rule="median")
  with pytest.raises(ValueError, match=r"config.rl.arrol.rho=1.5"):
    arrol.ArrolOptions(oversample=4, keep=2, prune_at=2, rho=1.5)
