"""LATR branching / pruning metrics vs docs/algorithms.md §3.1 and plain-python DPs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax.sampling import tree_metrics as tm


def _ed_ref(a, b):
  """Textbook Levenshtein DP."""
  d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
  for i in range(1, len(a) + 1):
    for j in range(1, len(b) + 1):
      d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
  return d[-1][-1]


def _lcs_ref(a, b):
  d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
  for i in range(1, len(a) + 1):
    for j in range(1, len(b) + 1):
      d[i][j] = (d[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1]
                 else max(d[i - 1][j], d[i][j - 1]))
  return d[-1][-1]


def _suffix_ref(a, b):
  """Longest suffix of a that occurs contiguously in b (brute force)."""
  a, b = list(a), list(b)
  best = 0
  for length in range(1, len(a) + 1):
    suf = a[len(a) - length:]
    if any(b[o:o + length] == suf for o in range(len(b) - length + 1)):
      best = length
  return best


# ------------------------------------------------------------ (i) branching


def test_branch_candidates_spec_cases():
  top = jnp.asarray([[0.5, 0.3], [0.45, 0.35]])
  # Countdown thresholds τ_abs=0.25, τ_rel=0.15: gap 0.2 -> no branch; gap 0.1 -> branch.
  np.testing.assert_array_equal(tm.branch_candidates(top, 0.25, 0.15),
                                [[False, False], [False, True]])
  # Math thresholds τ_abs=0.15, τ_rel=0.25: (0.5, 0.3) branches.
  np.testing.assert_array_equal(tm.branch_candidates(top[0], 0.15, 0.25), [False, True])


def test_branch_candidates_both_thresholds_and_rank_one_never():
  # p_2 = 0.2 fails τ_abs = 0.25 though the gap is small; rank 1 is never a candidate even
  # when it passes both tests; ranks 3+ are judged against p_1.
  top = jnp.asarray([[0.22, 0.2, 0.01], [0.4, 0.3, 0.28]])
  np.testing.assert_array_equal(tm.branch_candidates(top, 0.25, 0.15),
                                [[False, False, False], [False, True, True]])
  got = jax.jit(tm.branch_candidates, static_argnums=(1, 2))(top.reshape(1, 2, 3), 0.1, 0.15)
  np.testing.assert_array_equal(got[0], [[False, True, False], [False, True, True]])


# ------------------------------------------------------------ (ii) pruning


def test_prune_edit_distance_spec_cases():
  child = jnp.asarray([1, 2, 3, 4, 5])
  close, far = jnp.asarray([1, 2, 3, 4, 6]), jnp.asarray([7, 8, 9, 4, 6])
  np.testing.assert_allclose(tm.normalized_edit_distance(child, close), 0.2, atol=1e-6)
  np.testing.assert_allclose(tm.normalized_edit_distance(child, far), 0.8, atol=1e-6)
  assert bool(tm.prune_mask(child, close, ed_threshold=0.4))
  assert not bool(tm.prune_mask(child, far, ed_threshold=0.4))


def test_prune_mask_criteria_and_disabled():
  a = jnp.asarray([[1, 2, 3, 4], [1, 2, 3, 4], [5, 6, 7, 8]])
  b = jnp.asarray([[9, 3, 4, 9], [1, 2, 3, 4], [1, 2, 3, 4]])
  # suffix match: 0.5, 1.0, 0.0; ROUGE-L: 0.5, 1.0, 0.0; ED/r: 0.75, 0.0, 1.0.
  np.testing.assert_array_equal(tm.prune_mask(a, b), [False, False, False])
  np.testing.assert_array_equal(tm.prune_mask(a, b, sm_threshold=0.2), [True, True, False])
  np.testing.assert_array_equal(tm.prune_mask(a, b, sm_threshold=0.6), [False, True, False])
  np.testing.assert_array_equal(tm.prune_mask(a, b, rl_threshold=0.5), [False, True, False])
  np.testing.assert_array_equal(tm.prune_mask(a, b, ed_threshold=0.8), [True, True, False])
  np.testing.assert_array_equal(
      tm.prune_mask(a, b, ed_threshold=0.1, rl_threshold=0.4), [True, True, False])


# ------------------------------------------------------------ (iii) suffix match


def test_suffix_match_spec_case():
  a, b = jnp.asarray([1, 2, 3, 4]), jnp.asarray([9, 3, 4, 9])
  np.testing.assert_allclose(tm.suffix_match(a, b), 0.5)
  np.testing.assert_allclose(tm.suffix_match(b, a), 0.5)   # symmetric score
  assert bool(tm.prune_mask(a, b, sm_threshold=0.2))


def test_suffix_match_uses_the_longer_direction():
  # Suffix of b [5, 6, 7] sits inside a; a's suffix [8] is not in b.
  a, b = jnp.asarray([5, 6, 7, 1, 8]), jnp.asarray([0, 0, 5, 6, 7])
  np.testing.assert_allclose(tm.suffix_match(a, b), 3 / 5)


# ------------------------------------------------------------ ROUGE-L


def test_rouge_l_hand_case():
  # LCS([1,2,3,4,5,6], [2,9,4,6,1,5]) = [2,4,6] or [2,4,5]: length 3.
  a, b = jnp.asarray([1, 2, 3, 4, 5, 6]), jnp.asarray([2, 9, 4, 6, 1, 5])
  assert int(tm.lcs_length(a, b)) == 3
  np.testing.assert_allclose(tm.rouge_l(a, b), 0.5)
  np.testing.assert_allclose(tm.rouge_l(a, a), 1.0)


# ------------------------------------------------------------ vs python DPs


@pytest.mark.parametrize('r,vocab', [(1, 2), (7, 3), (20, 4), (50, 6)])
def test_against_python_dps(r, vocab):
  rng = np.random.default_rng(r)
  a = rng.integers(0, vocab, (2, 3, r)).astype(np.int32)
  b = rng.integers(0, vocab, (2, 3, r)).astype(np.int32)
  b[0, 0] = a[0, 0]                                        # identical pair
  b[0, 1, 1:], b[0, 1, 0] = a[0, 1, :-1], vocab            # shifted by one
  funcs = jax.jit(lambda x, y: (tm.edit_distance(x, y), tm.lcs_length(x, y),
                                tm.suffix_match(x, y)))
  ed, lcs, sm = (np.asarray(z) for z in funcs(a, b))
  assert ed.shape == lcs.shape == sm.shape == (2, 3)
  assert ed.dtype == np.int32 and sm.dtype == np.float32
  for idx in np.ndindex(2, 3):
    assert ed[idx] == _ed_ref(a[idx], b[idx]), idx
    assert lcs[idx] == _lcs_ref(a[idx], b[idx]), idx
    best = max(_suffix_ref(a[idx], b[idx]), _suffix_ref(b[idx], a[idx]))
    np.testing.assert_allclose(sm[idx], best / r, err_msg=str(idx))
  assert ed[0, 0] == 0 and lcs[0, 0] == r
  if r > 1:
    assert ed[0, 1] <= 2 and lcs[0, 1] >= r - 1


def test_broadcasting_and_vmap_shapes():
  child = jnp.asarray(np.arange(24).reshape(2, 3, 4) % 5)
  parent = jnp.asarray([0, 1, 2, 3])                       # broadcast against [2, 3, 4]
  for fn in (tm.edit_distance, tm.normalized_edit_distance, tm.suffix_match, tm.rouge_l):
    assert fn(child, parent).shape == (2, 3)
  assert tm.prune_mask(child, parent, ed_threshold=0.5).shape == (2, 3)
  np.testing.assert_array_equal(jax.vmap(tm.edit_distance)(child, jnp.broadcast_to(
      parent, child.shape)), tm.edit_distance(child, parent))
  assert int(tm.edit_distance(child, parent)[0, 0]) == 0


def test_empty_window_is_an_error():
  with pytest.raises(ValueError, match='non-empty'):
    tm.edit_distance(jnp.zeros((3, 0), jnp.int32), jnp.zeros((3, 0), jnp.int32))
