"""Fuzzing with hypothesis (fixed seed, bounded examples): answer extraction, verifiers and the step
checker on arbitrary strings never raise; tokenizer decode takes arbitrary ids; config overrides
of the wrong type or out of range are named errors, never a traceback from deep inside."""

from __future__ import annotations

import functools
import glob
import os

import pytest
from absl import flags
from hypothesis import given, settings, strategies as st
from ml_collections import config_flags

from rl_jax import data, rewards
from rl_jax.data import ladder, tasks
from rl_jax.rewards import contained
from rl_jax.tokenizers import SentencePieceTokenizer, train_sentencepiece
from rl_jax.train import config_check, loop

FUZZ = settings(max_examples=150, deadline=None, derandomize=True)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = os.path.join(ROOT, "experiments", "configs", "default.py") + ":smoke"

# Arbitrary text, and text made of the characters answers and scratchpads use (which reaches the
# parsers' deeper branches far more often).
TEXT = st.one_of(st.text(max_size=80),
                 st.text(alphabet="0123456789+-=*/ .,\n\t-x", max_size=60))


@functools.cache
def _chain_sum():
  return data.make_task("chain_sum", {"min_terms": 3, "max_terms": 3, "min_digits": 1,
                                      "max_digits": 1}, 0, 20, 5)


@FUZZ
@given(TEXT)
def test_answer_extraction_never_raises(text):
  first = tasks.extract_answer(text)
  assert isinstance(first, str) and "\n" not in first and first == first.strip()
  last = tasks.last_number(text)
  assert last == "" or last.lstrip("-").replace(".", "", 1).isdigit()
  assert tasks.extract_answer(None) == "" == tasks.last_number(b"12")


@FUZZ
@given(TEXT, st.text(max_size=10))
def test_verifiers_on_arbitrary_strings_score_zero_or_one(text, answer):
  task = _chain_sum()
  example = task.train[0]
  assert rewards.exact_match(text, answer) in (0.0, 1.0)
  assert rewards.is_integer(text) in (0.0, 1.0)
  library = [n for n in rewards.REWARDS.names()  # Not those tests and benchmarks register to
             if rewards.REWARDS.get(n).__module__.startswith("rl_jax.")]  # fail on purpose.
  assert {"task_score", "exact_match", "format"} <= set(library)
  for name in library:
    assert rewards.REWARDS.get(name)(task, text, example) in (0.0, 1.0), name
  # The contained scorer agrees with the plain call on well-behaved rewards.
  got, stats = contained.ContainedScorer(task, timeout=10.0, isolation="inline").score_components(
      [text], [example], ("task_score", "format"))
  assert got.tolist() == [[task.score(text, example), rewards.is_integer(text)]]
  assert stats.errors == 0


@FUZZ
@given(TEXT, st.lists(st.integers(-99, 99), min_size=2, max_size=6))
def test_step_checker_on_arbitrary_strings(text, terms):
  check = ladder.check_scratchpad(text, terms, sum(terms))
  assert 0 <= check.first_error <= check.num_steps == len(terms) - 1
  assert len(check.steps_correct) == check.num_steps
  assert 0.0 <= check.reward <= 1.0
  expression = " ".join([str(terms[0])] + [f"{'+' if t >= 0 else '-'} {abs(t)}"
                                           for t in terms[1:]])
  entry = {"question": f"{expression} =", "answer": str(sum(terms)),
           "metadata": {"expression": expression, "num_terms": len(terms)}}
  example = tasks.TaskExample(prompt=entry["question"], answer=entry["answer"],
                              meta={"entry": entry})
  assert ladder.check_steps(text, example) == check


@pytest.fixture(scope="module")
def sp_tokenizer(tmp_path_factory):
  task = _chain_sum()
  texts = [e.prompt for e in task.train] + [e.answer for e in task.train]
  return train_sentencepiece(texts, str(tmp_path_factory.mktemp("tok")), vocab_size=48)


def test_tokenizer_decode_of_arbitrary_ids(sp_tokenizer):
  # One tokenizer for all examples (hypothesis and function-scoped fixtures do not mix).
  tok = SentencePieceTokenizer(glob.glob(os.path.join(sp_tokenizer.model_path))[0])
  n = tok.vocab_size

  @FUZZ
  @given(st.lists(st.integers(-2**40, 2**40) | st.integers(-3, n + 3), max_size=40))
  def check(ids):
    text = tok.decode(ids)
    assert isinstance(text, str)
    # Ids outside the vocabulary (a padded embedding's rows) are dropped, not an error.
    assert text == tok.decode([i for i in ids if 0 <= i < n])

  check()
  assert tok.decode(tok.encode("7 + 8 - 3 =")).replace(" ", "") == "7+8-3="


def _parse(*args):
  """The config `experiments/run.py` would get from these command-line flags."""
  fv = flags.FlagValues()
  argv = ["run", f"--config={SMOKE}", *args]
  config_flags.DEFINE_config_file("config", None, flag_values=fv, lock_config=True,
                                  sys_argv=argv)
  fv(argv)
  return fv.config


_FIELDS = [p for p in config_check.RULES if config_check._get(  # pylint: disable=protected-access
    _parse(), p) is not config_check._MISSING]  # pylint: disable=protected-access
_VALUES = st.one_of(
    st.text(max_size=12),
    st.integers(-10**12, 10**12).map(str),
    st.sampled_from(["-1", "0", "1", "0.0", "-0.5", "1.5", "2", "nan", "inf", "-inf", "True",
                     "None", "()", "'x'", "1e309"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr))


@settings(max_examples=120, deadline=None, derandomize=True)
@given(st.sampled_from(_FIELDS), _VALUES)
def test_config_override_is_accepted_or_a_named_error(field, value):
  try:
    config = _parse(f"--config.{field}={value}")
  except flags.Error as e:  # Wrong type: the flag parser names the field.
    assert not isinstance(e, flags.UnrecognizedFlagError), str(e)
    assert field in str(e), str(e)
    return
  try:
    config_check.check(config)
  except config_check.ConfigError as e:  # Out of range: named, with what was expected.
    assert f"config.{field}" in str(e) or field.split(".")[-1] in str(e), str(e)
    assert "expected" in str(e)


@pytest.mark.parametrize("override,named", [
    ("rl.steps=-1", "config.rl.steps=-1: expected an integer >= 0"),
    ("sampling.top_p=0", "config.sampling.top_p=0.0: expected a finite number in (0, 1]"),
    ("rl.optim.lr=nan", "config.rl.optim.lr=nan"),
    ("checkpoint.every=0", "config.checkpoint.every=0"),
    ("rl.reward_isolation=fork", "config.rl.reward_isolation='fork': expected one of"),
    ("rl.reward_timeout=0", "config.rl.reward_timeout=0.0"),
    ("max_nonfinite_in_a_row=0", "config.max_nonfinite_in_a_row=0"),
    ("rl.overlong_buffer=99", "config.rl.overlong_buffer=99: expected an integer in"),
])
def test_out_of_range_overrides_name_the_field(override, named, tmp_path):
  config = _parse(f"--config.{override}")
  with pytest.raises(config_check.ConfigError) as info:
    config_check.check(config)
  assert named in str(info.value)
  # loop.run refuses it before creating anything.
  with pytest.raises(config_check.ConfigError):
    loop.run(config, str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


def test_wrong_type_override_is_a_flag_error_naming_the_field():
  with pytest.raises(flags.IllegalFlagValueError, match="config.rl.steps"):
    _parse("--config.rl.steps=abc")
  assert _parse("--config.rl.steps=7").rl.steps == 7
  config_check.check(_parse())  # The unmodified config passes.
