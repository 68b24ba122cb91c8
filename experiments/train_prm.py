"""Trains PRMs on a finished run's policy: python -m experiments.train_prm --workdir=RUN.

Samples the run's (SFT by default) policy on train problems, labels every step prefix (PAV:
`--n_mc` Monte Carlo continuations per prefix, turned into the best-of-`--prover_k` prover's
value; ORM: the completion's outcome at every step end; truth: the task's step checker, 1 until
the first wrong step), fits one PRM per `--kinds` entry
(the policy's architecture and weights plus a scalar head, optax AdamW, weighted BCE) and saves
each under OUT/<kind> (default OUT = RUN/prm). Judge them with `experiments.eval_prm`.
"""

from __future__ import annotations

import json
import os

from absl import flags

from experiments import cli
from rl_jax.tools import train_prm

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's work dir.")
_OUT = flags.DEFINE_string("out", "", "Where the PRMs go (default RUN/prm).")
_PHASE = flags.DEFINE_enum("phase", "sft", ["sft", "rl", "final"], "Which policy.")
_KINDS = flags.DEFINE_list("kinds", ["pav", "orm"], f"Some of {list(train_prm.KINDS)}.")
_NUM_PROMPTS = flags.DEFINE_integer("num_prompts", 256, "Train problems sampled.")
_SAMPLES = flags.DEFINE_integer("samples", 4, "Completions per problem.")
_N_MC = flags.DEFINE_integer("n_mc", 4, "Continuations per step prefix (PAV labels).")
_PROVER_K = flags.DEFINE_integer("prover_k", 1, "Best-of-K prover (1 = the policy itself).")
_STEPS = flags.DEFINE_integer("steps", 400, "PRM optimizer steps.")
_BATCH = flags.DEFINE_integer("batch_size", 64, "Completions per PRM step.")
_LR = flags.DEFINE_float("lr", 5e-4, "PRM learning rate (AdamW, cosine).")
_DELIM = flags.DEFINE_string("delimiter", "\n", "Step delimiter text.")
_TOKEN_IDS = flags.DEFINE_list("step_token_ids", [], "Step-ending token ids (overrides).")
_MAX_STEPS = flags.DEFINE_integer("max_steps", 10, "Step slots per completion.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the problems, samples and PRM batches.")


def main(argv):
  cli.start(argv)
  out = _OUT.value or os.path.join(_WORKDIR.value, "prm")
  result = train_prm.train(
      _WORKDIR.value, out, kinds=_KINDS.value, phase=_PHASE.value,
      num_prompts=_NUM_PROMPTS.value, samples=_SAMPLES.value, n_mc=_N_MC.value,
      prover_k=_PROVER_K.value, steps=_STEPS.value, batch_size=_BATCH.value, lr=_LR.value,
      delimiter=_DELIM.value, token_ids=[int(x) for x in _TOKEN_IDS.value],
      max_steps=_MAX_STEPS.value, seed=_SEED.value)
  for m in result["models"].values():
    m.pop("log")
  print(json.dumps(result))


if __name__ == "__main__":
  cli.run(main, required=("workdir",))
