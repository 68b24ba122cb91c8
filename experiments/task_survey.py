"""Zero-shot accuracy of a checkpoint on several verifiable tasks: which one is in its reach?

    python -m experiments.task_survey --config=experiments/configs/smollm2_learns.py \
        --num_problems=100 --out=runs/task_survey.jsonl

For each task of `SURVEY` (a reasoning-gym dataset with options, and how its answer is read),
the run's model (the config's checkpoint, its chat template) answers `--num_problems` held-out
problems greedily and `--num_samples` times at temperature 1. One JSON line per task: greedy
accuracy, sampled accuracy, pass@k, and the share of problems whose sampled success rate is
strictly between 0 and 1 (the prompts whose GRPO group carries a learning signal). A task suits
RL from this checkpoint when greedy accuracy is between about 0.15 and 0.6 with a spread over
problems. Nothing is trained; every number is a deterministic function of the flags (on one
backend). A task that cannot be built (say, fewer distinct problems than `--num_problems`) gets a
row with its `error`, and the survey goes on.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax
from absl import flags
from ml_collections import config_flags

from experiments import cli
from rl_jax import experiment, models, sampling, seeds
from rl_jax.train import evaluate, phases

# (label, reasoning-gym name, options, answer extraction): short numeric answers, easy to hard.
SURVEY = (
    ("chain_sum 2x1-2", "chain_sum",
     dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2, allow_negation=False),
     "last_number"),
    ("chain_sum 2x1", "chain_sum", dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
     "last_number"),
    ("chain_sum 2x2", "chain_sum", dict(min_terms=2, max_terms=2, min_digits=2, max_digits=2),
     "last_number"),
    ("chain_sum 3x1", "chain_sum", dict(min_terms=3, max_terms=3, min_digits=1, max_digits=1),
     "last_number"),
    ("basic_arithmetic 2x1", "basic_arithmetic",
     dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1), "last_number"),
    ("products 2x1", "products", dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
     "last_number"),
    ("leg_counting 1-2", "leg_counting", dict(min_animals=1, max_animals=2), "last_number"),
    ("letter_counting", "letter_counting", {}, "last_number"),
    ("gsm_symbolic", "gsm_symbolic", {}, "last_number"),
)

# The command's flags are defined in `define_flags` (called only when run as a command), so that
# tests can import `survey_task` beside experiments.run, which defines its own --config.


def survey_task(config, label: str, workdir: str, params=None, *, num_problems: int,
                num_samples: int, max_new_tokens: int) -> tuple[dict, object]:
  """One task's row (and the loaded parameters, reused for the next task)."""
  _, name, options, extraction = next(s for s in SURVEY if s[0] == label)
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.task.update(name=name, answer_extraction=extraction, eval_size=num_problems,
                       train_size=8)
    config.task.options = dict(options)
    config.sampling.max_new_tokens = max_new_tokens
  exp = experiment.build(config, workdir)
  if params is None:
    params = models.cast_params(exp.model_cfg, phases.init_params(exp))
  key = jax.random.fold_in(exp.root_key(), seeds.EVAL)
  start = time.perf_counter()
  kw = dict(cfg=exp.model_cfg, max_new_tokens=max_new_tokens,
            batch_size=config.eval.batch_size)
  heldout = exp.task.heldout
  greedy = evaluate.correctness(params, exp.heldout_prompts, exp.heldout_prompt_mask, heldout,
                                exp.task, exp.tokenizer, key,
                                strategy=sampling.Sampling(temperature=0.0), **kw)[:, 0]
  k = num_samples
  sampled = evaluate.correctness(params, exp.heldout_prompts, exp.heldout_prompt_mask, heldout,
                                 exp.task, exp.tokenizer, jax.random.fold_in(key, 1),
                                 strategy=sampling.Sampling(temperature=1.0), num_samples=k,
                                 **kw)
  rates = sampled.mean(axis=1)
  row = {"task": label, "name": name, "options": options, "problems": len(heldout),
         "max_new_tokens": max_new_tokens,
         "greedy_accuracy": round(float(greedy.mean()), 4),
         "sampled_accuracy": round(float(rates.mean()), 4),
         f"pass@{k}": round(float((rates > 0).mean()), 4),
         "share_mixed": round(float(((rates > 0) & (rates < 1)).mean()), 4),
         "seconds": round(time.perf_counter() - start, 1)}
  return row, params


def define_flags() -> None:
  """Defines the command's flags (module globals read by `main`)."""
  global _CONFIG, _NUM_PROBLEMS, _NUM_SAMPLES, _MAX_NEW_TOKENS, _TASKS, _OUT, _WORKDIR
  _CONFIG = config_flags.DEFINE_config_file("config", None,
                                            "The run's config (model and template).")
  _NUM_PROBLEMS = flags.DEFINE_integer("num_problems", 100, "Held-out problems per task.")
  _NUM_SAMPLES = flags.DEFINE_integer("num_samples", 8, "Samples per problem at temperature 1.")
  _MAX_NEW_TOKENS = flags.DEFINE_integer("max_new_tokens", 64, "Completion length cap.")
  _TASKS = flags.DEFINE_list("tasks", [], "Labels of SURVEY to run (default: all).")
  _OUT = flags.DEFINE_string("out", None, "Append the JSON lines to this file too.")
  _WORKDIR = flags.DEFINE_string("workdir", "runs/task_survey", "Scratch directory.")


def main(argv):
  del argv
  if _CONFIG.value is None:
    sys.exit("task_survey: --config is required (e.g. experiments/configs/smollm2_learns.py)")
  labels = _TASKS.value or [s[0] for s in SURVEY]
  unknown = [x for x in labels if x not in {s[0] for s in SURVEY}]
  if unknown:
    sys.exit(f"task_survey: --tasks has unknown labels {unknown}; expected some of "
             f"{[s[0] for s in SURVEY]}")
  params = None
  for label in labels:
    try:
      row, params = survey_task(
          _CONFIG.value, label, os.path.join(_WORKDIR.value, label.replace(" ", "_")), params,
          num_problems=_NUM_PROBLEMS.value, num_samples=_NUM_SAMPLES.value,
          max_new_tokens=_MAX_NEW_TOKENS.value)
    except ValueError as e:  # E.g. too few distinct problems for --num_problems: the next task.
      row = {"task": label, "error": str(e)}
    line = json.dumps(row)
    print(line, flush=True)
    if _OUT.value:
      with open(_OUT.value, "a") as f:
        f.write(line + "\n")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
