"""LATR and EPTree samplers: fork == full forward, sampler logp == trainer logp, tree bookkeeping."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models, sampling
from rl_jax.sampling import eptree, latr
import jitted_models  # tests/jitted_models.py

EOS = 1
# Compiling dominates these tiny shapes; the comparisons hold with or without XLA's optimizations.
pytestmark = pytest.mark.usefixtures("fast_compiles")


@pytest.fixture(scope="module")
def setup():
  cfg = models.ModelConfig(vocab_size=19, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           d_ff=64, max_seq_len=64, tie_embeddings=False)
  params = jitted_models.init_params(cfg, jax.random.key(0))
  # Flatten the logits so that the top two tokens are often close (branching happens).
  params = jax.tree_util.tree_map(lambda x: x, params)
  params["lm_head"] = params["lm_head"] * 0.3
  rng = np.random.default_rng(0)
  lengths = np.array([4, 2, 3])
  p = 4
  prompt_mask = np.arange(p)[None, :] >= (p - lengths)[:, None]
  prompt = np.where(prompt_mask, rng.integers(3, cfg.vocab_size, (3, p)), 0).astype(np.int32)
  return cfg, params, prompt, prompt_mask


def _trainer_logp(cfg, params, prompt, prompt_mask, tokens, mask, temperature):
  return jitted_models.completion_logprobs(cfg, params, jnp.asarray(prompt),
                                           jnp.asarray(prompt_mask), jnp.asarray(tokens),
                                           jnp.asarray(mask), temperature=temperature)


def test_fork_slots_assigns_candidates_to_free_slots_in_order():
  cand = jnp.array([[True, False, True, False], [True, True, True, True]])
  active = jnp.array([[True, False, True, False], [True, False, True, True]])
  src, new = latr.fork_slots(cand, active)
  # Root 0: candidates rows 0 and 2 -> free slots 1 and 3. Root 1: one free slot (1) for row 0.
  np.testing.assert_array_equal(src, [[0, 0, 2, 2], [0, 0, 2, 3]])
  np.testing.assert_array_equal(new, [[False, True, False, True], [False, True, False, False]])


def test_child_next_token_logits_equal_full_forward_right_after_fork(setup):
  cfg, params, prompt, prompt_mask = setup
  b, p = prompt.shape
  cache = models.init_cache(cfg, b, p + 4)
  logits, cache = jitted_models.prefill(cfg, params, cache, jnp.asarray(prompt),
                                        jnp.asarray(prompt_mask))
  first = jnp.argmax(logits, -1)
  _, cache = jitted_models.decode_step(cfg, params, cache, first)
  # Fork: row 2 is a copy of row 0 (src), then both decode a different next token.
  src = jnp.array([0, 1, 0])
  cache = cache.take_rows(src)
  nxt = jnp.array([5, 6, 7])
  child_logits, _ = jitted_models.decode_step(cfg, params, cache, nxt)
  seq = jnp.concatenate([jnp.asarray(prompt)[src], first[src][:, None], nxt[:, None]], axis=1)
  seq_mask = jnp.concatenate([jnp.asarray(prompt_mask)[src], jnp.ones((b, 2), bool)], axis=1)
  full = jitted_models.forward(cfg, params, seq, seq_mask)[:, -1]
  np.testing.assert_allclose(child_logits, full, atol=1e-4)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_latr_logp_equals_trainer_and_forks_happen(setup, temperature):
  cfg, params, prompt, prompt_mask = setup
  opts = latr.LatrOptions(tau_abs=0.0, tau_rel=1.0, windows=(2, 3), sm_threshold=None,
                          rl_threshold=0.99)
  k, t = 4, 8
  out = latr.latr_generate(params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                           jax.random.key(1), cfg=cfg, strategy=sampling.Sampling(temperature),
                           options=opts, num_slots=k, max_new_tokens=t, eos_id=EOS)
  assert out.tokens.shape == (3 * k, t)
  assert int(out.num_forks) >= 3 * (k - 1)  # every root fills its slots at the first step
  rows = np.repeat(np.arange(3), k)
  ref = _trainer_logp(cfg, params, prompt[rows], prompt_mask[rows], out.tokens, out.mask,
                      temperature)
  np.testing.assert_allclose(out.logp, ref, atol=1e-5)
  # Children share their parent's prefix up to their birth step.
  tok, par, birth = map(np.asarray, (out.tokens, out.parent, out.birth))
  for r in range(3 * k):
    if par[r] != r and not out.filled[r]:
      assert r // k == par[r] // k
  assert int(out.decode_tokens) <= int(np.asarray(out.mask).sum())


def test_latr_budgets_limit_each_root(setup):
  """budgets [4, 1, 2] of K = 4 slots (ragged groups): a root never uses a slot past its budget
  (no tokens there, never filled), every slot within it holds a row (fill), and the live-row
  count `decode_tokens` covers only rows within the budgets."""
  cfg, params, prompt, prompt_mask = setup
  opts = latr.LatrOptions(tau_abs=0.0, tau_rel=1.0, windows=(2, 3), sm_threshold=None,
                          rl_threshold=0.99)
  budgets = np.array([4, 1, 2])
  out = latr.latr_generate(params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                           jax.random.key(1), cfg=cfg, strategy=sampling.Sampling(1.0),
                           options=opts, num_slots=4, max_new_tokens=8, eos_id=EOS,
                           budgets=jnp.asarray(budgets))
  allowed = np.tile(np.arange(4), 3) < np.repeat(budgets, 4)
  mask, filled = np.asarray(out.mask), np.asarray(out.filled)
  assert not mask[~allowed].any() and not filled[~allowed].any()
  assert mask[allowed].any(axis=1).all()
  assert int(out.num_forks) >= 3 + 1  # root 0 fills its 3 free slots, root 2 its 1.
  assert int(out.decode_tokens) <= int(mask[allowed & ~filled].sum()) + int(out.num_pruned) * 8


def test_latr_without_branching_is_greedy_then_counts_every_token(setup):
  cfg, params, prompt, prompt_mask = setup
  opts = latr.LatrOptions(tau_abs=1.0, tau_rel=0.0, windows=(2,))
  out = latr.latr_generate(params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                           jax.random.key(1), cfg=cfg, strategy=sampling.Sampling(1.0),
                           options=opts, num_slots=2, max_new_tokens=6, eos_id=EOS)
  greedy = sampling.generate(params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                             jax.random.key(0), cfg=cfg, strategy=sampling.GREEDY,
                             max_new_tokens=6, eos_id=EOS)
  assert int(out.num_forks) == 0
  # No fork: slot 1 of every root is filled with slot 0, which decoded greedily in the tree phase
  # until the exit rule (the roots were full from the start) switched it to sampling.
  np.testing.assert_array_equal(np.asarray(out.filled), np.tile([False, True], 3))
  np.testing.assert_array_equal(out.tokens[0::2], out.tokens[1::2])
  assert int(out.decode_tokens) == int(np.asarray(out.mask)[0::2].sum())
  del greedy


def test_latr_prunes_children_that_copy_their_parent(setup):
  cfg, params, prompt, prompt_mask = setup
  # Every child continues greedily like its parent after the fork, and ROUGE-L over a window of
  # 3 tokens (the divergent one plus 2 shared ones) is 2/3 > 0.5: pruned unless exempt.
  opts = latr.LatrOptions(tau_abs=0.0, tau_rel=1.0, windows=(3,), sm_threshold=None,
                          rl_threshold=0.5, thres_init=2.0, fill=False)
  kw = dict(cfg=cfg, strategy=sampling.Sampling(1.0), options=opts, num_slots=3,
            max_new_tokens=8, eos_id=-1)
  out = latr.latr_generate(params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                           jax.random.key(1), **kw)
  assert int(out.num_pruned) > 0
  exempt = jnp.ones((cfg.vocab_size,), bool)
  kept = latr.latr_generate(params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                            jax.random.key(1), exempt_tokens=exempt, **kw)
  assert int(kept.num_pruned) == 0


def test_latr_options_validate():
  with pytest.raises(ValueError, match="windows"):
    latr.LatrOptions(windows=())
  with pytest.raises(ValueError, match="tau_abs"):
    latr.LatrOptions(tau_abs=1.5)


def _eptree(setup, opts: eptree.EPTreeOptions, t: int, *, seed: int, eos_id: int):
  """EPTree on the fixture's 3 prompts at temperature 1 with T = t new tokens."""
  cfg, params, prompt, prompt_mask = setup
  return eptree.eptree_rollout(params, prompt, prompt_mask, jax.random.key(seed), cfg=cfg,
                               strategy=sampling.Sampling(1.0), options=opts, max_new_tokens=t,
                               eos_id=eos_id)


def _assert_trainer_logp(setup, out: eptree.EPTreeRollout, leaves: int):
  """The leaves' sampler log-probs equal a full forward pass over each leaf's tokens."""
  cfg, params, prompt, prompt_mask = setup
  rows = np.repeat(np.arange(3), leaves)
  ref = _trainer_logp(cfg, params, prompt[rows], prompt_mask[rows], out.tokens, out.mask, 1.0)
  np.testing.assert_allclose(out.logp, ref, atol=1e-5)


@pytest.mark.parametrize("rounds", [1, 2])
def test_eptree_leaves_logp_and_tree(setup, rounds):
  opts = eptree.EPTreeOptions(num_chains=2, forks_per_round=1, rounds=rounds, branches=2)
  t = 7
  out = _eptree(setup, opts, t, seed=3, eos_id=-1)
  lv = opts.leaves
  assert lv == 2 * (1 + rounds * 2)
  assert out.tokens.shape == (3 * lv, t)
  # Continuations reuse the forked row's cache; their log-probs equal a full forward pass.
  _assert_trainer_logp(setup, out, lv)
  tree = out.tree
  parent, depth = np.asarray(tree.parent), np.asarray(tree.depth)
  for r in range(3 * lv):
    b = r // lv
    path = np.flatnonzero(tree.leaf_node[r])
    assert 0 in path
    nodes = tree.node_of[r][out.mask[r]]
    # Segments are contiguous, go down the tree one level at a time, and their nodes are on the
    # row's path.
    changes = nodes[np.r_[True, nodes[1:] != nodes[:-1]]]
    assert len(set(changes.tolist())) == len(changes)
    for a, c in zip(changes[:-1], changes[1:]):
      assert parent[b, c] == a and depth[b, c] == depth[b, a] + 1
    assert set(path.tolist()) == set(changes.tolist()) | {0} | {
        int(parent[b, changes[0]])} - {-1}
    # Leaves sharing a node share its tokens.
  for b in range(3):
    rs = np.arange(b * lv, (b + 1) * lv)
    for n in range(1, opts.max_nodes):
      on = [r for r in rs if (tree.node_of[r] == n).any()]
      if len(on) > 1:
        cols = tree.node_of[on[0]] == n
        for r in on[1:]:
          np.testing.assert_array_equal(tree.node_of[r] == n, cols)
          np.testing.assert_array_equal(out.tokens[r][cols], out.tokens[on[0]][cols])
  # Leaves of a fork share the prefix before the fork point, then differ in general.
  assert out.decode_tokens < int(out.mask.sum()) + 3 * lv


def test_select_leaves_keeps_a_correct_leaf():
  rng = np.random.default_rng(0)
  rewards = np.zeros(12)
  rewards[5] = 1.0  # prompt 0 has one correct leaf out of 6
  for _ in range(20):
    rows = eptree.select_leaves(rewards, 6, 2, rng)
    assert rows.shape == (4,) and 5 in rows
    assert set(rows[2:]) <= set(range(6, 12))
  with pytest.raises(ValueError, match="group_size"):
    eptree.select_leaves(rewards, 6, 7, rng)


def test_eptree_fork_points_leave_min_tokens(setup):
  t = 8
  opts = eptree.EPTreeOptions(num_chains=2, forks_per_round=2, rounds=1, branches=1,
                              min_tokens_left=5)
  out = _eptree(setup, opts, t, seed=4, eos_id=2)
  forks = out.fork_pos.reshape(3, opts.leaves)[:, opts.num_chains:]
  assert forks.size and (forks <= t - 5).all()
  with pytest.raises(ValueError, match="min_tokens_left"):
    eptree.EPTreeOptions(min_tokens_left=-1)


def test_eptree_fork_points_leave_a_min_prefix(setup):
  t = 10
  opts = eptree.EPTreeOptions(num_chains=1, forks_per_round=3, rounds=1, branches=1,
                              min_prefix_fraction=0.5)
  out = _eptree(setup, opts, t, seed=5, eos_id=-1)
  chain_len = out.mask.reshape(3, opts.leaves, t)[:, 0].sum(-1)  # no EOS: t tokens each
  forks = out.fork_pos.reshape(3, opts.leaves)[:, 1:]
  assert (chain_len == t).all() and forks.size
  assert (forks >= np.ceil(0.5 * chain_len)[:, None]).all()
  # The three fork points of a prompt are its chain's largest -log p in positions 5..9.
  logp = out.logp.reshape(3, opts.leaves, t)[:, 0]
  for b in range(3):
    want = np.sort(np.argsort(logp[b, 5:], kind="stable")[:3] + 5)
    np.testing.assert_array_equal(np.sort(forks[b]), want)
  # Continuations decode only the steps the earliest fork point needs (8 of 10 here); the leaves'
  # log-probs still equal the trainer's.
  _assert_trainer_logp(setup, out, opts.leaves)
  # No EOS: 3 chains of t tokens, and each continuation decodes t - f tokens plus its re-fed one.
  assert out.decode_tokens == 3 * t + int((t - forks + 1).sum())
  with pytest.raises(ValueError, match="min_prefix_fraction"):
    eptree.EPTreeOptions(min_prefix_fraction=1.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eptree_refork_of_a_prompt_fork_keeps_the_prompt(setup, seed):
  """Forks at t = 0 re-feed the last prompt token into a new slot; a later round that forks such a
  continuation again must still attend to it (a regression: it was dropped)."""
  t = 5
  # Fork points only at t <= 1, three rounds: continuations forked at t = 0 are forked again.
  opts = eptree.EPTreeOptions(num_chains=1, forks_per_round=1, rounds=3, branches=2,
                              min_tokens_left=t - 1)
  out = _eptree(setup, opts, t, seed=seed, eos_id=-1)
  assert (np.asarray(out.fork_pos) == 0).any()
  _assert_trainer_logp(setup, out, opts.leaves)


def test_eptree_cache_may_exceed_max_seq_len_when_positions_fit(setup):
  """P + (rounds + 1) x T cache slots > max_seq_len, P + T <= max_seq_len: runs, logp still equal."""
  cfg, params, prompt, prompt_mask = setup
  short = dataclasses.replace(cfg, max_seq_len=12)  # P = 4, T = 7: 11 positions, 18 slots.
  opts = eptree.EPTreeOptions(num_chains=2, forks_per_round=1, rounds=1, branches=2)
  out = _eptree((short, params, prompt, prompt_mask), opts, 7, seed=3, eos_id=-1)
  _assert_trainer_logp(setup, out, opts.leaves)
  with pytest.raises(ValueError, match="max_new_tokens 9 exceeds ModelConfig.max_seq_len=12"):
    _eptree((short, params, prompt, prompt_mask), opts, 9, seed=3, eos_id=-1)
