"""The rollout history: records, per-prompt statistics, the checkpointed and JSONL forms."""

import numpy as np
import pytest

from rl_jax.value.history import HistoryError, RolloutHistory


def _history():
  h = RolloutHistory()
  h.record(step=0, prompt_ids=[5, 9], attempts=[8, 8], successes=[2, 8])
  h.record(step=1, prompt_ids=[5, 3], attempts=[4, 8], successes=[1, 0])
  return h


def test_stats_sum_records_per_prompt_and_filter_steps():
  h = _history()
  att, suc = h.stats([5, 9, 3, 11])
  np.testing.assert_array_equal(att, [12, 8, 8, 0])
  np.testing.assert_array_equal(suc, [3, 8, 0, 0])
  att, suc = h.stats([5, 5], since_step=1)
  np.testing.assert_array_equal(att, [4, 4])
  np.testing.assert_array_equal(suc, [1, 1])
  att, _ = h.stats([5], before_step=1)
  np.testing.assert_array_equal(att, [8])
  np.testing.assert_array_equal(h.last_step([5, 9, 11]), [1, 0, -1])
  assert len(h) == 4


def test_stats_of_the_last_rollouts_take_newest_records_whole():
  """Knapsack's 16-rollout buffer at record granularity: newest step first, a record enters
  whole, and the window stops at the record that reaches the count."""
  h = RolloutHistory()
  h.record(step=1, prompt_ids=[5, 9], attempts=[8, 4], successes=[0, 4])
  h.record(step=3, prompt_ids=[5, 9], attempts=[4, 4], successes=[4, 0])
  h.record(step=5, prompt_ids=[5], attempts=[8], successes=[8])
  assert [x.tolist() for x in h.stats([5, 9, 11])] == [[20, 8, 0], [12, 4, 0]]
  assert [x.tolist() for x in h.stats([5, 9, 11], last_rollouts=4)] == [[8, 4, 0], [8, 0, 0]]
  assert [x.tolist() for x in h.stats([5, 9, 11], last_rollouts=12)] == [[12, 8, 0], [12, 4, 0]]
  assert [x.tolist() for x in h.stats([5, 9], last_rollouts=13)] == [[20, 8], [12, 4]]
  assert [x.tolist() for x in h.stats([5], last_rollouts=4, before_step=5)] == [[4], [4]]
  with pytest.raises(HistoryError, match="last_rollouts=-1; expected >= 0"):
    h.stats([5], last_rollouts=-1)


def test_state_and_jsonl_round_trip(tmp_path):
  h = _history()
  assert RolloutHistory.from_state(h.state()) == h
  h.to_jsonl(tmp_path / "h.jsonl")
  assert RolloutHistory.from_jsonl(tmp_path / "h.jsonl") == h
  assert h.truncate(1) == RolloutHistory.from_state(
      {"prompt_id": [5, 9], "step": [0, 0], "attempts": [8, 8], "successes": [2, 8]})
  assert RolloutHistory.from_state(RolloutHistory().state()) == RolloutHistory()


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompt_ids=[1], attempts=[2, 3], successes=[1]), "one length"),
    (dict(prompt_ids=[1], attempts=[2], successes=[3]), "successes=3"),
    (dict(prompt_ids=[-1], attempts=[2], successes=[1]), "prompt_id=-1"),
])
def test_bad_records_are_named(kwargs, match):
  with pytest.raises(HistoryError, match=match):
    RolloutHistory().record(0, **kwargs)


def test_bad_saved_forms_are_named(tmp_path):
  with pytest.raises(HistoryError, match="lacks the fields"):
    RolloutHistory.from_state({"prompt_id": [1]})
  with pytest.raises(HistoryError, match="differ in length"):
    RolloutHistory.from_state({"prompt_id": [1], "step": [], "attempts": [1], "successes": [1]})
  (tmp_path / "bad.jsonl").write_text('{"prompt_id": 1, "step": 0, "attempts": 2}\n')
  with pytest.raises(HistoryError, match="bad.jsonl:1"):
    RolloutHistory.from_jsonl(tmp_path / "bad.jsonl")
