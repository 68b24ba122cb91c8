"""The proving ground: multi-step integer chains answered as a checked scratchpad.

Problems are reasoning-gym `chain_sum` expressions of 2 to 7 terms (one- or two-digit operands,
`+`/`-`), drawn per number of terms (a *stratum*) so the held-out (dev) set, and the test set
when there is one, are stratified. A completion
is a scratchpad, one line per step, then the final answer on its own line::

    17+8-5 =          (prompt: reasoning-gym's question text)
    17+8=25           (step 0: first term, first operation)
    25-5=20           (step 1: previous line's result, next operation)
    20                (final answer)

`check_steps` grades any completion: per-step correctness, the index of the first wrong step and
the final-answer reward. A step is correct iff its line parses as `a (+|-) b = c` (spaces
allowed), `a` is the previous step's result (the first term for step 0), the operation and `b`
are the expression's, and `c = a ± b`. So every step before `first_error` is on the true running
total, and a step after it may be locally right on a wrong total. Malformed or missing lines are
wrong steps; nothing raises.

`LadderTask.demonstrations` writes SFT scratchpads with step-level errors: a step whose units
column carries or borrows (the `carry_class` rule of `tasks`, applied to the pair `a, ±b`) drops
that carry with probability `noise`, and the scratchpad continues from the wrong total. The SFT
policy's success rate then falls with the number of carrying steps, so it spreads over (0, 1) and
falls with the number of terms.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

import rl_jax.data.tasks as tasks
from rl_jax.data.tasks import SplitTask, TaskExample

_STEP = re.compile(r"^\s*(-?\d+)\s*([+-])\s*(-?\d+)\s*=\s*(-?\d+)\s*$")
_FINAL = re.compile(r"^\s*[+-]?\d+\s*$")
# Options a ladder takes (config.task.options); any other key is an error.
LADDER_OPTIONS = ("min_terms", "max_terms", "min_digits", "max_digits")
DEFAULT_OPTIONS = dict(min_terms=2, max_terms=7, min_digits=1, max_digits=2)


@dataclasses.dataclass(frozen=True)
class StepCheck:
  """The grade of one scratchpad completion.

  Attributes:
    steps_correct: one bool per expected step (number of terms - 1).
    first_error: index of the first wrong step; `num_steps` when every step is right.
    reward: 1.0 iff the final answer line is the correct result, else 0.0.
  """

  steps_correct: Tuple[bool, ...]
  first_error: int
  reward: float

  @property
  def num_steps(self) -> int:
    return len(self.steps_correct)

  @property
  def num_wrong(self) -> int:
    return self.num_steps - sum(self.steps_correct)


def signed_terms(example: TaskExample) -> List[int]:
  """The signed terms of a chain_sum example ('23 - 60 + 5' -> [23, -60, 5])."""
  return tasks.signed_terms(example)


def dropped_carry(a: int, b: int) -> int:
  """`a + b` with the units-column carry or borrow forgotten (tasks.dropped_carry_answer rule)."""
  u = tasks.units_sum([a, b])
  return a + b - 10 * (u // 10)


def carries(a: int, b: int) -> bool:
  """Whether the step `a + b` (b signed) carries or borrows out of the units column."""
  return not 0 <= tasks.units_sum([a, b]) <= 9


def step_line(a: int, b: int, c: int) -> str:
  """The scratchpad line of step `a + b = c` (b signed): '17+8=25', '25-5=20', '-3+4=1'."""
  return f"{a}{'-' if b < 0 else '+'}{abs(b)}={c}"


def scratchpad(terms: Sequence[int], results: Sequence[int]) -> str:
  """The completion text for signed `terms` and the running `results` after each step."""
  if len(results) != len(terms) - 1:
    raise ValueError(f"expected {len(terms) - 1} step results for {len(terms)} terms, got "
                     f"{len(results)}")
  lefts = [terms[0], *results[:-1]]
  lines = [step_line(a, b, c) for a, b, c in zip(lefts, terms[1:], results)]
  return "\n".join(lines + [str(results[-1])])


def _parse_step(line: str):
  m = _STEP.match(line)
  if not m:
    return None
  a, op, b, c = m.groups()
  return int(a), (int(b) if op == "+" else -int(b)), int(c)


def check_scratchpad(completion: Any, terms: Sequence[int], answer: int) -> StepCheck:
  """Grades `completion` against the signed `terms` (see the module docstring for the rules).

  The final answer is the last non-empty line when it is a bare integer; the lines before it are
  the steps, matched to the expected steps in order. A completion that is not a str grades as
  empty (every step wrong, reward 0).
  """
  n = len(terms) - 1
  text = completion if isinstance(completion, str) else ""
  lines = [line for line in text.split("\n") if line.strip()]
  reward = 0.0
  if lines and _FINAL.match(lines[-1]):
    reward = 1.0 if int(lines[-1]) == answer else 0.0
    lines = lines[:-1]
  ok, prev = [], terms[0]
  for i in range(n):
    parsed = _parse_step(lines[i]) if i < len(lines) else None
    good = parsed is not None and parsed[0] == prev and parsed[1] == terms[i + 1]
    good = good and parsed[2] == parsed[0] + parsed[1]
    ok.append(bool(good))
    prev = parsed[2] if parsed is not None else None
  first = next((i for i, g in enumerate(ok) if not g), n)
  return StepCheck(tuple(ok), first, reward)


def check_steps(completion: Any, example: TaskExample) -> StepCheck:
  """Grades a completion of a ladder (or any chain_sum) example; never raises on the completion."""
  terms = signed_terms(example)
  return check_scratchpad(completion, terms, sum(terms))


def flawed_scratchpad(terms: Sequence[int], draws: Sequence[float],
                      noise: float) -> tuple[str, List[int]]:
  """A demonstration that drops a step's carry when it carries and its draw is < `noise`.

  Returns the text and the indices of the flawed steps. The scratchpad continues from the wrong
  total, so every later step is locally right and the final answer is wrong.
  """
  results, flawed, total = [], [], terms[0]
  for i, b in enumerate(terms[1:]):
    if carries(total, b) and draws[i] < noise:
      total = dropped_carry(total, b)
      flawed.append(i)
    else:
      total = total + b
    results.append(total)
  return scratchpad(terms, results), flawed


class LadderTask(SplitTask):
  """Stratified multi-step chains (the proving ground), a final-answer scorer and a step checker.

  Each number of terms k in [min_terms, max_terms] is a stratum: reasoning-gym `chain_sum` with
  `min_terms = max_terms = k` and its own seed, split into held-out and train by
  `tasks.ReasoningGymTask` (distinct held-out prompts, none of them in train). `eval_size` and
  `train_size` are divided evenly over the strata (the first strata take the remainder). Train is
  ordered by stratum; the RL and SFT phases draw from it uniformly.

  The held-out set is the *dev* set (every choice of settings is made on it); `test_size` > 0
  adds a stratified test set for the result tables, divided over the strata as `eval_size` is
  and disjoint from dev and train (`ReasoningGymTask`: its own seed range, so train and dev are
  the same with or without it).

  Args:
    name: registry name (unused; 'ladder').
    options: `LADDER_OPTIONS` keys; missing ones take `DEFAULT_OPTIONS`.
    seed, train_size, eval_size, test_size: as for `ReasoningGymTask`.
  """

  takes_test_size = True

  def __init__(self, name: str, options: Mapping[str, Any] | None, seed: int, train_size: int,
               eval_size: int, test_size: int = 0):
    del name
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(LADDER_OPTIONS))
    if unknown:
      raise ValueError(f"config.task.options has keys {unknown} that the ladder task does not "
                       f"take; expected some of {list(LADDER_OPTIONS)}")
    self.options = {**DEFAULT_OPTIONS, **opts}
    lo, hi = self.options["min_terms"], self.options["max_terms"]
    if not (isinstance(lo, int) and isinstance(hi, int) and 2 <= lo <= hi):
      raise ValueError(f"config.task.options min_terms={lo!r}, max_terms={hi!r}: expected ints "
                       "with 2 <= min_terms <= max_terms")
    train_size = tasks.check_positive("train_size", train_size)
    eval_size = tasks.check_positive("eval_size", eval_size)
    test_size = tasks.check_non_negative("test_size", test_size)
    self.strata = tuple(range(lo, hi + 1))
    if eval_size < len(self.strata) or train_size < len(self.strata):
      raise ValueError(f"train_size={train_size} and eval_size={eval_size} must each be at least "
                       f"the number of strata ({len(self.strata)}: {lo} to {hi} terms)")
    self.seed = seed
    self._train, self._heldout, self._test, self._tasks = [], [], [], {}
    for j, k in enumerate(self.strata):
      share = lambda size: size // len(self.strata) + (j < size % len(self.strata))
      sub = tasks.ReasoningGymTask(
          "chain_sum", dict(min_terms=k, max_terms=k, min_digits=self.options["min_digits"],
                            max_digits=self.options["max_digits"], allow_negation=False),
          seed=_stratum_seed(seed, k), train_size=share(train_size), eval_size=share(eval_size),
          test_size=share(test_size))
      self._tasks[k] = sub
      self._train += sub.train
      self._heldout += sub.heldout
      self._test += sub.test

  @staticmethod
  def stratum(example: TaskExample) -> int:
    """The example's number of terms."""
    return len(signed_terms(example))

  def check_steps(self, completion: Any, example: TaskExample) -> StepCheck:
    return check_steps(completion, example)

  def score(self, completion: Any, example: TaskExample) -> float:
    """1.0 iff the final answer line is correct (the scratchpad's steps are not required)."""
    try:
      return check_steps(completion, example).reward
    except Exception:  # pylint: disable=broad-except  (a bad example scores 0, never a crash)
      return 0.0

  def demonstrations(self, *, noise: float, rng: np.random.Generator) -> List[TaskExample]:
    """Scratchpad demonstrations of `train` whose carrying steps drop the carry w.p. `noise`.

    One row of `max_terms - 1` uniforms is drawn per example whatever its length, so the stream
    does not depend on the data. Copies carry `meta['flawed_steps']` (indices); the true entry
    stays in `meta['entry']`, so `score` still checks the correct answer.
    """
    if not isinstance(noise, (int, float, np.floating)) or not 0.0 <= noise <= 1.0:
      raise ValueError(f"noise (config.task.demo_noise) must be a float in [0, 1], got {noise!r}")
    draws = rng.random((len(self.train), max(self.strata) - 1))
    out = []
    for ex, d in zip(self.train, draws):
      text, flawed = flawed_scratchpad(signed_terms(ex), d, float(noise))
      out.append(dataclasses.replace(ex, answer=text, meta={**ex.meta, "flawed_steps": flawed}))
    return out


def _stratum_seed(seed: int, k: int) -> int:
  """A non-negative seed per (seed, stratum): strata draw unrelated problems."""
  return int(np.random.SeedSequence([int(seed), 1009, k]).generate_state(1, np.uint32)[0])


def grade(task, completions: Sequence[Any], examples: Sequence[TaskExample]) -> Dict[str, Any]:
  """Held-out grades of completions[i] for examples[i]: accuracy, per stratum, step error rate.

  Returns a dict with `accuracy`, `accuracy_by_stratum` ({str(k): accuracy}), `step_error_rate`
  (wrong steps / expected steps, pooled) and `first_error_step_mean` (mean over completions of
  `first_error / num_steps`, 1.0 = no wrong step).
  """
  checks = [task.check_steps(c, e) for c, e in zip(completions, examples)]
  strata = np.array([task.stratum(e) for e in examples])
  reward = np.array([c.reward for c in checks])
  wrong = sum(c.num_wrong for c in checks)
  steps = sum(c.num_steps for c in checks)
  return {
      "accuracy": float(reward.mean()) if len(reward) else 0.0,
      "accuracy_by_stratum": {str(k): float(reward[strata == k].mean())
                              for k in sorted(set(strata.tolist()))},
      "step_error_rate": wrong / max(steps, 1),
      "first_error_step_mean": float(np.mean([c.first_error / max(c.num_steps, 1)
                                              for c in checks])) if checks else 0.0,
  }
