"""ECHO, entropy-confidence hybrid branching and pruning (docs/methods.md#echo,
docs/algorithms.md §3.5), in one jitted `lax.scan` over K = G slots per prompt.

In: B left-padded prompts, `EchoOptions` (the rules: `echo_rules`). Out: `EchoSamples` [B·K, T]
and the tree it grew (`to_tree` -> `types.Tree`). Slots 0 .. branch_roots − 1 may branch; the
others start as tentative fresh samples, and a branch's children overwrite tentative slots
(`opening.fork_rows`: the parent's buffers, statistics and KV-cache row), so every slot ends as
a leaf. Tokens are drawn with fold_in(rng, t); `logp` is under the temperature-scaled
distribution (the trainer's, a test). Tree: node 0 = the prompt, node 1 + k = slot k's first
segment; a branch ends the row's node and opens one for its continuation and one per child;
N = `num_nodes(K)` = 3K − 1 nodes per prompt. `decode_tokens`: tokens the final rows decoded
themselves (a shared prefix once).
"""

from __future__ import annotations

import functools

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rl_jax import models, parallel
from rl_jax.sampling import echo_rules as rules
from rl_jax.sampling import opening
from rl_jax.sampling.echo_rules import EchoOptions
from rl_jax.sampling.strategies import Sampling
from rl_jax.types import Tree

__all__ = ["EchoOptions", "EchoSamples", "echo_generate", "num_nodes", "to_tree"]


@flax.struct.dataclass
class EchoSamples:
  """ECHO output; rows [B·K], prompt b owning rows b·K … b·K + K − 1.

  Attributes:
    tokens, mask, logp, entropy: [B·K, T] as `decode.Samples`.
    stat_entropy, stat_conf: [B·K, T] the step statistics H_t, C_t (0 off the mask).
    node_parent, node_depth: [B, N] the tree's node table; leaf_node [B·K, N]; node_of [B·K, T].
    is_child: [B·K] the slot holds a branch; birth: its branch step; parent_slot: the row it
      forked from (itself otherwise). branched: the row branched. pruned: the row was pruned.
    decode_tokens, num_children, num_branch_events, num_pruned: [] int32 counters.
  """

  tokens: jax.Array
  mask: jax.Array
  logp: jax.Array
  entropy: jax.Array
  stat_entropy: jax.Array
  stat_conf: jax.Array
  node_parent: jax.Array
  node_depth: jax.Array
  leaf_node: jax.Array
  node_of: jax.Array
  is_child: jax.Array
  birth: jax.Array
  parent_slot: jax.Array
  branched: jax.Array
  pruned: jax.Array
  decode_tokens: jax.Array
  num_children: jax.Array
  num_branch_events: jax.Array
  num_pruned: jax.Array


def num_nodes(num_slots: int) -> int:
  """N = 1 + K + 2(K − 1): the prompt, each slot's first segment, and per branch one
  continuation plus its children (at most K − 1 children per prompt, each branch at least one)."""
  return 3 * num_slots - 1


def assign_children(req: jax.Array, free: jax.Array):
  """Children to free slots, per prompt.

  Args:
    req: [B, K, J] bool, row k asks for its j-th child.
    free: [B, K] bool, the slot may be claimed (tentative).

  Returns:
    src [B, K] int32 (the row each slot copies, itself unless it receives a child), child_j
    [B, K] int32 (which of its parent's candidates the child takes) and new [B, K] bool. The
    i-th request in (row, j) order goes to the i-th free slot in slot order; the rest drop.
  """
  b, k, j = req.shape
  flat = req.reshape(b, k * j)
  rank = jnp.cumsum(flat, axis=1) - 1
  order = jnp.argsort(~free, axis=1, stable=True)  # free slots first, in slot order
  ok = flat & (rank < free.sum(axis=1, keepdims=True))
  target = jnp.where(ok, jnp.take_along_axis(order, jnp.clip(rank, 0, k - 1), axis=1), k)
  row, which = jnp.arange(k * j) // j, jnp.arange(k * j) % j
  put = lambda init, v: jax.vmap(lambda x, tg: x.at[tg].set(v, mode="drop"))(init, target)
  src = put(jnp.broadcast_to(jnp.arange(k), (b, k)), row)
  child_j = put(jnp.zeros((b, k), jnp.int32), which)
  new = put(jnp.zeros((b, k), bool), True)
  return src.astype(jnp.int32), child_j.astype(jnp.int32), new


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "options", "num_slots",
                                             "max_new_tokens", "eos_id", "pad_id"))
def echo_generate(params, prompt: jax.Array, prompt_mask: jax.Array, rng: jax.Array, *,
                  cfg: models.ModelConfig, strategy: Sampling, options: EchoOptions,
                  num_slots: int, max_new_tokens: int, eos_id: int,
                  pad_id: int = 0) -> EchoSamples:
  """ECHO rollouts: `num_slots` leaves (K = G) for each of the B left-padded prompts [B, P]."""
  b, p = prompt.shape
  k, t_max, o = num_slots, max_new_tokens, options
  n, n_nodes, n_kids = b * k, num_nodes(num_slots), max(o.max_branches - 1, 1)
  logits, cache = opening.open_rows(cfg, params, prompt, prompt_mask, copies=k,
                                    cache_size=p + t_max)
  prompt_of = jnp.repeat(jnp.arange(b), k)
  slot = jnp.tile(jnp.arange(k), b)
  zf, zi = jnp.zeros((n, t_max), jnp.float32), jnp.zeros((n, t_max), jnp.int32)
  rows = parallel.shard_batch(dict(
      cache=cache, logits=logits, tokens=zi, mask=zi.astype(bool), logp=zf, entropy=zf, h=zf,
      c=zf, node_of=zi, own=zi.astype(bool), done=jnp.zeros((n,), bool),
      can_branch=slot < o.branch_roots, tentative=slot >= o.branch_roots,
      is_child=jnp.zeros((n,), bool), birth=jnp.zeros((n,), jnp.int32),
      parent_slot=jnp.arange(n, dtype=jnp.int32), branched=jnp.zeros((n,), bool),
      pruned=jnp.zeros((n,), bool), prune_state=rules.PruneState.init(n),
      cur=(1 + slot).astype(jnp.int32)))
  init = dict(  # the rows' state (batch-sharded) and the per-prompt tree tables and counters
      rows, node_parent=jnp.zeros((b * n_nodes,), jnp.int32),
      node_depth=jnp.zeros((b, n_nodes), jnp.int32).at[:, 1:k + 1].set(1).reshape(-1),
      n_used=jnp.full((b,), 1 + k, jnp.int32), num_children=jnp.zeros((), jnp.int32),
      num_branch_events=jnp.zeros((), jnp.int32), num_pruned=jnp.zeros((), jnp.int32))

  def step(c, t):
    live = ~c["done"]
    sampled = strategy.sample(c["logits"], jax.random.fold_in(rng, t))
    ent_s, conf_s, top_idx = rules.step_stats(c["logits"], o)
    h = c["h"].at[:, t].set(jnp.where(live, ent_s, 0.0))
    cb = c["c"].at[:, t].set(jnp.where(live, conf_s, 0.0))
    group, tail, dh = rules.window_stats(h, cb, t, o)
    ps, prune = rules.prune_update(c["prune_state"], group, tail, dh, o)
    ps = jax.tree_util.tree_map(lambda a, z: jnp.where(live, a, z), ps, c["prune_state"])
    prune = live & prune if o.prune else jnp.zeros((n,), bool)
    width = rules.branch_width(ent_s, group, o)
    # A row branches at most once, at the first step its rule fires (no branch there if w <= 1).
    fires = live & c["can_branch"] & rules.wants_branch(ent_s, group, dh, t, o) & ~prune
    want = fires & (width > 1)
    kids = rules.child_tokens(top_idx, sampled, n_kids)
    req = want[:, None] & (jnp.arange(n_kids) < (width - 1)[:, None])
    src, child_j, new = assign_children(req.reshape(b, k, n_kids),
                                        c["tentative"].reshape(b, k))
    src = (src + (jnp.arange(b) * k)[:, None]).reshape(n)
    child_j, new = child_j.reshape(n), new.reshape(n)

    # Tree nodes: a branching row opens 1 + (its children) nodes, in row order per prompt.
    got = jax.ops.segment_sum(new.astype(jnp.int32), src, n)
    event = got > 0
    need = jnp.where(event, 1 + got, 0).reshape(b, k)
    base = (c["n_used"][:, None] + jnp.cumsum(need, axis=1) - need).reshape(n)
    cur = c["cur"]
    kid_node = base[src] + 1 + child_j
    drop = b * n_nodes
    at_event = jnp.where(event & (base < n_nodes), prompt_of * n_nodes + base, drop)
    at_kid = jnp.where(new & (kid_node < n_nodes), prompt_of * n_nodes + kid_node, drop)
    depth_of_cur = c["node_depth"][prompt_of * n_nodes + cur]
    node_parent = (c["node_parent"].at[at_event].set(cur, mode="drop")
                   .at[at_kid].set(cur[src], mode="drop"))
    node_depth = (c["node_depth"].at[at_event].set(depth_of_cur + 1, mode="drop")
                  .at[at_kid].set(depth_of_cur[src] + 1, mode="drop"))
    cur = jnp.where(event, base, jnp.where(new, kid_node, cur)).astype(jnp.int32)

    # Forks: the claimed slots become copies of their parent rows (cache only when needed).
    (logits, *bufs, h, cb, node_of, own, ps), cache = opening.fork_rows(
        src, c["cache"], (*(c[f] for f in ("logits", "tokens", "mask", "logp", "entropy")), h, cb,
                          c["node_of"], c["own"], ps), new)
    tok = jnp.where(new, kids[src, child_j], sampled).astype(jnp.int32)
    own = jnp.where(new[:, None], False, own)
    prune = jnp.where(new, False, prune)
    done = jnp.where(new, False, c["done"])
    can_branch = jnp.where(new, o.nested, c["can_branch"] & ~fires)
    is_child = c["is_child"] | new
    birth = jnp.where(new, t, c["birth"]).astype(jnp.int32)
    parent_slot = jnp.where(new, src, c["parent_slot"]).astype(jnp.int32)
    branched = jnp.where(new, False, c["branched"] | event)
    pruned = jnp.where(new, False, c["pruned"])

    live = ~done
    tok, (tokens, mask, logp_buf, ent_buf) = opening.write_token(
        bufs, t, tok, live, *strategy.logp_entropy(logits, tok), pad_id=pad_id)
    node_of = node_of.at[:, t].set(jnp.where(live, cur, 0))
    own = own.at[:, t].set(live)
    eos = live & (tok == eos_id)
    cut = live & prune & ~eos
    logits_next, cache = models.decode_step(cfg, params, cache, tok)
    return dict(
        cache=cache, logits=logits_next, tokens=tokens, mask=mask, logp=logp_buf,
        entropy=ent_buf, h=h, c=cb, node_of=node_of, own=own, done=done | eos | cut,
        can_branch=can_branch, tentative=c["tentative"] & ~new, is_child=is_child, birth=birth,
        parent_slot=parent_slot, branched=branched, pruned=pruned | cut, prune_state=ps,
        cur=cur, node_parent=node_parent, node_depth=node_depth,
        n_used=c["n_used"] + need.sum(axis=1),
        num_children=c["num_children"] + new.sum(dtype=jnp.int32),
        num_branch_events=c["num_branch_events"] + event.sum(dtype=jnp.int32),
        num_pruned=c["num_pruned"] + cut.sum(dtype=jnp.int32)), None

  c, _ = jax.lax.scan(step, init, jnp.arange(t_max))
  parent_tab = c["node_parent"].reshape(b, n_nodes)

  def up(_, carry):  # leaf_node: each row's final node and its ancestors (the root's is itself)
    x, inc = carry
    return parent_tab[prompt_of, x], inc | jax.nn.one_hot(x, n_nodes, dtype=bool)

  _, leaf_node = jax.lax.fori_loop(0, n_nodes, up, (c["cur"], jnp.zeros((n, n_nodes), bool)))
  mask = c["mask"]
  return EchoSamples(
      tokens=c["tokens"], mask=mask, logp=c["logp"], entropy=c["entropy"],
      stat_entropy=jnp.where(mask, c["h"], 0.0), stat_conf=jnp.where(mask, c["c"], 0.0),
      node_parent=parent_tab, node_depth=c["node_depth"].reshape(b, n_nodes),
      leaf_node=leaf_node, node_of=c["node_of"], is_child=c["is_child"], birth=c["birth"],
      parent_slot=c["parent_slot"], branched=c["branched"], pruned=c["pruned"],
      decode_tokens=(c["own"] & mask).sum(dtype=jnp.int32), num_children=c["num_children"],
      num_branch_events=c["num_branch_events"], num_pruned=c["num_pruned"])


def to_tree(samples: EchoSamples) -> Tree:
  """The host `types.Tree` of an (already host-side) `EchoSamples`."""
  return Tree(parent=np.asarray(samples.node_parent), depth=np.asarray(samples.node_depth),
              leaf_node=np.asarray(samples.leaf_node), node_of=np.asarray(samples.node_of))
