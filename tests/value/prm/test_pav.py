"""PAV labels: from a hand-built tree, and Monte Carlo labels of step prefixes."""

import jax
import jax.numpy as jnp
import numpy as np

from rl_jax.types import Tree
from rl_jax.value.prm import pav


def test_tree_prefix_labels_from_a_hand_built_tree():
  # one prompt, 3 leaves: root 0 -> node 1 (shared by leaves 0, 1) -> node 2 (leaf 0), node 3
  # (leaf 1); root -> node 4 (leaf 2). Rewards 1, 0, 1.
  leaf_node = np.array([[1, 1, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 0, 0, 1]], bool)
  node_of = np.array([[1, 1, 2, 2], [1, 1, 3, 0], [4, 4, 4, 4]], np.int32)
  mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]], bool)
  tree = Tree(parent=np.array([[0, 0, 1, 1, 0]]), depth=np.array([[0, 1, 2, 2, 1]]),
              leaf_node=leaf_node, node_of=node_of)
  labels, w = pav.tree_prefix_labels(tree, jnp.array([1.0, 0.0, 1.0]), mask, group_size=3)
  np.testing.assert_allclose(np.asarray(labels), [
      [2 / 3, 0.5, 0.5, 1.0, 1.0], [2 / 3, 0.5, 0.5, 0.0, 0.0], [2 / 3, 1.0, 1.0, 1.0, 1.0]],
      atol=1e-6)
  np.testing.assert_allclose(np.asarray(w), [[3, 2, 2, 1, 1], [3, 2, 2, 1, 0], [3, 1, 1, 1, 1]])


def test_prefix_prompts_left_pads_prompt_plus_prefix():
  prompt = np.array([[0, 7, 8], [5, 6, 7]])
  pm = prompt > 0
  tokens = np.array([[1, 2, 3], [4, 9, 9]])
  seq, m = pav.prefix_prompts(prompt, pm, tokens, np.array([1, 0]))
  assert seq.tolist() == [[0, 0, 7, 8, 1, 2], [0, 0, 5, 6, 7, 4]]
  assert m.sum(1).tolist() == [4, 4]


def test_tree_labels_keep_the_prompt_and_step_ends():
  from rl_jax.value.prm import data as prm_data, segments as steps_lib  # pylint: disable=import-outside-toplevel
  tokens = np.array([[4, 9, 5, 2], [4, 2, 0, 0]])
  mask = tokens > 0
  s = steps_lib.segment(tokens, mask, (9,), max_steps=3, ignore_ids=(2,), eos_id=2)
  values = np.arange(10, dtype=np.float32).reshape(2, 5) / 10
  labels, w = prm_data.tree_labels(values, s)
  assert w.tolist() == [[1, 0, 1, 0, 1], [1, 0, 1, 0, 0]]
  np.testing.assert_allclose(labels, [[0.0, 0, 0.2, 0, 0.4], [0.5, 0, 0.7, 0, 0]])
