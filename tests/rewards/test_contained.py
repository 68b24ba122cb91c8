"""rl_jax.rewards.contained: a reward that raises or runs past its limit scores 0, is counted and
never stops the caller; well-behaved rewards score exactly as the plain verifiers do."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from rl_jax import rewards
from rl_jax.data.tasks import TaskExample
from rl_jax.rewards import contained

import _fault_rewards  # pylint: disable=g-bad-import-order (a sibling helper module)

for _name, _fn in (("test_boom", _fault_rewards.boom), ("test_sleepy", _fault_rewards.sleepy),
                   ("test_logged", _fault_rewards.logged)):
  if _name not in rewards.REWARDS:
    rewards.REWARDS.register(_name)(_fn)

_EXAMPLES = [TaskExample(prompt="3 + 4 =", answer="7")] * 4


def test_thread_scorer_equals_plain_verifiers_on_good_rewards():
  texts = ["7", " 7\nmore", "8", ""]
  scorer = contained.ContainedScorer(None, timeout=5.0)
  got, stats = scorer.score_components(texts, _EXAMPLES, ("exact_match", "format"))
  want = rewards.score_components(None, texts, _EXAMPLES, ("exact_match", "format"))
  np.testing.assert_array_equal(got, want)
  assert got.dtype == np.float32 and got.shape == (4, 2)
  assert stats.as_metrics() == {"reward/errors": 0, "reward/timeouts": 0, "reward/calls": 8}


@pytest.mark.parametrize("isolation", ["thread", "inline"])
def test_a_raise_scores_zero_is_counted_and_logged_a_few_times(isolation, caplog):
  scorer = contained.ContainedScorer(None, timeout=5.0, isolation=isolation, max_logged=2)
  texts = ["boom1", "7", "boom2", "boom3"]
  with caplog.at_level(logging.WARNING, logger=contained.__name__):
    got, stats = scorer.score_components(texts, _EXAMPLES, ("test_boom",))
  np.testing.assert_array_equal(got[:, 0], [0.0, 1.0, 0.0, 0.0])
  assert (stats.errors, stats.timeouts) == (3, 0)
  logged = [r.getMessage() for r in caplog.records]
  assert len(logged) == 2  # max_logged: the third error is counted only.
  assert "ZeroDivisionError" in logged[0] and "'boom1'" in logged[0] and "test_boom" in logged[0]
  assert scorer.totals.errors == 3


def test_a_reward_past_its_limit_scores_zero_and_the_batch_goes_on():
  scorer = contained.ContainedScorer(None, timeout=0.2)
  texts = ["a", "hang", "b", "hang"]
  t0 = time.monotonic()
  got, stats = scorer.score_components(texts, _EXAMPLES, ("test_sleepy", "exact_match"))
  took = time.monotonic() - t0
  np.testing.assert_array_equal(got[:, 0], [0.5, 0.0, 0.5, 0.0])
  np.testing.assert_array_equal(got[:, 1], [0.0, 0.0, 0.0, 0.0])
  assert (stats.errors, stats.timeouts) == (0, 2)
  assert took < _fault_rewards.SLEEP / 2  # Two limits of 0.2 s, not two sleeps.
  # The scorer is still usable after abandoning workers.
  again, stats = scorer.score_components(["7"], _EXAMPLES[:1], ("exact_match",))
  assert again[0, 0] == 1.0 and stats.timeouts == 0
  assert scorer.totals.timeouts == 2


def test_an_abandoned_call_that_returns_late_makes_no_further_calls():
  _fault_rewards.CALLS.clear()
  scorer = contained.ContainedScorer(None, timeout=0.1)
  got, stats = scorer.score_components(["slow", "a", "b"], _EXAMPLES[:3], ("test_logged",))
  assert got[:, 0].tolist() == [0.0, 1.0, 1.0] and stats.timeouts == 1
  time.sleep(0.7)  # The abandoned worker's call returns meanwhile.
  assert _fault_rewards.CALLS == ["slow", "a", "b"]


def test_process_isolation_kills_a_hanging_reward_and_keeps_scoring():
  scorer = contained.ContainedScorer(None, timeout=0.5, isolation="process")
  try:
    # The examples are not pickled TaskExamples, so the child imports no task library: it
    # starts in a fraction of a second.
    got, stats = scorer.score_components(["hang", "x", "boom", "7"], [None] * 4,
                                         ("test_sleepy", "test_boom"))
    np.testing.assert_array_equal(got, [[0.0, 0.0], [0.5, 0.0], [0.5, 0.0], [0.5, 1.0]])
    assert (stats.errors, stats.timeouts) == (1, 1)
  finally:
    scorer.close()
  assert scorer._proc is None  # pylint: disable=protected-access


def test_bad_settings_are_named_errors():
  with pytest.raises(ValueError, match="isolation must be one of"):
    contained.ContainedScorer(None, timeout=1.0, isolation="fork")
  with pytest.raises(ValueError, match="timeout must be > 0"):
    contained.ContainedScorer(None, timeout=0.0)
  with pytest.raises(KeyError, match="nope"):
    contained.ContainedScorer(None, timeout=1.0).score_components(["x"], _EXAMPLES[:1], ("nope",))


def test_hanging_calls_run_concurrently_after_the_first_timeout():
  """A reward that hangs on every call costs about one limit per batch, not one per call."""
  if "test_always_hangs" not in rewards.REWARDS:
    rewards.REWARDS.register("test_always_hangs")(_fault_rewards.always_hangs)
  scorer = contained.ContainedScorer(None, timeout=0.2)
  texts = [str(i) for i in range(16)]
  t0 = time.monotonic()
  got, stats = scorer.score_components(texts, [_EXAMPLES[0]] * 16, ("test_always_hangs",))
  first = time.monotonic() - t0
  t0 = time.monotonic()
  _, again = scorer.score_components(texts, [_EXAMPLES[0]] * 16, ("test_always_hangs",))
  second = time.monotonic() - t0
  assert stats.timeouts == again.timeouts == 16 and not got.any()
  assert first < 8 * 0.2 and second < 5 * 0.2, (first, second)  # Sequential: 16 x 0.2 s.


def test_failure_streak_stops_after_n_steps_whose_every_call_failed():
  streak = contained.FailureStreak(2)
  streak.update("rl", 1, {"reward/calls": 4, "reward/errors": 4})
  streak.update("rl", 2, {"reward/calls": 4, "reward/errors": 3})  # One call scored: reset.
  streak.update("rl", 3, {"reward/calls": 4, "reward/errors": 2, "reward/timeouts": 2})
  streak.update("sft", 3, {"loss": 1.0})  # No reward calls: not counted.
  with pytest.raises(contained.RewardsFailedError, match=r"rl steps 3-4: every reward call "
                     r"failed in 2 steps in a row \(last step: 4 raised, 0 timed out of 4"):
    streak.update("rl", 4, {"reward/calls": 4, "reward/errors": 4})
