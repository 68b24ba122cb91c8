"""TreePO's segment-wise tree sampling (docs/methods.md#treepo, docs/algorithms.md §3.3) over
the explicit KV cache, orchestrated on the host between segments.

In: B left-padded prompts, a leaf budget G (or n_b per prompt), `TreePOOptions`. Out:
`TreePORollout` (host arrays [B·G, T] and a `types.Tree`: node 0 = the prompt, one node per
(path, segment)). Invariants: `first_width` paths start per prompt, and at each segment end
(`segment_len` tokens, or a newline token with segment='newline') every live path forks into
`branches` paths while free slots last; a child copies its parent's KV-cache row and logits
(`opening.fork_rows`), so a shared prefix is decoded once. Token t of a segment k in slot s is
drawn with fold_in(fold_in(fold_in(rng, k), s), t) (`decode.draw_rows`). Leaves a prompt does
not reach are copies of its first leaf (`filled`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from rl_jax import models
from rl_jax.sampling.decode import decode_loop, draw_rows
from rl_jax.sampling import opening
from rl_jax.sampling.eptree import incidence
from rl_jax.sampling.strategies import Sampling
from rl_jax.types import Tree


SEGMENTS = ("fixed", "newline")


@dataclasses.dataclass(frozen=True)
class TreePOOptions:
  """segment_len: tokens per segment (the reference: 512; 'fixed' only). first_width: paths
  started from the prompt. branches: paths each live path becomes at a boundary (the reference:
  2). segment: where a segment ends: 'fixed' (every segment_len tokens, the reference) or
  'newline' (at the first token in `delimiters`: step boundaries, module docstring); EOS and
  the length limit end either. delimiters: the newline token ids ('newline' only; the rollout
  engine reads them from the tokenizer)."""

  segment_len: int = 8
  first_width: int = 2
  branches: int = 2
  segment: str = "fixed"
  delimiters: tuple = ()

  @classmethod
  def from_config(cls, config, delimiters=()) -> "TreePOOptions":
    """`config.rl.treepo` -> TreePOOptions (`delimiters`: the tokenizer's newline ids, kept
    for segment='newline')."""
    c = config.rl.treepo
    return cls(segment_len=c.segment_len, first_width=c.first_width, branches=c.branches,
               segment=c.segment,
               delimiters=tuple(int(i) for i in delimiters) if c.segment == "newline" else ())

  @classmethod
  def check_config(cls, config) -> None:
    """ValueError naming the field for `config.rl.treepo` out of range."""
    cls.from_config(config)

  def __post_init__(self):
    for name in ("segment_len", "first_width", "branches"):
      if getattr(self, name) < 1:
        raise ValueError(f"config.rl.treepo.{name} must be >= 1, got {getattr(self, name)}")
    if self.segment not in SEGMENTS:
      raise ValueError(f"config.rl.treepo.segment={self.segment!r}; expected one of "
                       f"{list(SEGMENTS)}")


@dataclasses.dataclass
class TreePORollout:
  """Host arrays; prompt b's leaves are rows b·G … b·G + G − 1.

  Attributes:
    tokens, mask, logp: [B·G, T] completions (as `decode.Samples`).
    tree: `types.Tree` with parent/depth [B, N], leaf_node [B·G, N], node_of [B·G, T].
    decode_tokens: completion tokens decoded (a shared prefix once; fill copies not counted).
    filled: [B·G] bool, rows that are copies of their prompt's first leaf.
    num_forks: paths started at a segment boundary (children; the first paths not counted).
    fork_prefix_tokens: completion tokens each child shares with its parent when it forks,
      summed over the forks (divided by num_forks: where in the completion the tree branches).
  """

  tokens: np.ndarray
  mask: np.ndarray
  logp: np.ndarray
  tree: Tree
  decode_tokens: int
  filled: np.ndarray
  num_forks: int = 0
  fork_prefix_tokens: int = 0


_open = jax.jit(opening.open_rows, static_argnames=("cfg", "copies", "cache_size"))


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "segment_len", "eos_id",
                                             "pad_id"))
def _segment(params, cache, logits, src, limits, rng, *, cfg: models.ModelConfig,
             strategy: Sampling, segment_len: int, eos_id: int, pad_id: int):
  """Slots take the rows `src` [S] (forks), decode one segment (row s ends at limits[s]), then
  feed each row's last token: (samples [S, segment_len], cache, next-token logits)."""
  logits, cache = opening.fork_rows(src, cache, logits)
  out, cache = decode_loop(cfg, params, cache, logits, rng, strategy=strategy,
                           max_new_tokens=segment_len, eos_id=eos_id, pad_id=pad_id,
                           row_keys=True, max_lengths=limits)
  last = jnp.take_along_axis(out.tokens, (jnp.maximum(limits, 1) - 1)[:, None], axis=1)[:, 0]
  logits, cache = models.decode_step(cfg, params, cache, last)
  return out, cache, logits


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "max_len", "eos_id", "pad_id"))
def _line_segment(params, cache, logits, src, limits, delimiters, rng, *,
                  cfg: models.ModelConfig, strategy: Sampling, max_len: int, eos_id: int,
                  pad_id: int):
  """segment='newline': slots take the rows `src` [S] (forks, per-row cache index included);
  row s then decodes until a token in `delimiters`, EOS or limits[s] tokens (0 = idle: nothing),
  feeding each token at its own next cache slot; a row that has ended writes nothing (its slot
  and position stay). Returns ((tokens, mask, logp) [S, max_len], cache, next-token logits)."""
  (logits, index), cache = opening.fork_rows(src, cache, (logits, cache.index))
  cache = cache.replace(index=index)
  s = logits.shape[0]
  rows = jnp.arange(s)

  def body(state):
    t, cache, logits, done, out = state
    tok, logp, _ = draw_rows(strategy, logits, rng, rows, jnp.full((s,), t))
    live = ~done
    tok, out = opening.write_token(out, t, tok, live, logp, pad_id=pad_id)
    hidden, fed = models.extend(cfg, params, cache, tok[:, None], live[:, None])
    cache = fed.replace(index=jnp.where(live, fed.index, cache.index))
    logits = jnp.where(live[:, None], models.logits_from_hidden(cfg, params, hidden[:, 0]),
                       logits)
    done = done | (tok == eos_id) | jnp.isin(tok, delimiters) | (t + 1 >= limits)
    return t + 1, cache, logits, done, out

  bufs = opening.batch_buffers(s, max_len, ((pad_id, jnp.int32), (False, bool),
                                            (0.0, jnp.float32)))
  _, cache, logits, _, out = jax.lax.while_loop(
      lambda state: (state[0] < max_len) & ~jnp.all(state[3]), body,
      (jnp.int32(0), cache, logits, limits <= 0, bufs))
  return out, cache, logits


def treepo_rollout(params, prompt: np.ndarray, prompt_mask: np.ndarray, rng: jax.Array, *,
                   cfg: models.ModelConfig, strategy: Sampling, options: TreePOOptions,
                   group: int, max_new_tokens: int, eos_id: int,
                   pad_id: int = 0, budgets=None) -> TreePORollout:
  """Grows one TreePO tree per left-padded prompt [B, P] with G = `group` leaves each.

  budgets: optional int [B], 1 <= n_b <= G: prompt b's tree has a budget of n_b leaves (ragged
  groups, `rollout.engines`): only the first n_b of its G slots are ever used (its first
  min(first_width, n_b) paths start there, forks take free slots among them), the other slots
  decode nothing that is counted and hold copies of its first leaf (`filled`), so the rows
  b·G … b·G + n_b − 1 are TreePO's own tree of n_b leaves. None = G each (identical draws).
  """
  o, t_max = options, max_new_tokens
  b, p = prompt.shape
  budget = np.full(b, group, np.int64) if budgets is None else np.asarray(budgets, np.int64)
  if budget.shape != (b,) or (budget < 1).any() or (budget > group).any():
    raise ValueError(f"treepo_rollout: budgets must be {b} leaf counts in [1, group={group}], "
                     f"got {budget.tolist()}")
  s = b * group
  lines = o.segment == "newline"
  if lines and not o.delimiters:
    raise ValueError("config.rl.treepo.segment='newline' needs the newline token ids "
                     "(TreePOOptions.delimiters); the tokenizer has none")
  # 'newline': a segment is at least one token, so a path has at most T of them.
  seg = t_max if lines else min(o.segment_len, t_max)
  n_seg = t_max if lines else -(-t_max // seg)
  n_nodes = 1 + group * n_seg
  prompt_of = np.repeat(np.arange(b), group)
  # Boundary feeds use one slot per segment: P + (segments - 1) · seg + T ... <= P + T + seg.
  # 'newline': every row writes its own tokens only, P + T.
  cache_size = p + t_max if lines else p + n_seg * seg
  big = dataclasses.replace(cfg, max_seq_len=max(cfg.max_seq_len, cache_size))
  if p + t_max > cfg.max_seq_len:
    raise ValueError(f"prompt length {p} + max_new_tokens {t_max} exceeds "
                     f"ModelConfig.max_seq_len={cfg.max_seq_len}")
  logits, cache = _open(big, params, jnp.asarray(prompt), jnp.asarray(prompt_mask),
                        copies=group, cache_size=cache_size)
  if lines:  # Per-row write slots: paths reach a boundary at different lengths.
    cache = cache.replace(index=jnp.full((s,), cache.index, jnp.int32))
    delimiters = jnp.asarray(o.delimiters, jnp.int32)
  tokens = np.full((s, t_max), pad_id, np.int32)
  mask = np.zeros((s, t_max), bool)
  logp = np.zeros((s, t_max), np.float32)
  node_of = np.zeros((s, t_max), np.int32)
  parent = np.zeros((b, n_nodes), np.int32)
  depth = np.zeros((b, n_nodes), np.int32)
  n_used = np.ones(b, np.int32)
  cur = np.zeros(s, np.int32)
  slot = np.arange(s) % group
  allowed = slot < budget[prompt_of]
  used = (slot < np.minimum(o.first_width, budget[prompt_of])) & allowed
  live = used.copy()
  src = np.arange(s)
  length = np.zeros(s, np.int64)  # completion tokens each slot holds
  decode_tokens = num_forks = fork_prefix_tokens = 0
  for k in range(n_seg):
    for i in np.flatnonzero(live):  # Each live path's next segment is a new node.
      pb = prompt_of[i]
      n = n_used[pb]
      n_used[pb] += 1
      parent[pb, n], depth[pb, n] = cur[i], depth[pb, cur[i]] + 1
      cur[i] = n
    key = jax.random.fold_in(rng, k)
    if lines:
      limits = np.where(live, t_max - length, 0).astype(np.int32)
      (o_tok, o_mask, o_logp), cache, logits = _line_segment(
          params, cache, logits, jnp.asarray(src), jnp.asarray(limits), delimiters, key,
          cfg=big, strategy=strategy, max_len=t_max, eos_id=eos_id, pad_id=pad_id)
    else:  # Every live row is at k · seg tokens.
      width = min(seg, t_max - k * seg)
      limits = np.where(live, width, 1).astype(np.int32)
      out, cache, logits = _segment(params, cache, logits, jnp.asarray(src),
                                    jnp.asarray(limits), key, cfg=big, strategy=strategy,
                                    segment_len=seg, eos_id=eos_id, pad_id=pad_id)
      o_tok, o_mask, o_logp = (x[:, :width] for x in (out.tokens, out.mask, out.logp))
    o_tok, o_mask, o_logp = (np.asarray(x) for x in (o_tok, o_mask, o_logp))
    rows = np.flatnonzero(live)
    # A row's segment is a prefix of its output row (the mask ends at EOS or the boundary).
    r_idx, c_idx = np.nonzero(o_mask[rows])
    at_row, at_col = rows[r_idx], length[rows][r_idx] + c_idx
    tokens[at_row, at_col] = o_tok[rows][r_idx, c_idx]
    mask[at_row, at_col] = True
    logp[at_row, at_col] = o_logp[rows][r_idx, c_idx]
    node_of[at_row, at_col] = cur[at_row]
    length[rows] += o_mask[rows].sum(1)
    decode_tokens += int(o_mask[rows].sum())
    ended = (o_tok[rows] == eos_id).any(1) | (length[rows] >= t_max)
    live[rows[ended]] = False
    if not live.any():
      break
    src = np.arange(s)
    for pb in range(b):  # Forks: each live path takes branches - 1 free slots, in slot order.
      block = np.arange(pb * group, (pb + 1) * group)
      free = list(block[~used[block] & allowed[block]])
      for i in block[live[block]]:
        for _ in range(o.branches - 1):
          if not free:
            break
          c = free.pop(0)
          src[c], used[c], live[c], cur[c] = i, True, True, cur[i]
          end = length[c] = length[i]
          num_forks += 1
          fork_prefix_tokens += int(end)
          tokens[c, :end], mask[c, :end] = tokens[i, :end], mask[i, :end]
          logp[c, :end], node_of[c, :end] = logp[i, :end], node_of[i, :end]
  filled = ~used
  for pb in range(b):  # Budget not used (every path ended early): copies of the first leaf.
    block = np.arange(pb * group, (pb + 1) * group)
    first = block[used[block]][0]
    for c in block[~used[block]]:
      tokens[c], mask[c], logp[c], node_of[c] = tokens[first], mask[first], logp[first], \
          node_of[first]
  inc = incidence(parent, node_of, mask, prompt_of)
  tree = Tree(parent=parent, depth=depth, leaf_node=inc, node_of=node_of)
  return TreePORollout(tokens=tokens, mask=mask, logp=logp, tree=tree,
                       decode_tokens=decode_tokens, filled=filled, num_forks=num_forks,
                       fork_prefix_tokens=fork_prefix_tokens)
