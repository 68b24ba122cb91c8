"""grain over a TFDS split: seeded epoch shuffling, and an iterator state that checkpoints resume."""

from __future__ import annotations

import chex
import jax
import pytest

from rl_jax.checkpoint import CheckpointMismatchError, Checkpointer
from rl_jax.data import grain_source, tfds_builders

_CHAIN = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2, allow_negation=False)


@pytest.fixture(scope="module")
def train_source(tmp_path_factory):
  spec = tfds_builders.task_spec("chain_sum", _CHAIN, 0, 30, 5)
  return tfds_builders.prepare_task(spec, str(tmp_path_factory.mktemp("tfds")))["train"]


def _take(stream, n):
  return [stream.next_indices().tolist() for _ in range(n)]


def test_epochs_are_seeded_permutations(train_source):
  n = len(train_source)
  assert n == 30
  batches = _take(grain_source.ProblemStream(train_source, 5, seed=1), 12)  # Two epochs.
  assert all(len(b) == 5 for b in batches)
  first, second = sum(batches[:6], []), sum(batches[6:], [])
  assert sorted(first) == list(range(n)) and sorted(second) == list(range(n))
  assert first != second and first != list(range(n))  # Shuffled, anew every epoch.
  assert _take(grain_source.ProblemStream(train_source, 5, seed=1), 12) == batches
  assert _take(grain_source.ProblemStream(train_source, 5, seed=2), 12) != batches
  plain = _take(grain_source.ProblemStream(train_source, 5, seed=1, shuffle=False), 6)
  assert sorted(sum(plain, [])) == list(range(n))


def test_checkpoint_restores_the_data_order(train_source, tmp_path):
  state = {"w": jax.numpy.arange(3.0)}
  stream = grain_source.ProblemStream(train_source, 4, seed=5)
  with Checkpointer(tmp_path / "ckpt", save_every=1, data_iterator=stream.iterator) as ckpt:
    _take(stream, 3)
    ckpt.maybe_save(3, state, {"phase": "test"})
    want = _take(stream, 10)  # Crosses an epoch boundary (30 records, 7 batches an epoch).
  fresh = grain_source.ProblemStream(train_source, 4, seed=5)
  with Checkpointer(tmp_path / "ckpt", save_every=1, data_iterator=fresh.iterator) as ckpt:
    restored, meta = ckpt.restore(3, state)
  assert meta == {"phase": "test"}
  chex.assert_trees_all_equal(restored, state)
  assert _take(fresh, 10) == want
  with Checkpointer(tmp_path / "ckpt", save_every=1) as plain:  # e.g. config.init_from
    chex.assert_trees_all_equal(plain.restore(3, state), (state, {"phase": "test"}))
  assert _take(grain_source.ProblemStream(train_source, 4, seed=5), 10) != want


def test_checkpoint_without_data_state_is_a_clear_error(train_source, tmp_path):
  state = {"w": jax.numpy.zeros(2)}
  with Checkpointer(tmp_path / "ckpt", save_every=1) as ckpt:
    ckpt.maybe_save(1, state)
  stream = grain_source.ProblemStream(train_source, 4, seed=5)
  with Checkpointer(tmp_path / "ckpt", save_every=1, data_iterator=stream.iterator) as ckpt:
    with pytest.raises(CheckpointMismatchError, match="holds no data-iterator state.*'memory'"):
      ckpt.restore(1, state)


def test_bad_batch_sizes(train_source):
  with pytest.raises(ValueError, match="larger than the 30 records"):
    grain_source.ProblemStream(train_source, 31, seed=0)
  with pytest.raises(ValueError, match="positive multiple"):
    grain_source.ProblemStream(train_source, 0, seed=0)
  with pytest.raises(ValueError, match=r"config.data.worker_count\) must be >= 0"):
    grain_source.ProblemStream(train_source, 4, seed=0, worker_count=-1)
