"""Judges PRMs against true step labels: python -m experiments.eval_prm --workdir=RUN --prm=DIR,...

Samples `--samples` held-out completions of `--num_prompts` problems from the run's policy,
grades every step with the task's step checker (the ladder's `check_steps`), and scores each PRM
(directories written by `experiments.train_prm` / `rl_jax.value.prm.model.save`): first-wrong-step
accuracy, step-level AUROC, and best-of-N re-ranking against majority vote and an outcome-only
value (a PRM of kind 'orm'). Writes OUT/prm-PHASE.json and .md (default OUT = RUN/eval);
`rl_jax/value/prm/judge.py` defines each number.
"""

from __future__ import annotations

import json
import os

from absl import flags

from experiments import cli
from rl_jax import workdir as workdir_lib
from rl_jax.tools import judge_prm, train_prm

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's work dir.")
_PRM = flags.DEFINE_list("prm", None, "PRM directories (default: those of RUN/prm/KIND).")
_OUT = flags.DEFINE_string("out", "", "Where the JSON and markdown go (default RUN/eval).")
_PHASE = flags.DEFINE_enum("phase", "sft", ["sft", "rl", "final"], "Which policy samples.")
_NUM_PROMPTS = flags.DEFINE_integer("num_prompts", 300, "Held-out problems (spread evenly).")
_SAMPLES = flags.DEFINE_integer("samples", 8, "Completions per problem (best-of-N's N).")
_MAX_STEPS = flags.DEFINE_integer("max_steps", 10, "Step slots per completion.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the samples.")


def main(argv):
  cli.start(argv)
  prms = _PRM.value or [d for d in (os.path.join(_WORKDIR.value, "prm", k)
                                    for k in train_prm.KINDS) if os.path.isdir(d)]
  result = judge_prm.evaluate(
      _WORKDIR.value, prms, _OUT.value or os.path.join(_WORKDIR.value, workdir_lib.EVAL_DIR),
      phase=_PHASE.value, num_prompts=_NUM_PROMPTS.value, samples=_SAMPLES.value,
      max_steps=_MAX_STEPS.value, seed=_SEED.value)
  print(json.dumps({k: v for k, v in result.items() if k != "workdir"}))


if __name__ == "__main__":
  cli.run(main, required=("workdir",))
