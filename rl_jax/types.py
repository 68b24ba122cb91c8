"""Pytrees shared across modules (static shapes; see docs/design.md §1 for the letters).

R rollout rows (= B prompts x G samples), P prompt length, T completion length.
"""

from __future__ import annotations

from typing import Optional

import chex
import flax.struct
import jax


@flax.struct.dataclass
class Tree:
  """The branching structure of tree rollouts (docs/algorithms.md §3.0), per prompt.

  N is a static node capacity per prompt. Node 0 of every prompt is the root (the prompt itself,
  no completion tokens); every other used node is a segment of completion tokens shared by the
  leaves below it. Unused nodes have no leaf through them (`leaf_node[:, n]` all False).

  Attributes:
    parent: [B, N] int32 parent node id (the root's parent is itself, 0).
    depth: [B, N] int32 depth (root 0, its children 1, ...).
    leaf_node: [R, N] bool incidence: leaf row r's path passes through node n (root included).
      Row r belongs to prompt `r // G` (rows of one prompt are contiguous).
    node_of: [R, T] int32 node id of each completion token of row r (0 off the mask).
  """

  parent: jax.Array
  depth: jax.Array
  leaf_node: jax.Array
  node_of: jax.Array


@flax.struct.dataclass
class Rollout:
  """What a sampler produces for one RL step.

  Attributes:
    prompt_tokens: [R, P] int32, left-padded.
    prompt_mask: [R, P] bool.
    tokens: [R, T] int32 completion tokens.
    mask: [R, T] bool, completion tokens that count (up to and including EOS).
    logp: [R, T] float32 behaviour-policy log-probs of the sampled tokens.
    group: [R] int32 prompt index of each row (the segment id).
    valid: [R] bool, row exists (False for padding rows).
    tree: the branching structure for tree rollouts whose estimator needs it (else None).
    prior: [R, 2] float32 (p0, w) of the row's prompt for estimators with a `prior` argument
      (V0.5, `rl_jax.rl.advantages.v05`; else None).
    step_of: [R, T] int32 step index of each completion token (`value.prm.segments.segment`),
      or None (outcome-only batches; every estimator that does not read process rewards ignores it).
    step_rewards: [R, T] float32 process rewards, or None. The reward of step h of a row is the
      sum over its tokens with `step_of == h` (`rl.process_rewards` documents what each method
      puts there).
    policy_version: [R, T] int32 RL step whose parameters drew each completion token (-1 off
      the mask), or None. Set by APRIL partial rollouts (`rollout.april`), whose carried rows mix
      versions; the update does not read it (the off-policy correction is TIS on `logp`).
  """

  prompt_tokens: jax.Array
  prompt_mask: jax.Array
  tokens: jax.Array
  mask: jax.Array
  logp: jax.Array
  group: jax.Array
  valid: jax.Array
  tree: Optional[Tree] = None
  prior: Optional[jax.Array] = None
  step_of: Optional[jax.Array] = None
  step_rewards: Optional[jax.Array] = None
  policy_version: Optional[jax.Array] = None


@flax.struct.dataclass
class SFTBatch:
  """Supervised batch: prompt [N, P] (left-padded) + target completion [N, T] (right-padded)."""

  prompt_tokens: jax.Array
  prompt_mask: jax.Array
  tokens: jax.Array
  mask: jax.Array


# Boundary checks (chex). They look at static shapes and dtypes only, so under `jit` they run once,
# at trace time, and cost nothing per step; a bad batch fails with the field's shape in the message.


def check_sft_batch(batch: SFTBatch) -> None:
  """Asserts an SFTBatch's layout: prompt [N, P] and completion [N, T] token/mask pairs, int
  tokens, bool masks."""
  chex.assert_rank([batch.prompt_tokens, batch.prompt_mask, batch.tokens, batch.mask], 2)
  chex.assert_equal_shape([batch.prompt_tokens, batch.prompt_mask])
  chex.assert_equal_shape([batch.tokens, batch.mask])
  chex.assert_equal_shape_prefix([batch.prompt_tokens, batch.tokens], 1)
  chex.assert_type([batch.prompt_tokens, batch.tokens, batch.prompt_mask, batch.mask],
                   [int, int, bool, bool])


def check_rollout(rollout: Rollout, rewards: Optional[jax.Array] = None) -> None:
  """Asserts a Rollout's layout (the shapes in its docstring, int tokens, bool masks, float
  log-probs) and, if given, that `rewards` is [R] or [R, K]."""
  chex.assert_rank([rollout.prompt_tokens, rollout.prompt_mask, rollout.tokens, rollout.mask,
                    rollout.logp, rollout.group, rollout.valid], [2, 2, 2, 2, 2, 1, 1])
  chex.assert_equal_shape([rollout.prompt_tokens, rollout.prompt_mask])
  chex.assert_equal_shape([rollout.tokens, rollout.mask, rollout.logp])
  chex.assert_equal_shape_prefix([rollout.prompt_tokens, rollout.tokens, rollout.group,
                                  rollout.valid], 1)
  chex.assert_type([rollout.prompt_tokens, rollout.tokens, rollout.group, rollout.prompt_mask,
                    rollout.mask, rollout.valid, rollout.logp],
                   [int, int, int, bool, bool, bool, float])
  if (rollout.step_of is None) != (rollout.step_rewards is None):
    raise ValueError("Rollout.step_of and step_rewards come together (both or neither)")
  if rollout.step_of is not None:
    chex.assert_equal_shape([rollout.tokens, rollout.step_of, rollout.step_rewards])
    chex.assert_type([rollout.step_of, rollout.step_rewards], [int, float])
  if rollout.policy_version is not None:
    chex.assert_equal_shape([rollout.tokens, rollout.policy_version])
    chex.assert_type(rollout.policy_version, int)
  if rewards is not None:
    chex.assert_rank(rewards, {1, 2})
    chex.assert_axis_dimension(rewards, 0, rollout.tokens.shape[0])
