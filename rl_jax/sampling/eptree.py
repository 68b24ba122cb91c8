"""EPTree, TreeRL's entropy-guided tree search (docs/methods.md#treerl-and-eptree,
docs/algorithms.md §3.2), over the explicit KV cache; orchestration on the host, every token
decoded on device.

In: B left-padded prompts, `EPTreeOptions` (M, N, L, T). Out: `EPTreeRollout`: Lv = M·(1 + L·N·T)
leaves per prompt [B·Lv, T] and a `types.Tree` (node 0 = the prompt, each chain a depth-1 node;
a fork splits its segment and adds one child per continuation). Invariants: a continuation
starts from a copy of its row's cache with the slots after the fork point masked out and the
last prefix token fed again (`continue_rows`), so a shared prefix is never recomputed;
continuations write cache slots past the chains' (attention uses the slot mask and explicit
position ids).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rl_jax import models, parallel
from rl_jax.sampling.decode import decode_loop, generate_with_cache
from rl_jax.sampling.strategies import Sampling
from rl_jax.types import Tree


@dataclasses.dataclass(frozen=True)
class EPTreeOptions:
  """(M, N, L, T) of §3.2; the reference script uses (6, 2, 1, 2).

  Attributes:
    num_chains: M, independent chains per prompt (tree roots).
    forks_per_round: N, fork points per tree and round.
    rounds: L, expansion rounds.
    branches: T, continuations sampled from each fork point.
    stop_tokens: token ids after which no fork point is taken.
    min_tokens_left: a fork point needs at least this many tokens before the length limit
      (T − t >= min_tokens_left); continuations cut short by the limit mostly repeat their
      siblings. 0 = no restriction (the reference).
    min_prefix_fraction: a fork point at completion position t of a row whose completion has
      n tokens needs t >= min_prefix_fraction · n (0.5: the second half of each row). 0 = no
      restriction (the reference).
  """

  num_chains: int = 6
  forks_per_round: int = 2
  rounds: int = 1
  branches: int = 2
  stop_tokens: tuple[int, ...] = ()
  min_tokens_left: int = 0
  min_prefix_fraction: float = 0.0

  @classmethod
  def from_config(cls, config) -> "EPTreeOptions":
    """`config.rl.eptree` -> EPTreeOptions."""
    c = config.rl.eptree
    return cls(num_chains=c.num_chains, forks_per_round=c.forks_per_round, rounds=c.rounds,
               branches=c.branches, min_tokens_left=c.min_tokens_left,
               min_prefix_fraction=c.min_prefix_fraction)

  @classmethod
  def check_config(cls, config) -> None:
    """ValueError: `config.rl.eptree` out of range, or fewer leaves than rl.(max_)group_size."""
    rl, leaves = config.rl, cls.from_config(config).leaves
    for f in [f for f in ("group_size", "max_group_size") if rl[f] > leaves]:
      raise ValueError(f"config.rl.{f}={rl[f]} exceeds the {leaves} leaves per prompt of config."
                       "rl.eptree (num_chains·(1 + rounds·forks_per_round·branches))")

  def __post_init__(self):
    for name in ("num_chains", "forks_per_round", "branches"):
      if getattr(self, name) < 1:
        raise ValueError(f"EPTreeOptions.{name} must be >= 1, got {getattr(self, name)}")
    if self.min_tokens_left < 0:
      raise ValueError(f"EPTreeOptions.min_tokens_left must be >= 0, got {self.min_tokens_left}")
    if not 0.0 <= self.min_prefix_fraction < 1.0:
      raise ValueError("EPTreeOptions.min_prefix_fraction must be in [0, 1), got "
                       f"{self.min_prefix_fraction}")
    if self.rounds < 0:
      raise ValueError(f"EPTreeOptions.rounds must be >= 0, got {self.rounds}")

  @property
  def leaves(self) -> int:
    """Leaves per prompt: M·(1 + L·N·T)."""
    return self.num_chains * (1 + self.rounds * self.forks_per_round * self.branches)

  @property
  def max_nodes(self) -> int:
    """Node capacity per prompt: root + chains + (one split + T children) per fork."""
    return 1 + self.num_chains * (1 + self.rounds * self.forks_per_round * (1 + self.branches))


_STEP_BUCKET = 8


@dataclasses.dataclass
class EPTreeRollout:
  """Host arrays; the leaves of prompt b are rows b·Lv ... (b+1)·Lv − 1 (Lv = options.leaves).

  Attributes:
    tokens, mask, logp: [B·Lv, T] completions (as `decode.Samples`).
    tree: `types.Tree` with parent/depth [B, N], leaf_node [B·Lv, N], node_of [B·Lv, T].
    fork_pos: [B·Lv] completion position where the leaf's own segment starts (0 for chains).
    decode_tokens: tokens decoded (chains + continuations, each re-fed prefix token included).
  """

  tokens: np.ndarray
  mask: np.ndarray
  logp: np.ndarray
  tree: Tree
  fork_pos: np.ndarray
  decode_tokens: int


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "max_new_tokens", "eos_id",
                                             "pad_id"))
def continue_rows(params, cache: models.KVCache, rows: jax.Array, keep: jax.Array,
                  refeed_tok: jax.Array, refeed_pos: jax.Array, rng: jax.Array, *,
                  cfg: models.ModelConfig, strategy: Sampling, max_new_tokens: int, eos_id: int,
                  pad_id: int = 0):
  """Forks cache rows and samples continuations without recomputing their prefixes.

  Args:
    params: policy parameters.
    cache: the cache of the rows to fork from.
    rows: [F] row of `cache` each continuation copies.
    keep: [F, S] bool, slots of the prefix to keep (prompt + completion tokens before the last
      prefix token).
    refeed_tok: [F] the last prefix token (fed again to get the next-token logits).
    refeed_pos: [F] its position id.
    rng: PRNG key.
    cfg, strategy, max_new_tokens, eos_id, pad_id: as `decode.generate`.

  Returns:
    (`Samples` of the continuations, their cache).
  """
  c = parallel.shard_batch(cache.take_rows(rows).replace(mask=keep,
                                                         pos=refeed_pos.astype(jnp.int32)))
  logits, c = models.decode_step(cfg, params, c, refeed_tok.astype(jnp.int32))
  return decode_loop(cfg, params, c, logits, rng, strategy=strategy,
                     max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id)


class _Forest:
  """Host bookkeeping of the node tables of B prompts."""

  def __init__(self, num_prompts: int, capacity: int):
    self.parent = np.zeros((num_prompts, capacity), np.int32)
    self.depth = np.zeros((num_prompts, capacity), np.int32)
    self.used = np.ones((num_prompts,), np.int32)  # node 0 = root

  def new(self, b: int, parent: int) -> int:
    n = int(self.used[b])
    self.used[b] += 1
    self.parent[b, n] = parent
    self.depth[b, n] = self.depth[b, parent] + 1
    return n

  def shift_subtree(self, b: int, node: int) -> None:
    """Adds one to the depth of every node below `node` (after a split above it)."""
    stack = [node]
    while stack:
      x = stack.pop()
      kids = [int(c) for c in np.flatnonzero(self.parent[b, :self.used[b]] == x) if c != x]
      for k in kids:
        self.depth[b, k] += 1
        stack.append(k)


def incidence(parent: np.ndarray, node_of: np.ndarray, mask: np.ndarray,
              prompt_of_row: np.ndarray) -> np.ndarray:
  """leaf_node [R, N]: nodes on each row's path (its tokens' nodes, their ancestors, the root)."""
  r, _ = node_of.shape
  inc = np.zeros((r, parent.shape[1]), bool)
  for i in range(r):
    b = prompt_of_row[i]
    for n in set(node_of[i][mask[i]].tolist()) | {0}:
      while not inc[i, n]:
        inc[i, n] = True
        n = parent[b, n]
  return inc


def eptree_rollout(params, prompt: np.ndarray, prompt_mask: np.ndarray, rng: jax.Array, *,
                   cfg: models.ModelConfig, strategy: Sampling, options: EPTreeOptions,
                   max_new_tokens: int, eos_id: int, pad_id: int = 0) -> EPTreeRollout:
  """Runs EPTree for B left-padded prompts [B, P]; returns every leaf (see `EPTreeRollout`).

  Each round forks every tree at its N highest −log p tokens, except padding and EOS, the first
  token of each continuation, tokens already forked, tokens after one in `stop_tokens`, and
  those `min_tokens_left` / `min_prefix_fraction` exclude.
  """
  o, t_max = options, max_new_tokens
  b, p = prompt.shape
  m = o.num_chains
  n_prompt = np.asarray(prompt_mask).sum(-1)
  rows0 = np.repeat(np.arange(b), m)
  cache_size = p + (o.rounds + 1) * t_max
  # Continuations write into slots after the first round's, so the cache has more slots than any
  # sequence has positions (at most P + T). `max_seq_len` bounds positions (RoPE; no learned
  # table), so the cache may exceed it as long as P + T does not.
  if p + t_max > cfg.max_seq_len:
    raise ValueError(f"prompt length {p} + max_new_tokens {t_max} exceeds "
                     f"ModelConfig.max_seq_len={cfg.max_seq_len}")
  cfg = dataclasses.replace(cfg, max_seq_len=max(cfg.max_seq_len, cache_size))
  out, cache = generate_with_cache(params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                                   jax.random.fold_in(rng, 0), cfg=cfg, strategy=strategy,
                                   max_new_tokens=t_max, eos_id=eos_id, pad_id=pad_id,
                                   cache_size=cache_size, num_samples=m)
  tokens, mask, logp = (np.asarray(x) for x in (out.tokens, out.mask, out.logp))
  decode_tokens = int(mask.sum())
  forest = _Forest(b, o.max_nodes)
  chain_node = np.array([forest.new(pb, 0) for pb in rows0], np.int32)
  node_of = np.where(mask, chain_node[:, None], 0).astype(np.int32)
  prompt_of = rows0.copy()
  tree_of = np.arange(b * m)  # which chain's tree a row belongs to
  own_start = np.zeros(b * m, np.int64)
  is_cont = np.zeros(b * m, bool)
  slot_of = np.full((b * m, t_max), -1, np.int64)
  slot_of[:, :t_max - 1] = p + np.arange(t_max - 1)
  used_forks: set[tuple[int, int]] = set()
  full_prompt, full_prompt_mask = np.asarray(prompt), np.asarray(prompt_mask, bool)
  # Slot of each row's last prompt token: p - 1, except in continuations forked at t = 0, which
  # feed that token again into a slot of their own.
  last_prompt_slot = np.full(b * m, p - 1, np.int64)
  stop = np.isin(tokens, np.asarray(o.stop_tokens, np.int64)) if o.stop_tokens else None

  for rnd in range(o.rounds):
    # Score the tokens each tree owns (no shared-prefix duplicates) and pick the top N per tree.
    positions = np.arange(t_max)[None, :]
    ok = mask & (positions >= own_start[:, None])
    ok &= ~((positions == own_start[:, None]) & is_cont[:, None])
    ok &= tokens != eos_id
    ok &= positions <= t_max - o.min_tokens_left
    ok &= positions >= np.ceil(o.min_prefix_fraction * mask.sum(1, keepdims=True))
    if stop is not None:
      ok &= ~(np.cumsum(stop, axis=1) - stop > 0)
    for (r_, t_) in used_forks:
      ok[r_, t_] = False
    score = np.where(ok, -logp, -np.inf)
    forks = []
    for tree in range(b * m):
      rows = np.flatnonzero(tree_of == tree)
      flat = score[rows].ravel()
      order = np.argsort(-flat, kind="stable")[:o.forks_per_round]
      forks += [(int(rows[i // t_max]), int(i % t_max)) for i in order if np.isfinite(flat[i])]
    if not forks:
      break
    # Each fork point: keep the prompt and completion slots before the last prefix token.
    src = np.repeat([r for r, _ in forks], o.branches)
    pos = np.repeat([t for _, t in forks], o.branches)
    s = cache.size
    keep = np.zeros((len(src), s), bool)
    keep[:, :p] = full_prompt_mask[prompt_of[src]]
    keep[:, p - 1] = False
    keep[np.arange(len(src)), last_prompt_slot[src]] = True
    refeed_tok = np.zeros(len(src), np.int64)
    for i, (r, t) in enumerate(zip(src, pos)):
      if t == 0:
        keep[i, last_prompt_slot[r]] = False
        refeed_tok[i] = full_prompt[prompt_of[r], p - 1]
      else:
        keep[i, slot_of[r, :t - 1]] = True
        refeed_tok[i] = tokens[r, t - 1]
    refeed_pos = n_prompt[prompt_of[src]] + pos - 1
    index0 = int(cache.index)
    # Continuations only need T − t tokens: decode as many steps as the earliest fork point needs,
    # rounded up to a multiple of _STEP_BUCKET (bounds the number of compiled lengths).
    steps = min(t_max, -(-(t_max - int(pos.min())) // _STEP_BUCKET) * _STEP_BUCKET)
    cont, cont_cache = continue_rows(params, cache, jnp.asarray(src), jnp.asarray(keep),
                                     jnp.asarray(refeed_tok), jnp.asarray(refeed_pos),
                                     jax.random.fold_in(rng, rnd + 1), cfg=cfg,
                                     strategy=strategy, max_new_tokens=steps, eos_id=eos_id,
                                     pad_id=pad_id)
    c_tok, c_mask, c_logp = (np.asarray(x) for x in (cont.tokens, cont.mask, cont.logp))
    # New leaves: prefix of the source row, then the continuation cut at the length limit.
    f = len(src)
    new_tok = np.full((f, t_max), pad_id, tokens.dtype)
    new_mask = np.zeros((f, t_max), bool)
    new_logp = np.zeros((f, t_max), np.float32)
    new_slot = np.full((f, t_max), -1, np.int64)
    new_node = np.zeros((f, t_max), np.int32)
    for i, (r, t) in enumerate(zip(src, pos)):
      new_tok[i, :t], new_mask[i, :t], new_logp[i, :t] = tokens[r, :t], mask[r, :t], logp[r, :t]
      new_tok[i, t:] = c_tok[i, :t_max - t]
      new_mask[i, t:] = c_mask[i, :t_max - t]
      new_logp[i, t:] = c_logp[i, :t_max - t]
      new_slot[i, :max(t - 1, 0)] = slot_of[r, :max(t - 1, 0)]
      if t > 0:
        new_slot[i, t - 1] = index0
      n_fed = t_max - 1 - t
      if n_fed > 0:
        new_slot[i, t:t_max - 1] = index0 + 1 + np.arange(n_fed)
      decode_tokens += int(c_mask[i, :t_max - t].sum()) + 1
    # Tree bookkeeping: split every forked segment at its fork point, then add one child per
    # continuation under the head of that split.
    for r, t in forks:
      pb, node = prompt_of[r], int(node_of[r, t])
      if t > int(np.flatnonzero(node_of[r] == node)[0]):
        tail = forest.new(pb, node)
        for kid in np.flatnonzero(forest.parent[pb, :forest.used[pb]] == node):
          if kid not in (tail, node):
            forest.parent[pb, kid] = tail
        forest.shift_subtree(pb, tail)
        through = (prompt_of == pb)[:, None] & (np.arange(t_max)[None, :] >= t)
        node_of[through & (node_of == node)] = tail
      used_forks.add((r, t))
    for j, (r, t) in enumerate(forks):
      pb = prompt_of[r]
      head = int(forest.parent[pb, node_of[r, t]])
      for i in range(j * o.branches, (j + 1) * o.branches):
        child = forest.new(pb, head)
        new_node[i, :t] = node_of[r, :t]
        new_node[i, t:] = np.where(new_mask[i, t:], child, 0)
    tokens = np.concatenate([tokens, new_tok])
    mask = np.concatenate([mask, new_mask])
    logp = np.concatenate([logp, new_logp])
    slot_of = np.concatenate([slot_of, new_slot])
    node_of = np.concatenate([node_of, new_node])
    prompt_of = np.concatenate([prompt_of, prompt_of[src]])
    tree_of = np.concatenate([tree_of, tree_of[src]])
    own_start = np.concatenate([own_start, pos])
    last_prompt_slot = np.concatenate([last_prompt_slot,
                                       np.where(pos == 0, index0, last_prompt_slot[src])])
    is_cont = np.concatenate([is_cont, np.ones(len(src), bool)])
    if stop is not None:
      stop = np.isin(tokens, np.asarray(o.stop_tokens, np.int64))
    cache = _concat_caches(cache, cont_cache)

  # Order the leaves by prompt and pad every prompt to Lv rows (early exit: duplicate row 0).
  lv = o.leaves
  order = []
  for pb in range(b):
    rows = list(np.flatnonzero(prompt_of == pb))
    rows += [rows[0]] * (lv - len(rows))
    order += rows[:lv]
  order = np.asarray(order)
  node_of = np.where(mask, node_of, 0)[order]
  inc = incidence(forest.parent, node_of, mask[order], prompt_of[order])
  tree = Tree(parent=forest.parent, depth=forest.depth, leaf_node=inc, node_of=node_of)
  return EPTreeRollout(tokens=tokens[order], mask=mask[order], logp=logp[order], tree=tree,
                       fork_pos=own_start[order].astype(np.int32), decode_tokens=decode_tokens)


def _concat_caches(a: models.KVCache, c: models.KVCache) -> models.KVCache:
  """Rows of `a` then rows of `c` (same slots); the write index is the later one's."""
  return a.map_kv(lambda x, y: jnp.concatenate([x, y]), c).replace(
      mask=jnp.concatenate([a.mask, c.mask]), pos=jnp.concatenate([a.pos, c.pos]),
      index=jnp.maximum(a.index, c.index))


def select_leaves(rewards: np.ndarray, num_leaves: int, keep,
                  rng: np.random.Generator) -> np.ndarray:
  """Rows to train on: `keep` of each prompt's `num_leaves` leaves, at random, keeping one
  correct (reward > 0) leaf when the prompt has any (the reference's `num_traces` selection).

  Args:
    rewards: [B·num_leaves] scalar rewards.
    num_leaves: Lv, leaves per prompt.
    keep: leaves kept per prompt (<= Lv): one int (dense groups of G), or n_b per prompt [B]
      (ragged groups, `rollout.engines`); equal counts draw exactly as the int.
    rng: host generator.

  Returns:
    int [Σ keep] rows, grouped by prompt, in increasing order within a prompt.
  """
  r = np.asarray(rewards).reshape(-1, num_leaves)
  counts = np.broadcast_to(np.asarray(keep, np.int64), (len(r),))
  if (counts > num_leaves).any() or (counts < 1).any():
    raise ValueError(f"cannot keep {counts.tolist()} of {num_leaves} leaves per prompt; the "
                     f"EPTree options give M(1+L·N·T)={num_leaves} leaves, so "
                     f"config.rl.group_size (and max_group_size) must be in [1, {num_leaves}]")
  out = []
  for b, row in enumerate(r):
    pick = rng.permutation(num_leaves)[:counts[b]]
    good = np.flatnonzero(row > 0)
    if len(good) and not (row[pick] > 0).any():
      pick[0] = rng.choice(good)
    out.append(b * num_leaves + np.sort(pick))
  return np.concatenate(out)


def restrict(tree: Tree, rows: Sequence[int]) -> Tree:
  """The tree seen by the selected leaf rows only (unselected leaves vanish from the incidence)."""
  rows = np.asarray(rows)
  return Tree(parent=tree.parent, depth=tree.depth, leaf_node=np.asarray(tree.leaf_node)[rows],
              node_of=np.asarray(tree.node_of)[rows])
