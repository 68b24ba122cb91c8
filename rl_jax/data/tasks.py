"""Verifiable tasks: reasoning-gym adapter, train/dev/test split, noisy demonstrations.

A task turns a procedural generator into lists of `TaskExample` (train, held-out and, optionally,
test; no held-out or test prompt text in train) and a binary scorer that never raises. The
held-out set is the *dev* set: every choice of settings (a method, a hyper-parameter) is made on
it. The test set (`test_size` > 0, off by default) is for the result tables only; it is drawn
from its own seed range, so turning it on changes neither the train nor the dev set.

For `chain_sum` this module also defines the *dropped-carry* error used by the default experiment:
supervised demonstrations whose answer forgets the carry (or borrow) out of the units column with
probability `noise`, so the warm-started policy is confidently wrong on that class and RL with the
exact verifier has something to fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import re
from typing import Any, Callable, Dict, Iterable, List, Mapping, Sequence

import numpy as np
import reasoning_gym
from reasoning_gym.factory import DATASETS as _RG_DATASETS

from rl_jax.data.math_answers import after_thinking

# Held-out, train and test items come from three reasoning-gym seeds this far apart (test at twice
# the offset). reasoning-gym seeds item i with `seed + i`, so the index ranges never meet while
# fewer than this many are drawn.
_TRAIN_SEED_OFFSET = 2**30
# At most `_DRAW_FACTOR * n + _DRAW_SLACK` draws are made to collect n kept items.
_DRAW_FACTOR = 4
_DRAW_SLACK = 1000


@dataclasses.dataclass(frozen=True)
class TaskExample:
  """One prompt with its reference answer.

  Attributes:
    prompt: the text shown to the policy.
    answer: the reference (or, for demonstrations, the demonstrated) answer text.
    meta: free-form extras; reasoning-gym tasks put the raw entry under `meta['entry']`, which is
      what `ReasoningGymTask.score` checks against. Not part of the hash.
  """

  prompt: str
  answer: str
  meta: Dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)


def extract_answer(completion: Any) -> str:
  """The answer part of a completion: stripped text before the first newline of what follows
  its thinking block (`after_thinking`; the whole text when there is none; '' if not a str)."""
  if not isinstance(completion, str):
    return ""
  return after_thinking(completion).strip().split("\n", 1)[0].strip()


_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


def last_number(completion: Any) -> str:
  """The last number in a completion, thousands commas removed ('' if none or not a str).

  For chain-of-thought answers that end with the result ('... so John has 288 in total.' ->
  '288'); a chat model rarely puts the bare answer on its first line. Only the text after the
  thinking block counts (`after_thinking`).
  """
  if not isinstance(completion, str):
    return ""
  numbers = _NUMBER.findall(after_thinking(completion))
  return numbers[-1].replace(",", "") if numbers else ""


# config.task.answer_extraction -> the function that takes a completion to the scored answer.
ANSWER_EXTRACTIONS: Dict[str, Callable[[Any], str]] = {
    "first_line": extract_answer,
    "last_number": last_number,
}


def _seeds(seed: int) -> tuple[int, int]:
  """(held-out seed, train seed) for a user seed; distinct user seeds give unrelated streams."""
  base = int(np.random.SeedSequence(seed).generate_state(1, np.uint32)[0]) >> 2
  return base, base + _TRAIN_SEED_OFFSET


def _test_seed(seed: int) -> int:
  """The test set's reasoning-gym seed: past the train range (`_seeds`)."""
  return _seeds(seed)[0] + 2 * _TRAIN_SEED_OFFSET


def check_positive(name: str, value: Any) -> int:
  """`value` as an int; a ValueError naming `name` unless it is a positive integer."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
    raise ValueError(f"{name} must be a positive int, got {value!r}")
  return int(value)


def check_non_negative(name: str, value: Any) -> int:
  """`value` as an int; a ValueError naming `name` unless it is an integer >= 0."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
    raise ValueError(f"{name} must be an int >= 0, got {value!r}")
  return int(value)


class SplitTask:
  """A task's fixed train, held-out (dev) and test example lists (set `_train` / `_heldout`,
  and `_test` when the task has a test set)."""

  _train: List[TaskExample]
  _heldout: List[TaskExample]
  _test: List[TaskExample] = []
  # Whether the constructor takes `test_size` (`make_task` refuses config.task.test_size > 0
  # for a task that does not).
  takes_test_size = False

  @property
  def train(self) -> List[TaskExample]:
    return self._train

  @property
  def heldout(self) -> List[TaskExample]:
    """The dev set: the problems every choice of settings is made on."""
    return self._heldout

  @property
  def test(self) -> List[TaskExample]:
    """The test set, for the result tables only ([] when the task has none)."""
    return self._test


class ReasoningGymTask(SplitTask):
  """A reasoning-gym dataset as a train set, a held-out set and a binary scorer.

  The held-out set is `eval_size` *distinct* prompts drawn from one seed; the train set is
  `train_size` draws from a disjoint seed range with every held-out prompt text dropped (draws
  continue until `train_size` are kept). Train keeps repeats, so it follows the task's own
  distribution minus the held-out prompts. With `test_size` > 0, a test set of that many
  distinct prompts is drawn from a third seed range, none of them held-out or train prompts (so
  train and held-out are the same with or without it). All are deterministic functions of
  (name, options, seed, sizes).

  Args:
    name: reasoning-gym dataset name, e.g. 'chain_sum'.
    options: keyword options of that dataset's config, e.g. {'min_terms': 2, 'max_terms': 2}.
    seed: non-negative int; held-out and train seeds are derived from it.
    train_size: number of train examples (> 0).
    eval_size: number of distinct held-out examples (> 0).
    answer_extraction: how `score` finds the answer in a completion, a key of
      `ANSWER_EXTRACTIONS`: 'first_line' (the default; short-answer tasks) or 'last_number'
      (chain-of-thought completions of numeric tasks such as gsm_symbolic).
    test_size: number of distinct test examples (>= 0; 0 = no test set).
  """

  takes_test_size = True

  def __init__(self, name: str, options: Mapping[str, Any] | None, seed: int,
               train_size: int, eval_size: int, answer_extraction: str = "first_line",
               test_size: int = 0):
    if answer_extraction not in ANSWER_EXTRACTIONS:
      raise ValueError(f"answer_extraction (config.task.answer_extraction) must be one of "
                       f"{list(ANSWER_EXTRACTIONS)}, got {answer_extraction!r}")
    self._extract = ANSWER_EXTRACTIONS[answer_extraction]
    self.answer_extraction = answer_extraction
    if name not in _RG_DATASETS:
      close = difflib.get_close_matches(str(name), list(_RG_DATASETS), n=3)
      raise ValueError(
          f"task name {name!r} is not a reasoning-gym dataset; closest: {close}; valid names "
          f"include {sorted(_RG_DATASETS)[:10]} ... ({len(_RG_DATASETS)} in all)")
    train_size = check_positive("train_size", train_size)
    eval_size = check_positive("eval_size", eval_size)
    test_size = check_non_negative("test_size", test_size)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
      raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    self.name = name
    self.options = dict(options or {})
    self.seed = int(seed)
    heldout_seed, train_seed = _seeds(self.seed)
    heldout_ds = self._dataset(heldout_seed, _max_draws(eval_size))
    self._heldout = _collect(heldout_ds, eval_size, distinct=True, exclude=frozenset())
    if len(self._heldout) < eval_size:
      raise ValueError(
          f"eval_size={eval_size} is larger than the number of distinct {name!r} problems "
          f"available with options {self.options}: found {len(self._heldout)} in "
          f"{len(heldout_ds)} draws")
    exclude = frozenset(ex.prompt for ex in self._heldout)
    train_ds = self._dataset(train_seed, _max_draws(train_size))
    self._train = _collect(train_ds, train_size, distinct=False, exclude=exclude)
    if not self._train:
      raise ValueError(
          f"train set is empty after de-duplication: every {name!r} prompt drawn "
          f"({len(train_ds)} draws) is in the held-out set (eval_size={eval_size}); "
          "lower eval_size or widen options")
    if len(self._train) < train_size:
      logging.warning("%s: only %d of train_size=%d train examples after de-duplication",
                      name, len(self._train), train_size)
    self._test = self._test_set(test_size, exclude)
    # Scoring only needs one dataset object; its seed is irrelevant to `score_answer`.
    self._scorer = heldout_ds

  def _test_set(self, size: int, heldout: frozenset) -> List[TaskExample]:
    """`size` distinct prompts of the test seed range, none in held-out or train."""
    if not size:
      return []
    ds = self._dataset(_test_seed(self.seed), _max_draws(size))
    test = _collect(ds, size, distinct=True,
                    exclude=heldout | frozenset(ex.prompt for ex in self._train))
    if len(test) < size:
      raise ValueError(
          f"test_size={size} (config.task.test_size) is larger than the number of distinct "
          f"{self.name!r} problems with options {self.options} outside the held-out and train "
          f"sets: found {len(test)} in {len(ds)} draws")
    return test

  def _dataset(self, seed: int, size: int):
    try:
      return reasoning_gym.create_dataset(self.name, seed=seed, size=size, **self.options)
    except (TypeError, AssertionError, ValueError) as e:
      raise ValueError(f"bad options {self.options} for task {self.name!r}: {e}") from e

  def score(self, completion: str, example: TaskExample) -> float:
    """1.0 iff the task's `score_answer` gives full credit to the extracted answer, else 0.0.

    reasoning-gym gives partial credit for substrings ('-12' scores 2/3 against '12'); that is
    binarized away. Never raises: any malformed input or scorer exception scores 0.0.
    Note that chain_sum's scorer compares as decimals after deleting commas, so '+29', '029',
    '29.0', '2,9', '2_9' and non-ASCII digits all count as 29; `exact_match` is the strict one.
    The answer is the completion's first line, or its last number with
    answer_extraction='last_number' (gsm_symbolic's scorer then compares it numerically).
    """
    try:
      answer = self._extract(completion)
      if not answer:
        return 0.0
      entry = example.meta["entry"]
      value = float(self._scorer.score_answer(answer, entry))
    except Exception:  # Any failure, ours or the scorer's, is a wrong answer, never a crash.
      return 0.0
    return 1.0 if value == 1.0 else 0.0


def _max_draws(n: int) -> int:
  draws = _DRAW_FACTOR * n + _DRAW_SLACK
  if draws > _TRAIN_SEED_OFFSET:
    raise ValueError(f"size {n} too large: at most {_TRAIN_SEED_OFFSET // _DRAW_FACTOR} supported")
  return draws


def _collect(dataset, n: int, *, distinct: bool,
             exclude: frozenset) -> List[TaskExample]:
  """The first n entries of `dataset` whose prompt is not excluded (nor repeated, if distinct)."""
  out, seen = [], set()
  for i in range(len(dataset)):
    entry = dataset[i]
    prompt = entry["question"]
    if prompt in exclude or (distinct and prompt in seen):
      continue
    seen.add(prompt)
    out.append(TaskExample(prompt=prompt, answer=str(entry["answer"]), meta={"entry": entry}))
    if len(out) == n:
      break
  return out


# --- chain_sum: the dropped-carry error ---------------------------------------------------------

_TERM = re.compile(r"^[+-]?\d+$")


def signed_terms(example: TaskExample) -> List[int]:
  """The signed terms of a chain_sum expression: '23 - 60' -> [23, -60]."""
  try:
    expression = example.meta["entry"]["metadata"]["expression"]
  except (KeyError, TypeError):
    raise ValueError("example.meta['entry']['metadata']['expression'] is missing; "
                     "expected a chain_sum example") from None
  parts = expression.split()
  ok = len(parts) % 2 == 1 and all(_TERM.match(p) for p in parts[::2])
  ok = ok and all(op in ("+", "-") for op in parts[1::2])
  if not ok:
    raise ValueError(f"expression {expression!r} is not 'a (+|-) b ...' with integer terms")
  signs = [1] + [1 if op == "+" else -1 for op in parts[1::2]]
  return [s * int(t) for s, t in zip(signs, parts[::2])]


def units_sum(terms: Sequence[int]) -> int:
  """Signed sum of units digits: each term contributes sign(t) * (|t| mod 10)."""
  return sum(int(math.copysign(abs(t) % 10, t)) for t in terms)


def carry_class(example: TaskExample) -> bool:
  """Whether a chain_sum problem carries or borrows out of the units column.

  Rule: let u be the signed sum of the terms' units digits ('27 + 15' -> 7 + 5 = 12,
  '5 - 9' -> 5 - 9 = -4, '23 - 60' -> 3 - 0 = 3). The problem is in the carry class iff u is
  outside [0, 9], i.e. the units column alone does not give the answer's units digit.
  """
  u = units_sum(signed_terms(example))
  return not 0 <= u <= 9


def dropped_carry_answer(example: TaskExample) -> str:
  """The answer with the units-column carry/borrow forgotten: correct - 10 * floor(u / 10).

  u is the signed units sum of `carry_class`. '27 + 15' -> 42 - 10 = '32';
  '5 - 9' -> -4 + 10 = '6'. Equals the correct answer outside the carry class. The correct
  answer is recomputed from the expression, so this works on already-corrupted demonstrations.
  """
  terms = signed_terms(example)
  return str(sum(terms) - 10 * (units_sum(terms) // 10))


def demonstrations(examples: Iterable[TaskExample], *, noise: float,
                   rng: np.random.Generator) -> List[TaskExample]:
  """SFT demonstrations with a systematic error: carry-class answers dropped w.p. `noise`.

  Each example draws one uniform from `rng` (whatever its class, so the stream does not depend
  on the data); a carry-class example with draw < noise gets `dropped_carry_answer`. Copies carry
  `meta['dropped_carry']` (bool). The true entry stays in `meta['entry']`, so `task.score` still
  checks against the correct answer.

  Args:
    examples: chain_sum examples.
    noise: probability in [0, 1] of dropping the carry on a carry-class example; 0 is clean.
    rng: numpy Generator.
  """
  if not isinstance(noise, (int, float, np.floating)) or not 0.0 <= noise <= 1.0:
    raise ValueError(f"noise must be a float in [0, 1], got {noise!r}")
  examples = list(examples)
  draws = rng.random(len(examples))
  out = []
  for ex, d in zip(examples, draws):
    drop = bool(d < noise) and carry_class(ex)
    answer = dropped_carry_answer(ex) if drop else ex.answer
    out.append(dataclasses.replace(ex, answer=answer, meta={**ex.meta, "dropped_carry": drop}))
  return out


# --- registry ----------------------------------------------------------------------------------

# name -> builder(name, options, seed, train_size, eval_size). Any reasoning-gym name not listed
# here is built as a plain ReasoningGymTask by `make_task`.
TASKS: Dict[str, Callable[..., ReasoningGymTask]] = {
    "chain_sum": ReasoningGymTask,
}


def make_task(name: str, options: Mapping[str, Any] | None, seed: int, train_size: int,
              eval_size: int, answer_extraction: str = "first_line",
              test_size: int = 0) -> ReasoningGymTask:
  """Builds the task a config names (config.task.name, config.task.options, ...).

  `answer_extraction` other than 'first_line' is passed on to reasoning-gym tasks only (other
  builders, such as 'jsonl', have their own answer format and raise a ValueError). So is
  `test_size` > 0 (config.task.test_size: reasoning-gym tasks and the ladder have a test set).
  """
  builder = TASKS.get(name, ReasoningGymTask)
  test = {}
  if test_size:
    if not getattr(builder, "takes_test_size", False):
      raise ValueError(f"config.task.test_size={test_size!r}: task {name!r} has no test set; "
                       "expected 0 (reasoning-gym tasks and 'ladder' take a test_size)")
    test = {"test_size": test_size}
  if answer_extraction == "first_line":
    return builder(name, options, seed, train_size, eval_size, **test)
  if not (isinstance(builder, type) and issubclass(builder, ReasoningGymTask)):
    raise ValueError(f"config.task.answer_extraction={answer_extraction!r} applies to "
                     f"reasoning-gym tasks only; task {name!r} reads its answers its own way "
                     "(the jsonl task: the first line; math: math-verify after the thinking "
                     "block); set 'first_line'")
  return builder(name, options, seed, train_size, eval_size,
                 answer_extraction=answer_extraction, **test)

