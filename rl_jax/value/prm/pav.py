"""PAV (docs/algorithms.md §5.1): prover values Q^μ(prefix) from Monte Carlo outcomes of step
prefixes.

Labels for training a PAV (`value.prm.model`) come from either source:

* `mc_prefix_labels`: for every step h of a sampled completion, `n_mc` continuations of
  `prompt + a_{<=h}` are sampled with the prover's base policy π and scored by the task; the
  label is their success rate Q̂^π. The last step's label is the completion's own outcome (it is
  finished); the bare prompt's label (index 0) is the mean outcome of the prompt's samples.
* `tree_prefix_labels`: a tree rollout (EPTree, `types.Tree`) already holds Monte Carlo values:
  a token inside node n is shared by every leaf below n, so Q̂(prefix to that token) = the mean
  reward of those leaves (`V_node`), with their count as its weight.

`best_of_k` turns base-policy values into the best-of-K prover's, `Q^{BoK} = 1 - (1 - Q^π)^K`
[P]; K = 1 keeps the policy itself as the prover. The transform is applied to the point estimate
(a plug-in estimate, biased upwards for small n_mc; [R] in that respect).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rl_jax import sampling
from rl_jax.types import Tree
from rl_jax.value.prm.segments import Steps


def best_of_k(q: jax.Array, k: int) -> jax.Array:
  """`Q^{BoK}(s, a) = 1 - (1 - Q^π(s, a))^K` (K >= 1; K = 1 is the identity)."""
  if not isinstance(k, int) or k < 1:
    raise ValueError(f"prover_k must be an integer >= 1, got {k!r}")
  return 1.0 - (1.0 - jnp.asarray(q, jnp.float32)) ** k


def progress(v0: jax.Array, q: jax.Array, step_mask: jax.Array) -> jax.Array:
  """`A^μ(s_h, a_h) = Q^μ(s_h, a_h) - V^μ(s_h)` with `V^μ(s_1) = v0` and `V^μ(s_h) = Q^μ(s_{h-1},
  a_{h-1})`: the difference along H with the prompt's value prepended.

  Args:
    v0: [...] value of the bare prompt.
    q: [..., H] value after each step; step_mask [..., H].
  Returns [..., H] progress, 0 where the step does not exist.
  """
  q = jnp.asarray(q, jnp.float32)
  before = jnp.concatenate([jnp.asarray(v0, jnp.float32)[..., None], q[..., :-1]], axis=-1)
  return jnp.where(step_mask, q - before, 0.0)


def tree_prefix_labels(tree: Tree, rewards: jax.Array, mask: jax.Array,
                       group_size: int) -> tuple[jax.Array, jax.Array]:
  """Monte Carlo prefix values from a tree rollout.

  Args:
    tree: `leaf_node` [R, N] (rows of prompt b are rows b*G .. b*G+G-1), `node_of` [R, T].
    rewards: [R] outcome of each leaf row.
    mask: [R, T] counted completion tokens.
    group_size: G, leaf rows per prompt.

  Returns:
    labels [R, T + 1] (index 0: the root's value, the prompt; t + 1: the value of the node that
    holds token t) and weights [R, T + 1] (the number of leaves behind each estimate; 0 off the
    mask).
  """
  r_rows, n = tree.leaf_node.shape
  inc = tree.leaf_node.reshape(-1, group_size, n).astype(jnp.float32)  # [B, G, N]
  r = jnp.asarray(rewards, jnp.float32).reshape(-1, group_size)
  cnt = inc.sum(axis=1)  # [B, N]
  v = jnp.einsum("bgn,bg->bn", inc, r) / jnp.maximum(cnt, 1.0)
  rows_b = jnp.arange(r_rows) // group_size
  tok_v = v[rows_b[:, None], tree.node_of]
  tok_c = cnt[rows_b[:, None], tree.node_of]
  m = jnp.asarray(mask, bool)
  labels = jnp.concatenate([v[rows_b, 0][:, None], jnp.where(m, tok_v, 0.0)], axis=1)
  weights = jnp.concatenate([cnt[rows_b, 0][:, None], jnp.where(m, tok_c, 0.0)], axis=1)
  return labels, weights


def prefix_prompts(prompt: np.ndarray, prompt_mask: np.ndarray, tokens: np.ndarray,
                   upto: np.ndarray, pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """Left-padded `prompt ++ completion[:upto + 1]` rows [N, P + T] (and their mask) to sample
  continuations from. `upto` [N] is the last completion token kept."""
  t = tokens.shape[1]
  keep = np.arange(t)[None] <= np.asarray(upto)[:, None]
  seq = np.concatenate([prompt, np.where(keep, tokens, pad_id)], axis=1)
  m = np.concatenate([np.asarray(prompt_mask, bool), keep], axis=1)
  order = np.argsort(m, axis=1, kind="stable")  # padding first, then tokens in order
  return (np.take_along_axis(seq, order, axis=1).astype(np.int32),
          np.take_along_axis(m, order, axis=1))


def mc_prefix_labels(params, *, cfg, strategy: sampling.Sampling, prompt: np.ndarray,
                     prompt_mask: np.ndarray, tokens: np.ndarray, mask: np.ndarray,
                     steps: Steps, outcomes: np.ndarray, prompt_value: np.ndarray,
                     score: Callable[[Sequence[int], np.ndarray], Sequence[float]],
                     n_mc: int, rng: jax.Array, eos_id: int, pad_id: int = 0,
                     batch_size: int = 512) -> tuple[np.ndarray, np.ndarray]:
  """Monte Carlo labels Q̂^π of every step prefix of R sampled completions.

  Args:
    params, cfg, strategy: the prover's base policy and its sampling.
    prompt, prompt_mask: [R, P] each row's prompt; tokens, mask [R, T] its completion.
    steps: `value.prm.segments.segment` of the completions.
    outcomes: [R] each completion's reward (the label of its last step).
    prompt_value: [R] label of the bare prompt (e.g. the mean outcome of its group).
    score: (row ids [M], continuation token rows [M, T'] with pad after EOS) -> rewards [M]
      of `prefix ++ continuation` for the task of each row.
    n_mc: continuations per prefix.
    rng: PRNG key (batch i uses fold_in(rng, i)).

  Returns:
    labels [R, T + 1] and weights [R, T + 1] in the `gather_steps` layout (weight 1 at the
    prompt and at each step end).
  """
  if n_mc < 1:
    raise ValueError(f"n_mc must be >= 1, got {n_mc}")
  r, t = tokens.shape
  nsteps = np.asarray(steps.num_steps)
  end_pos = np.asarray(steps.end_pos)
  labels = np.zeros((r, t + 1), np.float32)
  weights = np.zeros((r, t + 1), np.float32)
  labels[:, 0], weights[:, 0] = prompt_value, 1.0
  rows, hs = [], []
  for i in range(r):
    for h in range(min(nsteps[i], end_pos.shape[1])):
      if h == nsteps[i] - 1:  # the finished completion: its own outcome
        labels[i, end_pos[i, h] + 1] = outcomes[i]
      else:
        rows.append(i)
        hs.append(h)
      weights[i, end_pos[i, h] + 1] = 1.0
  rows, hs = np.asarray(rows, np.int64), np.asarray(hs, np.int64)
  for j, s in enumerate(range(0, len(rows), batch_size)):
    rr, hh = rows[s:s + batch_size], hs[s:s + batch_size]
    upto = end_pos[rr, hh]
    seq, seq_mask = prefix_prompts(prompt[rr], prompt_mask[rr], tokens[rr], upto, pad_id)
    k = len(rr)
    if k < batch_size and len(rows) > batch_size:  # one compiled shape
      seq = np.concatenate([seq, np.repeat(seq[-1:], batch_size - k, 0)])
      seq_mask = np.concatenate([seq_mask, np.repeat(seq_mask[-1:], batch_size - k, 0)])
    # Keep the used columns (rounded up to 16: few compiled widths). Real positions never pass
    # P_real + T <= max_seq_len (continuations past the completion's budget are cut below);
    # the cache only needs the extra slots of the left padding, so its size check is widened.
    width = min(seq.shape[1], -(-int(seq_mask.sum(1).max()) // 16) * 16)
    seq, seq_mask = seq[:, -width:], seq_mask[:, -width:]
    gen_cfg = dataclasses.replace(cfg, max_seq_len=max(cfg.max_seq_len, width + t))
    out = sampling.generate(params, seq, seq_mask, jax.random.fold_in(rng, j), cfg=gen_cfg,
                            strategy=strategy, max_new_tokens=t, eos_id=eos_id, pad_id=pad_id,
                            num_samples=n_mc)
    cont = np.asarray(out.tokens)[:k * n_mc]
    cmask = np.asarray(out.mask)[:k * n_mc]
    # The continuation may only use what is left of the completion's T tokens.
    left = (t - 1 - np.repeat(upto, n_mc))[:, None]
    cmask = cmask & (np.arange(t)[None] < left)
    cont = np.where(cmask, cont, pad_id)
    full = np.where(np.arange(t)[None] <= np.repeat(upto, n_mc)[:, None],
                    np.repeat(tokens[rr], n_mc, 0), pad_id)
    joined = _append(full, np.repeat(upto, n_mc), cont, pad_id)
    rewards = np.asarray(score(np.repeat(rr, n_mc), joined), np.float32).reshape(k, n_mc)
    labels[rr, upto + 1] = rewards.mean(axis=1)
  return labels, weights


def _append(prefix: np.ndarray, upto: np.ndarray, cont: np.ndarray, pad_id: int) -> np.ndarray:
  """Rows `prefix[:upto + 1] ++ cont` (cont's pads dropped by the scorer's decode), width T."""
  t = prefix.shape[1]
  out = prefix.copy()
  for i in range(len(out)):
    c = cont[i][cont[i] != pad_id]
    room = t - upto[i] - 1
    out[i, upto[i] + 1: upto[i] + 1 + min(room, len(c))] = c[:room]
  return out
