"""ECHO (docs/algorithms.md §3.5): its rules on worked numbers, where the sampler branches and
prunes (against a plain transcription of the reference's `plan_branch` / `should_prune` over the
recorded step statistics), the trainer's log-probs, the tree for the tree advantages, bad
options, and the rollout mode end to end."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models, sampling
from rl_jax.rl import logprobs
from rl_jax.rl.advantages import tree as tree_lib
from rl_jax.sampling import echo, echo_rules

G, T = 4, 12
pytestmark = pytest.mark.usefixtures("fast_compiles")  # Compiling dominates these tiny shapes.
# Thresholds inside the tiny policy's range of statistics (H ~ 1.5-2.7, C ~ 2.4-3.05), so the
# branch rule fires somewhere for some prompts; pruning off (`pruned` below turns it on).
OPTS = echo.EchoOptions(min_depth=2, entropy_high=2.0, entropy_low=1.0, branch_threshold=2.95,
                        entropy_delta_threshold=0.2, prune=False)


def ref_windows(h, c, o):
  """(C^G, C^tail, ΔH) of one row's step statistics, by the definitions of §3.5."""
  g = [np.mean(c[max(0, t - o.group_window + 1):t + 1]) for t in range(len(h))]
  tail = [np.mean(c[max(0, t - o.tail_window + 1):t + 1]) for t in range(len(h))]
  dh = [h[t] - (np.mean(h[max(0, t - o.entropy_window):t]) if t else h[t])
        for t in range(len(h))]
  return np.array(g), np.array(tail), np.array(dh)


def ref_plan_branch(h, c, o):
  """(step, width) of the first step the branch rule fires (None if none, or if w <= 1 there)."""
  g, _, dh = ref_windows(h, c, o)
  for t in range(o.min_depth, len(h)):
    if h[t] >= o.entropy_high and g[t] <= o.branch_threshold and dh[t] >= o.entropy_delta_threshold:
      raw = (o.min_branches + o.alpha * (h[t] - o.entropy_low) / (o.entropy_high - o.entropy_low)
             - o.beta * (g[t] - o.branch_threshold) / abs(o.branch_threshold))
      w = int(np.clip(np.round(raw), o.min_branches, o.max_branches))
      return (t, w) if w > 1 else None
  return None


def ref_should_prune(h, c, o):
  """First step at which a row is pruned (None: never)."""
  g, tail, dh = ref_windows(h, c, o)
  run_min, declines, rises = np.inf, 0, 0
  for t in range(len(h)):
    run_min = min(run_min, g[t])
    declines = declines + 1 if t and tail[t] < tail[t - 1] else 0
    rises = rises + 1 if dh[t] > 0 else 0
    if (run_min < o.prune_threshold
        or (declines >= o.tail_decline_steps and tail[t] <= o.tail_threshold)
        or (rises >= o.delta_rise_steps and dh[t] > o.delta_upper)):
      return t
  return None


def test_rules_on_worked_numbers():
  o = echo.EchoOptions()
  # §3.5: H = 3.5, C^G = 1.0 -> w = round(1 + 2·2.5/2.5 + 0.2/1.2) = round(3.1667) = 3.
  assert int(echo_rules.branch_width(jnp.array([3.5]), jnp.array([1.0]), o)[0]) == 3
  assert int(echo_rules.branch_width(jnp.array([1.0]), jnp.array([3.0]), o)[0]) == 1  # clipped
  fires = echo_rules.wants_branch(jnp.array([3.5, 3.4, 3.5, 3.5]), jnp.array([1.2, 1.0, 1.3, 1.0]),
                                  jnp.array([0.2, 0.5, 0.5, 0.1]), 4, o)
  assert fires.tolist() == [True, False, False, False]
  assert not bool(echo_rules.wants_branch(3.6, 1.0, 0.5, 3, o))  # before min_depth
  # Uniform over 5 tokens: H = ln 5, C = -mean log(1/5) = ln 5 ('neg_logp') or 1/5 ('prob').
  h, c, top = echo_rules.step_stats(jnp.zeros((1, 5)), o)
  np.testing.assert_allclose([h[0], c[0]], [np.log(5)] * 2, rtol=1e-5)
  assert echo_rules.step_stats(jnp.zeros((1, 5)), dataclasses.replace(o, confidence="prob"))[
      1][0] == pytest.approx(0.2)
  # The module docstring's bound: C('neg_logp') >= ln 5 whatever the logits.
  _, c, _ = echo_rules.step_stats(3 * jax.random.normal(jax.random.key(0), (64, 100)), o)
  assert float(c.min()) >= np.log(5) - 1e-5
  # Windows: ΔH at t = 5 over the 4 steps before it; C^G over the last 4 steps.
  hb = jnp.array([[1.0, 2, 3, 4, 5, 6]])
  g, tail, dh = echo_rules.window_stats(hb, hb, 5, o)
  np.testing.assert_allclose([g[0], tail[0], dh[0]], [4.5, 3.5, 2.5])
  assert float(echo_rules.window_stats(hb, hb, 0, o)[2][0]) == 0.0
  # Children: the best tokens other than the sampled one.
  top = jnp.array([[5, 3, 7, 1], [5, 3, 7, 1]])
  assert echo_rules.child_tokens(top, jnp.array([3, 9]), 2).tolist() == [[5, 7], [5, 3]]


@pytest.mark.parametrize("group, tail, dh, want", [
    ([1.0, 0.9, 0.35, 0.5], [2, 2, 2, 2], [0, 0, 0, 0], 2),              # running min < 0.4
    ([2, 2, 2, 2], [2.0, 1.5, 1.2, 0.9], [0, 0, 0, 0], 3),                # 3 declines, <= 1.0
    ([2, 2, 2, 2], [2.0, 1.5, 1.2, 1.1], [0, 0, 0, 0], None),             # ... but above 1.0
    ([2, 2, 2, 2], [2, 2, 2, 2], [0.1, 0.2, 0.6, 0.0], 2),                # 3 rises, last > 0.5
    ([2, 2, 2, 2], [2, 2, 2, 2], [0.1, -0.1, 0.6, 0.7], None),            # the run was broken
])
def test_prune_rule_on_constructed_statistics(group, tail, dh, want):
  o, state, got = echo.EchoOptions(), echo_rules.PruneState.init(1), None
  for t in range(4):
    state, prune = echo_rules.prune_update(state, jnp.array([group[t]], jnp.float32),
                                           jnp.array([tail[t]], jnp.float32),
                                           jnp.array([dh[t]], jnp.float32), o)
    if bool(prune[0]) and got is None:
      got = t
  assert got == want


def test_assign_children_fills_free_slots_in_order():
  req = jnp.zeros((1, 4, 2), bool).at[0, 0, :].set(True).at[0, 2, 0].set(True)
  src, child_j, new = echo.assign_children(req, jnp.array([[False, True, False, True]]))
  # Requests (0, 0), (0, 1), (2, 0) -> free slots 1, 3; the third drops.
  assert src.tolist() == [[0, 0, 2, 0]] and child_j.tolist() == [[0, 0, 0, 1]]
  assert new.tolist() == [[False, True, False, True]]


@pytest.fixture(scope="module")
def grown():
  cfg = models.ModelConfig(vocab_size=23, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           d_ff=64, max_seq_len=32)
  params = models.init_params(cfg, jax.random.key(0))
  params["norm"]["weight"] = params["norm"]["weight"] * 6.0  # sharper, more varied steps
  rng = np.random.default_rng(0)
  lengths, p = np.array([5, 2]), 5
  prompt_mask = np.arange(p)[None, :] >= (p - lengths)[:, None]
  prompt = np.where(prompt_mask, rng.integers(3, cfg.vocab_size, (2, p)), 0).astype(np.int32)
  run = lambda o: jax.device_get(echo.echo_generate(
      params, prompt, prompt_mask, jax.random.key(1), cfg=cfg, strategy=sampling.Sampling(1.0),
      options=o, num_slots=G, max_new_tokens=T, eos_id=cfg.vocab_size))  # no EOS
  return cfg, params, prompt, prompt_mask, run, run(OPTS)


def _stats(out, row):
  m = out.mask[row]
  return out.stat_entropy[row][m], out.stat_conf[row][m]


def test_branches_where_the_rule_fires(grown):
  cfg, params, prompt, prompt_mask, _, out = grown
  fired = []
  for b in range(2):
    base = b * G
    plan = ref_plan_branch(*_stats(out, base), OPTS)
    kids = np.flatnonzero(out.is_child[base:base + G]) + base
    fired.append(plan)
    if plan is None:
      assert len(kids) == 0 and not out.branched[base]
      continue
    t, w = plan
    assert out.branched[base] and len(kids) == w - 1
    assert (out.birth[kids] == t).all() and (out.parent_slot[kids] == base).all()
    assert (out.tokens[kids, :t] == out.tokens[base, :t]).all()  # the shared prefix
    # The children's tokens at t: the policy's best tokens there other than the base row's own.
    seq = np.concatenate([prompt[b], out.tokens[base]])[None]
    mask = np.concatenate([prompt_mask[b], out.mask[base]])[None]
    logits = np.asarray(models.forward(cfg, params, jnp.asarray(seq), jnp.asarray(mask)))[0]
    best = [int(x) for x in np.argsort(-logits[prompt.shape[1] + t - 1])
            if x != out.tokens[base, t]][:w - 1]
    assert out.tokens[kids, t].tolist() == best
  # Non-trivial: one prompt branches after its first eligible step, one never does.
  assert fired[0] is not None and fired[0][0] > OPTS.min_depth and fired[1] is None
  # Tentative rows that no child claimed kept their fresh sample (no copies): all rows differ.
  assert len({tuple(r) for r in out.tokens}) == 2 * G


def test_sampler_logp_equals_trainer_logp(grown):
  cfg, params, prompt, prompt_mask, _, out = grown
  lp = logprobs.completion_logprobs(cfg, params, jnp.repeat(prompt, G, 0),
                                    jnp.repeat(prompt_mask, G, 0), out.tokens, out.mask,
                                    temperature=1.0)
  np.testing.assert_allclose(out.logp, np.where(out.mask, lp, 0.0), atol=2e-5)


def test_tree_feeds_tree_advantages(grown):
  *_, out = grown
  tree = echo.to_tree(out)
  n = echo.num_nodes(G)
  assert tree.parent.shape == tree.depth.shape == (2, n)
  assert tree.leaf_node.shape == (2 * G, n) and tree.node_of.shape == (2 * G, T)
  # Prompt 0: the base (slot 0) branched at t into 2 children (slots 1, 2); slot 3 is fresh.
  t = int(out.birth[1])
  assert out.is_child[:G].tolist() == [False, True, True, False]
  r = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]], np.float32)
  per_prompt = tree.replace(leaf_node=tree.leaf_node.reshape(2, G, n),
                            node_of=tree.node_of.reshape(2, G, T))
  adv, w = tree_lib.treerl_paper(jnp.asarray(r), jnp.ones((2, G), bool), tree=per_prompt,
                                        mask=jnp.asarray(out.mask.reshape(2, G, T)))
  adv = np.asarray(adv)
  assert adv.shape == (2, G, T) and np.asarray(w).all()
  # (GA + LA) / sqrt(|L|): V(root) = 1/2; shared prefix node: V = 1/3, 3 leaves; the base's
  # continuation V = 1, each child's V = 0 (parent: the prefix node); the fresh row V = 1.
  prefix = (-1 / 6 - 1 / 6) / np.sqrt(3)
  np.testing.assert_allclose(adv[0, 0], [prefix] * t + [0.5 + 2 / 3] * (T - t), atol=1e-5)
  for k in (1, 2):
    np.testing.assert_allclose(adv[0, k], [prefix] * t + [-0.5 - 1 / 3] * (T - t), atol=1e-5)
  np.testing.assert_allclose(adv[0, 3], [1.0] * T, atol=1e-6)
  # Prompt 1 never branched: four independent rows under the root (GRPO-like, unscaled).
  np.testing.assert_allclose(adv[1, :, 0], [1.5, -0.5, -0.5, -0.5], atol=1e-6)


def test_pruning_cuts_rows_where_the_rule_fires(grown):
  *_, run, out = grown
  # A running-min threshold just above the lowest final minimum of C^G among the rows whose
  # minimum comes after prompt 0's branch step (so the base row still branches there); the
  # entropy-spike rule off (it would prune the base row at its entropy jump, step 4).
  mins = np.array([ref_windows(*_stats(out, i), OPTS)[0].min() for i in range(2 * G)])
  t_branch = int(out.birth[1])
  early = ref_windows(*_stats(out, 0), OPTS)[0][:t_branch + 1].min()
  o = dataclasses.replace(OPTS, prune=True, delta_upper=10.0,
                          prune_threshold=float(np.sort(mins[mins < early])[0] + 1e-3))
  assert (ref_should_prune(*_stats(out, 0), o) or T) > t_branch
  cut = run(o)
  n_pruned = 0
  for i in range(2 * G):
    stop = ref_should_prune(*_stats(out, i), o)
    length = T if stop is None else stop + 1
    assert cut.mask[i].sum() == length and bool(cut.pruned[i]) == (stop is not None)
    n_pruned += stop is not None
    # Pruning cuts a row and changes nothing else: the unpruned run's row, truncated.
    np.testing.assert_array_equal(cut.tokens[i, :length], out.tokens[i, :length])
    np.testing.assert_allclose(cut.logp[i, :length], out.logp[i, :length], atol=1e-6)
  assert 0 < n_pruned < 2 * G and int(cut.num_pruned) == n_pruned
  assert cut.is_child.tolist() == out.is_child.tolist()
  assert int(cut.decode_tokens) == int(out.decode_tokens) - int((out.mask & ~cut.mask).sum())


def test_nested_branching_tree_invariants(grown):
  """[R] `nested`: children branch too. Every step passes the rule from step 2 with width 2, so
  per prompt row 0 forks at 2 into slot 1, that child at 3 into slot 2, its child at 4 into
  slot 3 (a row forks once): a chain of nested nodes, and the tree stays consistent."""
  from rl_jax.sampling import eptree  # pylint: disable=g-import-not-at-top
  *_, run, _ = grown
  o = dataclasses.replace(OPTS, entropy_high=0.5, entropy_low=0.0, branch_threshold=10.0,
                          entropy_delta_threshold=-10.0, max_branches=2, nested=True)
  out = run(o)
  tree = echo.to_tree(out)
  assert out.parent_slot.tolist() == [0, 0, 1, 2, 4, 4, 5, 6]
  assert out.birth.tolist() == [0, 2, 3, 4] * 2 and out.branched.tolist() == [1, 1, 1, 0] * 2
  prompt_of = np.repeat(np.arange(2), G)
  np.testing.assert_array_equal(
      tree.leaf_node, eptree.incidence(tree.parent, tree.node_of, out.mask, prompt_of))
  for b in range(2):
    rows = np.arange(b * G, (b + 1) * G)
    # Leaf depths: row 0 at 2 (prefix, continuation), its child 3, grandchild 4, then 4.
    assert [tree.depth[b, tree.node_of[r, -1]] for r in rows] == [2, 3, 4, 4]
    used = np.flatnonzero(tree.leaf_node[rows].any(0))
    assert len(used) == 1 + 1 + 2 * 3  # the prompt, the first prefix, 3 forks x 2 nodes
    for node in used[1:]:  # a node's depth is its parent's + 1; its rows share its tokens
      assert tree.depth[b, node] == tree.depth[b, tree.parent[b, node]] + 1
      at = tree.node_of[rows] == node
      through = rows[at.any(1)]
      cols = np.flatnonzero(at[at.any(1)][0])
      assert (out.tokens[through][:, cols] == out.tokens[through[0], cols]).all()


@pytest.mark.parametrize("field, value, match", [
    ("max_branches", 0, "config.rl.echo.max_branches=0: expected an integer >= 1"),
    ("confidence", "mean", "config.rl.echo.confidence='mean': expected one of"),
    ("entropy_low", 4.0, "config.rl.echo.entropy_high=3.5: expected more than entropy_low=4.0"),
    ("min_branches", 5, "config.rl.echo.min_branches=5: expected at most max_branches=4"),
    ("conf_top_k", 65, "config.rl.echo.conf_top_k=65: expected at most top_k=64"),
    ("branch_threshold", 0.0, "config.rl.echo.branch_threshold=0.0: expected a nonzero"),
])
def test_bad_options_raise_named_errors(field, value, match):
  with pytest.raises(ValueError, match=match):
    echo.EchoOptions(**{field: value})


def test_config_checks(smoke_config):
  from rl_jax.rollout import checks  # pylint: disable=g-import-not-at-top
  from rl_jax.train import config_check  # pylint: disable=g-import-not-at-top
  smoke_config.rl.rollout = "echo"
  config_check.check(smoke_config)  # the defaults are valid
  for field, value, match in (("top_k", 0, r"config.rl.echo.top_k=0: expected an integer >= 1"),
                              ("alpha", -1.0, r"config.rl.echo.alpha=-1.0: expected a finite"),
                              ("entropy_high", 0.5, "expected more than entropy_low=1.0"),
                              ("branch_roots", 4, "branch_roots=4: expected fewer than")):
    bad = smoke_config.copy_and_resolve_references()
    bad.rl.echo[field] = value
    with pytest.raises(config_check.ConfigError, match=match):
      config_check.check(bad)
  smoke_config.rl.dynamic_sampling = True
  with pytest.raises(ValueError, match="not supported with rollout='echo'"):
    checks.check_config(smoke_config)


def test_ladder_smoke_with_echo_rollouts(tmp_path):
  """`ladder.py:smoke --config.rl.rollout=echo --config.rl.advantage=treepo` end to end, cut to
  1 SFT and 1 RL step with 1 evaluation sample (thresholds that branch on the tiny policy)."""
  import json  # pylint: disable=g-import-not-at-top
  from experiments.configs import ladder  # pylint: disable=g-import-not-at-top
  from rl_jax.train import loop  # pylint: disable=g-import-not-at-top
  config = ladder.get_config("smoke")
  config.sft.steps = 1
  config.eval.num_samples = 1
  config.rl.update(rollout="echo", advantage="treepo", steps=1, eval_every=0)
  config.rl.echo.update(entropy_high=0.5, entropy_low=0.0, branch_threshold=10.0,
                        entropy_delta_threshold=-10.0, min_depth=2)
  summary = loop.run(config, str(tmp_path))
  assert 0.0 <= summary["rl_step_error_rate"] <= 1.0
  records = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  rl = [r for r in records if r["phase"] == "rl" and "tree_forks" in r]
  assert len(rl) == 1 and rl[0]["tree_forks"] > 0 and rl[0]["tree_branch_events"] > 0
  assert 0 < rl[0]["rollout_tokens"] < rl[0]["batch_tokens"]  # shared prefixes decoded once
