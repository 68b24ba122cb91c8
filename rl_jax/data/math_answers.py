"""Math answers checked with math-verify: `\\boxed{}`, fractions, LaTeX, sets, symbolic equivalence.

The one checker of the package: the training reward of the `math` task (`rl_jax.data.math_tasks`)
and `experiments.eval`'s math sets (`rl_jax.evals.runner`) both grade with `check`, so a
completion earns reward exactly when the evaluation counts it correct. The answer is read after
the thinking block (`after_thinking`); gold answers are parsed by `gold_answer` (GSM8K's
`#### N`, MATH's `\\boxed{}` solutions).

math-verify bounds its own parse and verify time with `signal.alarm`, which works only in a
process's main thread. Here its time limits are off (`None`) and time is bounded by us instead:
`Checker` sends each (completion, gold) pair to one of `workers` child processes (`python -m
rl_jax.data.math_answers`, JSON lines over pipes; a pair's clock starts once its child has
imported math-verify) and kills a child that spends more than `timeout_s` on one pair (that
pair is graded wrong with no answer key, and counted in `Checker.timeouts`), then starts a fresh
child. With `workers=0` everything runs in this process with no time bound (tests, trusted
inputs).

`check(completion, gold)` -> (correct, key): the key is the canonical text of the completion's
parsed answer (sympy's printing, so `x+1` and `1+x` share one), used by maj@k to group answers;
'' when no answer was found.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

_LOGGER_NAMES = ("math_verify", "math_verify.parser", "math_verify.grader")


def _quiet() -> None:
  # math-verify warns on every call that its own timeouts are off: that is by design here.
  for name in _LOGGER_NAMES:
    logging.getLogger(name).setLevel(logging.ERROR)


def parse(text: str) -> list:
  """math-verify's parse of `text` (LaTeX and plain expressions, `\\boxed{}` first), no alarm."""
  import math_verify  # pylint: disable=g-import-not-at-top  (children import it on their own)
  _quiet()
  return math_verify.parse(text, parsing_timeout=None)


def answer_key(parsed: list) -> str:
  """The canonical text of a parsed answer ('' when nothing was parsed)."""
  return str(parsed[0]) if parsed else ""


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def after_thinking(completion: Any) -> str:
  """The part of a completion that holds its answer: the text after the last `</think>`; '' when
  a `<think>` block is opened and never closed (the answer was not reached); else the whole text
  ('' if not a str)."""
  if not isinstance(completion, str):
    return ""
  if THINK_CLOSE in completion:
    return completion.rsplit(THINK_CLOSE, 1)[1]
  return "" if THINK_OPEN in completion else completion


def gsm8k_gold(answer: str) -> str:
  """The final number of a GSM8K answer (after '####', thousands commas removed).

  Raises:
    ValueError: the answer has no '####'.
  """
  if "####" not in answer:
    raise ValueError(f"GSM8K answer {answer[-60:]!r} has no '####' final answer")
  return answer.rsplit("####", 1)[1].strip().replace(",", "")


# How a data set writes its reference answer -> the gold text `check` compares against. 'boxed'
# and 'plain' keep the text: math-verify finds a solution's last `\\boxed{}` itself.
GOLD_FORMATS: Dict[str, Callable[[str], str]] = {
    "gsm8k": gsm8k_gold,
    "boxed": str,
    "plain": str,
}


def gold_answer(answer: str, answer_format: str = "auto") -> str:
  """The gold text of a reference `answer` written in `answer_format` (a key of `GOLD_FORMATS`,
  or 'auto': 'gsm8k' when the answer holds '####', else the text as it is).

  Raises:
    ValueError: an unknown format, or a GSM8K answer without '####'.
  """
  if answer_format == "auto":
    answer_format = "gsm8k" if "####" in answer else "plain"
  if answer_format not in GOLD_FORMATS:
    raise ValueError(f"answer_format={answer_format!r}; expected 'auto' or one of "
                     f"{list(GOLD_FORMATS)}")
  return GOLD_FORMATS[answer_format](answer)


def key_of(completion: Any) -> str:
  """The answer key `check` gives `completion` (maj@k groups by it); '' when none; never raises."""
  try:
    return answer_key(parse(after_thinking(completion)))
  except Exception:  # pylint: disable=broad-except  (a malformed answer has no key)
    return ""


def check(completion: str, gold: str) -> Tuple[bool, str]:
  """(whether `completion`'s answer equals `gold` under math-verify, the answer's key).

  The answer is looked for in `after_thinking(completion)` only. Never raises: a completion or
  gold that cannot be parsed is wrong.
  """
  import math_verify  # pylint: disable=g-import-not-at-top
  try:
    got = parse(after_thinking(completion))
    if not got:
      return False, ""
    want = parse(gold)
    ok = bool(want) and bool(math_verify.verify(want, got, timeout_seconds=None))
    return ok, answer_key(got)
  except Exception:  # pylint: disable=broad-except  (a malformed answer is a wrong answer)
    return False, ""


def _serve() -> None:
  """A child's loop (`python -m rl_jax.data.math_answers`): reads one JSON [completion, gold]
  per line from stdin, writes one JSON [correct, key] per line to stdout; 'ready' first."""
  import math_verify  # pylint: disable=g-import-not-at-top,unused-import  (before 'ready')
  _quiet()
  print(json.dumps("ready"), flush=True)
  for line in sys.stdin:
    print(json.dumps(check(*json.loads(line))), flush=True)


class _Worker:
  """One child process running `_serve`, with the job it is on."""

  def __init__(self):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)  # the child imports this package from where the parent found it
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    self.proc = subprocess.Popen([sys.executable, "-m", "rl_jax.data.math_answers"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                 text=True, bufsize=1)
    self.ready = False
    self.job = None  # (index, start time)

  def send(self, index: int, pair: Tuple[str, str]) -> None:
    self.proc.stdin.write(json.dumps(list(pair)) + "\n")
    self.proc.stdin.flush()
    self.job = (index, time.monotonic())

  def receive(self):
    line = self.proc.stdout.readline()
    if not line:
      raise EOFError("the math-verify child exited")
    return json.loads(line)

  def stop(self) -> None:
    self.proc.kill()
    self.proc.wait()
    self.proc.stdin.close()
    self.proc.stdout.close()


class Checker:
  """Checks many (completion, gold) pairs with math-verify in `workers` child processes.

  Args:
    workers: child processes (fresh interpreters, so safe beside JAX's threads); 0 = in this
      process, without a time bound.
    timeout_s: the most seconds one pair may take in a child before it is killed and the pair
      graded wrong.
  """

  def __init__(self, workers: int = 2, timeout_s: float = 10.0):
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
      raise ValueError(f"workers={workers!r}: expected an int >= 0 (0 = check in this process)")
    if not timeout_s > 0:
      raise ValueError(f"timeout_s={timeout_s!r}: expected seconds > 0")
    self.workers = workers
    self.timeout_s = float(timeout_s)
    self.startup_s = 120.0  # a child's imports (not counted against its first pair)
    self.timeouts = 0  # pairs graded wrong because they ran out of time, over all calls

  def __call__(self, pairs: Sequence[Tuple[str, str]]) -> List[Tuple[bool, str]]:
    """[(correct, key)] for every (completion, gold) pair, in order."""
    if self.workers == 0 or len(pairs) == 0:
      return [check(c, g) for c, g in pairs]
    results: List[Tuple[bool, str] | None] = [None] * len(pairs)
    pending = list(range(len(pairs)))[::-1]
    pool = [_Worker() for _ in range(min(self.workers, len(pairs)))]
    try:
      while pending or any(w.job for w in pool):
        for w in pool:
          if w.ready and w.job is None and pending:
            i = pending.pop()
            w.send(i, pairs[i])
        busy = [w for w in pool if w.job is not None]
        now = time.monotonic()
        wait = max(0.0, min((w.job[1] + self.timeout_s - now for w in busy),
                            default=self.startup_s))
        ready, _, _ = select.select([w.proc.stdout for w in pool], [], [], wait)
        for k, w in enumerate(pool):
          if w.proc.stdout in ready:
            try:
              msg = w.receive()
            except (EOFError, ValueError):  # the child died (e.g. out of memory)
              if w.job is None:
                raise RuntimeError("a math-verify child process exited before it was ready "
                                   "(python -m rl_jax.data.math_answers)") from None
              results[w.job[0]] = (False, "")
            else:
              if not w.ready:
                w.ready = True
                continue
              results[w.job[0]] = (bool(msg[0]), str(msg[1]))
              w.job = None
              continue
          elif w.job is not None and time.monotonic() - w.job[1] > self.timeout_s:
            results[w.job[0]] = (False, "")
            self.timeouts += 1
          else:
            continue
          w.stop()
          pool[k] = _Worker()
        if not busy and not ready and not any(w.ready for w in pool):
          raise RuntimeError(f"no math-verify child process became ready in {self.startup_s} s")
    finally:
      for w in pool:
        w.stop()
    return results  # type: ignore[return-value]


if __name__ == "__main__":
  _serve()
