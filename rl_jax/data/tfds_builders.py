"""TFDS builders (array_record files, no TensorFlow) for rl_jax's tasks and local JSONL sets.

Two builders write a dataset once into a local `data_dir` and read it back with
`builder.as_data_source()` (random access, what `grain` samples from); neither downloads anything:

* `TaskProblems` ('rl_jax_task'): the train and held-out examples of any task `make_task` builds
  (reasoning-gym tasks, the ladder, 'jsonl'), generated deterministically from the seed. Splits
  'train' and 'heldout'; one record per example: `index` (its position in `task.train` /
  `task.heldout`), `prompt`, `answer`, `meta` (the example's meta as JSON, e.g. reasoning-gym's
  raw entry, which its scorer needs).
* `JsonlProblems` ('rl_jax_jsonl'): local problem files in GSM8K / MATH layout, one JSON object a
  line with a question (`question`, or MATH's `problem`) and an answer (`answer`, or MATH's
  `solution`). One split per file; records: `index` (the row's position among the file's
  non-empty lines), `line` (its 1-based line number), `question`, `answer` (the text as given)
  and `reference` (the final answer: GSM8K's text after '####', else the last `\\boxed{...}`,
  else the stripped answer).

A dataset's config name carries a hash of everything that determines its content (task settings
and the reasoning-gym version, or the files' bytes), so a changed setting or file is a new dataset
beside the old one, never a stale read. TFDS stores records in a hashed order; `index` gives the
logical order back (`examples`).

    sources = prepare_task(task_spec(...), data_dir)        # {'train': ..., 'heldout': ...}
    train = examples(sources['train'])                      # List[TaskExample], in task order
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow_datasets as tfds

from rl_jax.data import jsonl
from rl_jax.data.tasks import TaskExample

TASK_SPLITS = ("train", "heldout")
_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.S)


def _digest(value: Any) -> str:
  return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _file_digest(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def _download_config() -> tfds.download.DownloadConfig:
  """Generate locally, reuse what is there, never look at GCS."""
  return tfds.download.DownloadConfig(
      download_mode=tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS, try_download_gcs=False)


def _prepare(builder: tfds.core.DatasetBuilder) -> Dict[str, Any]:
  tfds.disable_progress_bar()
  builder.download_and_prepare(download_config=_download_config())
  return builder.as_data_source()


# --- tasks -------------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class TaskConfig(tfds.core.BuilderConfig):
  """What `make_task` takes (config.task fields); build one with `task_spec`."""

  task: str = ""
  options: Optional[Dict[str, Any]] = None
  seed: int = 0
  train_size: int = 0
  eval_size: int = 0
  answer_extraction: str = "first_line"


def task_spec(name: str, options: Mapping[str, Any] | None, seed: int, train_size: int,
              eval_size: int, answer_extraction: str = "first_line") -> TaskConfig:
  """The `TaskProblems` config of a task; its name hashes the settings (and a 'path' option's
  file bytes, and the reasoning-gym version), so equal names mean equal examples."""
  import reasoning_gym  # pylint: disable=import-outside-toplevel
  options = dict(options or {})
  key = dict(task=name, options=options, seed=int(seed), train_size=int(train_size),
             eval_size=int(eval_size), answer_extraction=answer_extraction,
             reasoning_gym=getattr(reasoning_gym, "__version__", "?"))
  path = options.get("path")
  if path:
    if not os.path.isfile(path):
      raise FileNotFoundError(f"task.options.path {path!r} does not exist; expected a JSONL file")
    key["file_sha256"] = _file_digest(path)
  safe = re.sub(r"[^A-Za-z0-9_]", "_", name)
  return TaskConfig(name=f"{safe}_{_digest(key)}", version=TaskProblems.VERSION, task=name,
                    options=options, seed=int(seed), train_size=int(train_size),
                    eval_size=int(eval_size), answer_extraction=answer_extraction)


def _meta_json(meta: Mapping[str, Any], where: str) -> str:
  try:
    return json.dumps(meta, sort_keys=True)
  except TypeError as e:
    raise TypeError(f"{where}: the example's meta must be JSON-serializable to be stored in a "
                    f"TFDS dataset ({e})") from None


class TaskProblems(tfds.core.GeneratorBasedBuilder):
  """A task's train and held-out examples as a TFDS dataset (splits 'train', 'heldout').

  Args (keyword, besides tfds's own such as `data_dir`):
    config: a `TaskConfig` from `task_spec`.
    task: optionally the already built task object of that config, so preparing does not build it
      a second time (it must be the task `make_task` builds from the config).
  """

  name = "rl_jax_task"
  VERSION = tfds.core.Version("1.0.0")
  BUILDER_CONFIGS: List[TaskConfig] = []

  def __init__(self, *, task: Any = None, **kwargs):
    self._task = task
    super().__init__(file_format="array_record", **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(builder=self, description=__doc__, features=tfds.features.FeaturesDict({
        "index": np.int64, "prompt": tfds.features.Text(), "answer": tfds.features.Text(),
        "meta": tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing is downloaded.
    c = self.builder_config
    task = self._task
    if task is None:
      from rl_jax.data import make_task  # pylint: disable=import-outside-toplevel
      task = make_task(c.task, c.options, c.seed, c.train_size, c.eval_size,
                       answer_extraction=c.answer_extraction)
    return {"train": self._generate_examples(task.train, "train"),
            "heldout": self._generate_examples(task.heldout, "heldout")}

  def _generate_examples(self, items: Sequence[TaskExample], split: str):
    for i, ex in enumerate(items):
      yield i, {"index": i, "prompt": ex.prompt, "answer": ex.answer,
                "meta": _meta_json(ex.meta, f"{self.builder_config.task} {split}[{i}]")}


def prepare_task(spec: TaskConfig, data_dir: str, task: Any = None) -> Dict[str, Any]:
  """Writes the task's dataset under `data_dir` unless there; -> {'train', 'heldout'} sources."""
  return _prepare(TaskProblems(config=spec, data_dir=data_dir, task=task))


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def examples(source: Any) -> List[TaskExample]:
  """All records of a `TaskProblems` split as TaskExamples, in `index` order (the task's)."""
  out: List[Optional[TaskExample]] = [None] * len(source)
  for record in source.__getitems__(range(len(source))):
    out[int(record["index"])] = TaskExample(prompt=_text(record["prompt"]),
                                            answer=_text(record["answer"]),
                                            meta=json.loads(_text(record["meta"])))
  return out


# --- JSONL problem files -----------------------------------------------------------------------

QUESTION_KEYS = ("question", "problem")
ANSWER_KEYS = ("answer", "solution")


def reference_answer(answer: str) -> str:
  """The final answer in a GSM8K or MATH answer text.

  GSM8K: the text after '####' ('... so 72 #### 72' -> '72'); MATH: the content of the last
  `\\boxed{...}` (braces balanced); otherwise the stripped text.
  """
  m = _GSM8K_FINAL.search(answer)
  if m:
    return m.group(1).replace(",", "")
  start = answer.rfind("\\boxed{")
  if start >= 0:
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(answer)):
      depth += {"{": 1, "}": -1}.get(answer[j], 0)
      if depth == 0:
        return answer[i:j].strip()
  return answer.strip()


def _pick(row: Mapping[str, Any], keys: Sequence[str]) -> Optional[str]:
  for k in keys:
    if k in row:
      return k
  return None


def read_problems(path: str) -> List[Dict[str, Any]]:
  """The rows of a GSM8K / MATH-layout JSONL file as {'line', 'question', 'answer'} dicts.

  Raises:
    FileNotFoundError: `path` is not a file.
    ValueError: a non-empty line is not a JSON object with a question key (`QUESTION_KEYS`) and
      an answer key (`ANSWER_KEYS`) holding strings or numbers; the message names the file and
      line. Also when the file holds no rows.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(f"JSONL problem file {path!r} does not exist; expected one JSON "
                            f"object a line with keys {QUESTION_KEYS[0]!r} (or "
                            f"{QUESTION_KEYS[1]!r}) and {ANSWER_KEYS[0]!r} (or {ANSWER_KEYS[1]!r})")
  rows = []
  for lineno, row in jsonl.read_objects(path):
    where = f"{path}:{lineno}"
    qk, ak = _pick(row, QUESTION_KEYS), _pick(row, ANSWER_KEYS)
    if qk is None or ak is None:
      raise ValueError(f"{where}: expected keys {' or '.join(map(repr, QUESTION_KEYS))} and "
                       f"{' or '.join(map(repr, ANSWER_KEYS))}; the row has {sorted(row)}")
    for k in (qk, ak):
      if isinstance(row[k], bool) or not isinstance(row[k], (str, int, float)):
        raise ValueError(f"{where}: {k!r} must be a string or a number, got "
                         f"{type(row[k]).__name__}")
    rows.append({"line": lineno, "question": str(row[qk]), "answer": str(row[ak])})
  return rows


@dataclasses.dataclass(eq=False)
class JsonlConfig(tfds.core.BuilderConfig):
  """Split name -> JSONL file; build one with `jsonl_spec`."""

  files: Optional[Dict[str, str]] = None


def jsonl_spec(files: Mapping[str, str], name: str = "") -> JsonlConfig:
  """The `JsonlProblems` config of {split: file}; its name hashes the files' bytes.

  Every file is parsed here (`read_problems`), so a bad row fails before anything is written.
  Raises FileNotFoundError (naming the split and file) for a missing file, ValueError for a bad
  split name or row (naming the file and line).
  """
  if not files:
    raise ValueError("jsonl_spec: expected at least one {split: file} entry")
  digests = {}
  for split, path in files.items():
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", str(split)):
      raise ValueError(f"split name {split!r} for {path!r}: expected letters, digits and '_'")
    if not os.path.isfile(path):
      raise FileNotFoundError(f"split {split!r}: JSONL problem file {path!r} does not exist")
    read_problems(path)
    digests[split] = _file_digest(path)
  stem = name or os.path.splitext(os.path.basename(next(iter(files.values()))))[0]
  stem = re.sub(r"[^A-Za-z0-9_]", "_", stem)
  return JsonlConfig(name=f"{stem}_{_digest(digests)}", version=JsonlProblems.VERSION,
                     files={k: os.path.abspath(v) for k, v in files.items()})


class JsonlProblems(tfds.core.GeneratorBasedBuilder):
  """Local GSM8K / MATH-layout JSONL files as a TFDS dataset, one split per file."""

  name = "rl_jax_jsonl"
  VERSION = tfds.core.Version("1.0.0")
  BUILDER_CONFIGS: List[JsonlConfig] = []

  def __init__(self, **kwargs):
    super().__init__(file_format="array_record", **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(builder=self, description=__doc__, features=tfds.features.FeaturesDict({
        "index": np.int64, "line": np.int64, "question": tfds.features.Text(),
        "answer": tfds.features.Text(), "reference": tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager  # Local files only.
    # Parse every file before writing anything, so a bad row fails with its file and line.
    parsed = {split: read_problems(path) for split, path in self.builder_config.files.items()}
    return {split: self._generate_examples(rows) for split, rows in parsed.items()}

  def _generate_examples(self, rows):
    for i, row in enumerate(rows):
      yield i, dict(row, index=i, reference=reference_answer(row["answer"]))


def prepare_jsonl(files: Mapping[str, str], data_dir: str, name: str = "") -> Dict[str, Any]:
  """Writes the JSONL files' dataset under `data_dir` unless there; -> {split: data source}."""
  return _prepare(JsonlProblems(config=jsonl_spec(files, name), data_dir=data_dir))


def problems(source: Any) -> List[Dict[str, Any]]:
  """All records of a `JsonlProblems` split as dicts of str/int, in file order."""
  out: List[Optional[Dict[str, Any]]] = [None] * len(source)
  for r in source.__getitems__(range(len(source))):
    out[int(r["index"])] = {"line": int(r["line"]), "question": _text(r["question"]),
                            "answer": _text(r["answer"]), "reference": _text(r["reference"])}
  return out
