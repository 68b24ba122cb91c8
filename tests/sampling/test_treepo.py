"""TreePO segment-wise tree sampling: the tree's shape, shared prefixes, the trainer's log-probs,
and the tree advantages on its tree."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models, sampling
from rl_jax.rl import logprobs
from rl_jax.rl.advantages import tree as tree_lib
from rl_jax.sampling import treepo

G, T, SEG = 8, 12, 4
pytestmark = pytest.mark.usefixtures("fast_compiles")  # Compiling dominates these tiny shapes.


@pytest.fixture(scope="module")
def grown():
  cfg = models.ModelConfig(vocab_size=23, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           d_ff=64, max_seq_len=32)
  params = models.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(0)
  lengths = np.array([5, 2])
  p = 5
  prompt_mask = np.arange(p)[None, :] >= (p - lengths)[:, None]
  prompt = np.where(prompt_mask, rng.integers(3, cfg.vocab_size, (2, p)), 0).astype(np.int32)
  out = treepo.treepo_rollout(params, prompt, prompt_mask, jax.random.key(1), cfg=cfg,
                              strategy=sampling.Sampling(1.0),
                              options=treepo.TreePOOptions(segment_len=SEG, first_width=2,
                                                           branches=2),
                              group=G, max_new_tokens=T, eos_id=cfg.vocab_size)  # no EOS
  return cfg, params, prompt, prompt_mask, out


def test_tree_shape_and_shared_prefixes(grown):
  *_, out = grown
  # No EOS: 2 paths, then 4, then 8 over the 3 segments; every slot used, nothing filled.
  assert not out.filled.any() and out.mask.all()
  assert out.decode_tokens == 2 * (2 * SEG + 4 * SEG + 8 * SEG)  # vs 2 * G * T independent
  # Forks: 2 children at the first boundary (after SEG tokens), 4 at the second (2 SEG), a prompt.
  assert out.num_forks == 2 * (2 + 4)
  assert out.fork_prefix_tokens == 2 * (2 * SEG + 4 * 2 * SEG)
  tree = out.tree
  for b in range(2):
    rows = slice(b * G, (b + 1) * G)
    nodes = out.tree.node_of[rows]
    # Segment k of every row is a node of depth k + 1; 2, 4, 8 distinct nodes per segment.
    for k, width in enumerate((2, 4, 8)):
      seg_nodes = nodes[:, k * SEG:(k + 1) * SEG]
      assert (seg_nodes == seg_nodes[:, :1]).all()
      assert len(set(seg_nodes[:, 0])) == width
      assert (tree.depth[b][seg_nodes[:, 0]] == k + 1).all()
      # Rows in one node share that segment's tokens; a node's parent is the row's previous one.
      toks = out.tokens[rows][:, k * SEG:(k + 1) * SEG]
      for n in set(seg_nodes[:, 0]):
        same = seg_nodes[:, 0] == n
        assert (toks[same] == toks[same][0]).all()
        if k:
          assert (tree.parent[b][n] == nodes[same, (k - 1) * SEG]).all()
    assert tree.leaf_node[rows][:, 0].all() and tree.leaf_node[rows].sum(1).tolist() == [4] * G
  # Siblings differ (different slots, different keys).
  assert len({tuple(r) for r in out.tokens[:G]}) == G


def test_sampler_logp_equals_trainer_logp(grown):
  cfg, params, prompt, prompt_mask, out = grown
  lp = logprobs.completion_logprobs(cfg, params, jnp.repeat(prompt, G, 0),
                                    jnp.repeat(prompt_mask, G, 0), out.tokens, out.mask,
                                    temperature=1.0)
  np.testing.assert_allclose(out.logp, lp, atol=1e-5)


def test_tree_feeds_treepo_advantages(grown):
  *_, out = grown
  r = (np.arange(2 * G) % 3 == 0).astype(np.float32).reshape(2, G)
  t = out.tree
  tree = t.replace(leaf_node=t.leaf_node.reshape(2, G, -1), node_of=t.node_of.reshape(2, G, T))
  adv, w = tree_lib.treepo(jnp.asarray(r), jnp.ones((2, G), bool), tree=tree,
                                  mask=jnp.asarray(out.mask.reshape(2, G, T)), whiten=False)
  adv = np.asarray(adv)
  assert np.asarray(w).all() and np.isfinite(adv).all()
  # Leaf 0 of prompt 0 (r = 1): depths 0..3 with subgroups of 8, 4, 2 leaves (its own leaf node
  # has one leaf and is not recorded): mean of r - V over the recorded nodes.
  inc = t.leaf_node[0]
  want = []
  for n in np.flatnonzero(inc):
    below = t.leaf_node[:G, n]
    if t.depth[0][n] == 0 or below.sum() > 1:
      want.append(r[0, 0] - r[0][below].mean())
  np.testing.assert_allclose(adv[0, 0], np.mean(want), atol=1e-6)


def test_options_validation():
  with pytest.raises(ValueError, match="config.rl.treepo.branches must be >= 1"):
    treepo.TreePOOptions(branches=0)


def test_treepo_rollout_mode_through_rl_inputs(smoke_config, tmp_path):
  """config.rl.rollout='treepo': the RL batch carries the tree and the 'treepo' advantage runs."""
  from rl_jax.rollout import checks, collect  # pylint: disable=g-import-not-at-top
  from rl_jax.rollout.requests import StepContext  # pylint: disable=g-import-not-at-top
  from rl_jax import experiment  # pylint: disable=g-import-not-at-top
  from rl_jax.train import phases, rl_inputs  # pylint: disable=g-import-not-at-top
  from rl_jax.train import hyper as hyper_lib  # pylint: disable=g-import-not-at-top
  smoke_config.rl.update(rollout="treepo", advantage="treepo")
  smoke_config.rl.treepo.update(segment_len=2, first_width=2, branches=2)
  checks.check_config(smoke_config)
  exp = experiment.build(smoke_config, str(tmp_path))
  params = phases.init_params(exp)
  batch, rewards, metrics = collect.rollout(StepContext(exp, params, 0))
  rows, t = smoke_config.rl.prompts_per_step * smoke_config.rl.group_size, exp.max_new_tokens
  assert batch.tokens.shape == (rows, t) and batch.tree.node_of.shape == (rows, t)
  assert metrics["rollout_tokens"] <= metrics["batch_tokens"]  # Shared prefixes decoded once.
  adv, weight, _ = rl_inputs.advantages(jnp.asarray(rewards), batch,
                                        hyper_lib.hyper_from_config(smoke_config))
  assert adv.shape == (rows, t) and np.isfinite(np.asarray(adv)).all()
  smoke_config.rl.dynamic_sampling = True
  with pytest.raises(ValueError, match="not supported with rollout='treepo'"):
    checks.check_config(smoke_config)


def test_engine_sweep_applies_to_the_ladder_config():
  from experiments.configs import ladder  # pylint: disable=g-import-not-at-top
  from experiments.sweeps import engine  # pylint: disable=g-import-not-at-top
  from rl_jax.rollout import checks  # pylint: disable=g-import-not-at-top
  runs = engine.get_sweep()
  assert len(runs) == 3 * len(engine.VARIANTS)
  for run in runs:
    config = ladder.get_config()
    config.update_from_flattened_dict({k: v for k, v in run.items() if k != "name"})
    checks.check_config(config)
    assert (config.rl.rollout == "treepo") == run["name"].startswith("treepo")


def test_budgets_grow_an_n_leaf_tree(grown):
  """budgets (ragged groups): prompt 0 with the full budget of 8 is the unbudgeted tree exactly;
  prompt 1 with 3 leaves: 2 paths, then path 0 forks into the one free slot, then no slot is
  free: 2 + 3 + 3 segments decoded, slots 3..7 unused (filled copies of its first leaf)."""
  cfg, params, prompt, prompt_mask, full = grown
  out = treepo.treepo_rollout(params, prompt, prompt_mask, jax.random.key(1), cfg=cfg,
                              strategy=sampling.Sampling(1.0),
                              options=treepo.TreePOOptions(segment_len=SEG, first_width=2,
                                                           branches=2),
                              group=G, max_new_tokens=T, eos_id=cfg.vocab_size,
                              budgets=np.array([G, 3]))
  np.testing.assert_array_equal(out.tokens[:G], full.tokens[:G])
  np.testing.assert_array_equal(out.tree.node_of[:G], full.tree.node_of[:G])
  assert out.decode_tokens == 14 * SEG + 8 * SEG
  np.testing.assert_array_equal(out.filled, np.arange(2 * G) >= G + 3)
  nodes = out.tree.node_of[G:G + 3]
  assert len({tuple(r) for r in nodes}) == 3 and (nodes[0, :SEG] == nodes[2, :SEG]).all()
  assert (nodes[0, SEG:] != nodes[2, SEG:]).all()  # Slot 2 forked from slot 0 after segment 0.
  with pytest.raises(ValueError, match=r"budgets must be 2 leaf counts in \[1, group=8\]"):
    treepo.treepo_rollout(params, prompt, prompt_mask, jax.random.key(1), cfg=cfg,
                          strategy=sampling.Sampling(1.0), options=treepo.TreePOOptions(),
                          group=G, max_new_tokens=T, eos_id=cfg.vocab_size,
                          budgets=np.array([0, 3]))


NEWLINE = (5, 6)  # the tiny model's "newline" tokens (any ids: a random policy draws them)


@pytest.fixture(scope="module")
def lines(grown):
  """segment='newline' on the same policy and prompts, EOS = 3, prompt 1 with a budget of 5."""
  cfg, params, prompt, prompt_mask, _ = grown
  out = treepo.treepo_rollout(params, prompt, prompt_mask, jax.random.key(2), cfg=cfg,
                              strategy=sampling.Sampling(1.0),
                              options=treepo.TreePOOptions(first_width=2, branches=2,
                                                           segment="newline",
                                                           delimiters=NEWLINE),
                              group=G, max_new_tokens=T, eos_id=3, budgets=np.array([G, 5]))
  return cfg, params, prompt, prompt_mask, out


def test_newline_segments_end_at_newline_tokens(lines):
  """Every segment (a node's tokens on a row) ends with a newline token, or with EOS or at the
  length limit on its path's last segment; rows that share a node share its tokens; the tree
  branches somewhere (more than first_width distinct paths)."""
  *_, out = lines
  ends = 0
  for row in range(2 * G):
    if out.filled[row]:
      continue
    n = int(out.mask[row].sum())
    assert out.mask[row, :n].all() and not out.mask[row, n:].any()
    nodes, toks = out.tree.node_of[row, :n], out.tokens[row, :n]
    cuts = np.flatnonzero(np.diff(nodes)) + 1  # first token of each later segment
    for start, stop in zip(np.r_[0, cuts], np.r_[cuts, n]):
      last = toks[stop - 1]
      assert last in NEWLINE or (stop == n and (last == 3 or n == T)), (row, toks, nodes)
      assert not np.isin(toks[start:stop - 1], NEWLINE).any()  # no newline inside a segment
      ends += last in NEWLINE
    for other in range(2 * G):  # a shared node holds the same tokens at the same positions
      same = (out.tree.node_of[other] == nodes[0]) & out.mask[other]
      if other // G == row // G and same.any():
        np.testing.assert_array_equal(out.tokens[other][same], toks[nodes == nodes[0]])
  assert ends > 4
  for b in range(2):
    rows = slice(b * G, (b + 1) * G)
    assert len({tuple(r) for r in out.tree.node_of[rows][~out.filled[rows]]}) > 2
  assert out.filled[G + 5:].all() and not out.filled[:2].any()  # budget 5: slots 5..7 copies
  # Every used slot beyond the first_width = 2 paths of a prompt is a fork, after >= 1 token.
  assert out.num_forks == int((~out.filled).sum()) - 2 * 2 > 0
  assert out.fork_prefix_tokens >= out.num_forks


def test_newline_sampler_logp_equals_trainer_logp(lines):
  """Each slot's cache has holes where it waited for the others: its log-probs still equal a
  full forward pass of the prompt and its completion."""
  cfg, params, prompt, prompt_mask, out = lines
  lp = logprobs.completion_logprobs(cfg, params, jnp.repeat(prompt, G, 0),
                                    jnp.repeat(prompt_mask, G, 0), out.tokens, out.mask,
                                    temperature=1.0)
  np.testing.assert_allclose(out.logp, np.where(out.mask, lp, 0.0), atol=1e-5)


def test_newline_decodes_each_shared_token_once(lines):
  *_, out = lines
  distinct = set()
  for row in np.flatnonzero(~out.filled):
    b = row // G
    for t in np.flatnonzero(out.mask[row]):
      distinct.add((b, int(out.tree.node_of[row, t]), int(t)))
  assert out.decode_tokens == len(distinct)


def test_segment_option_errors():
  with pytest.raises(ValueError, match=r"config.rl.treepo.segment='line'; expected one of "
                     r"\['fixed', 'newline'\]"):
    treepo.TreePOOptions(segment="line")
  with pytest.raises(ValueError, match="segment='newline' needs the newline token ids"):
    treepo.treepo_rollout(None, np.ones((1, 2), np.int32), np.ones((1, 2), bool),
                          jax.random.key(0), cfg=None, strategy=sampling.Sampling(1.0),
                          options=treepo.TreePOOptions(segment="newline"), group=2,
                          max_new_tokens=4, eos_id=1)


def test_newline_segments_through_the_engine(tmp_path):
  """rollout='treepo' with treepo.segment='newline' on the ladder's tokenizer: the engine reads
  the newline ids from the tokenizer, and every segment of the batch's tree ends at one of them
  (or at EOS or the length limit)."""
  from experiments.configs import ladder  # pylint: disable=g-import-not-at-top
  from rl_jax import experiment  # pylint: disable=g-import-not-at-top
  from rl_jax.rollout import checks, collect, engines  # pylint: disable=g-import-not-at-top
  from rl_jax.rollout.requests import StepContext  # pylint: disable=g-import-not-at-top
  from rl_jax.train import phases  # pylint: disable=g-import-not-at-top
  config = ladder.get_config("smoke")
  config.rl.update(rollout="treepo", advantage="treepo")
  config.rl.treepo.segment = "newline"
  checks.check_config(config)
  exp = experiment.build(config, str(tmp_path))
  newline = engines.newline_ids(exp.tokenizer)
  assert newline and all("\n" in exp.tokenizer.decode([i]) for i in newline)
  batch, _, metrics = collect.rollout(StepContext(exp, phases.init_params(exp), 0))
  tokens, mask, node_of = (np.asarray(x) for x in (batch.tokens, batch.mask, batch.tree.node_of))
  for row in range(len(tokens)):
    n = int(mask[row].sum())
    cuts = np.flatnonzero(np.diff(node_of[row, :n])) + 1
    for stop in np.r_[cuts, n]:
      last = tokens[row, stop - 1]
      assert last in newline or (stop == n and (last == exp.tokenizer.eos_id
                                                or n == exp.max_new_tokens))
  assert metrics["rollout_tokens"] <= metrics["batch_tokens"]
  assert metrics["tree_forks"] >= 1 and metrics["tree_fork_prefix_mean"] >= 1
  config.rl.treepo.segment = "lines"
  with pytest.raises(ValueError, match=r"config.rl.treepo.segment='lines'"):
    checks.check_config(config)
