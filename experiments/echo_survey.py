"""ECHO's statistics at the ladder's decision tokens: python -m experiments.echo_survey --workdir=RUN.

Samples the run's policy on dev problems and reports, at each carrying step's decision token and at
every other token, the quantiles of ECHO's entropy H, confidence C, windowed confidence C^G and
entropy rise ΔH, how often the branch rule of `config.rl.echo` (with `--echo.K=V` overrides, e.g.
`--echo=entropy_high=0.4,branch_threshold=12`) fires there, and the share of right and wrong
completions its prune rule would cut (`rl_jax/tools/echo_survey.py` defines each number). One JSON
object on stdout, also written to --out.
"""

from __future__ import annotations

import json

from absl import app, flags

from experiments import cli
from rl_jax.tools import echo_survey

_WORKDIR = flags.DEFINE_string("workdir", None, "The run's work dir (a ladder run).")
_PHASE = flags.DEFINE_enum("phase", "sft", ["sft", "rl", "final"], "Which policy.")
_NUM_PROMPTS = flags.DEFINE_integer("num_prompts", 300, "Dev problems (spread over the strata).")
_SAMPLES = flags.DEFINE_integer("samples", 4, "Completions per problem.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the samples.")
_ECHO = flags.DEFINE_list("echo", [], "K=V overrides of config.rl.echo (numbers or booleans).")
_OUT = flags.DEFINE_string("out", "", "Also write the JSON object here.")


def _overrides(items) -> dict:
  out = {}
  for item in items:
    key, sep, value = item.partition("=")
    if not sep:
      raise app.UsageError(f"--echo={item!r}: expected K=V, e.g. entropy_high=0.4")
    try:
      out[key] = json.loads(value.lower() if value in ("True", "False") else value)
    except json.JSONDecodeError:
      out[key] = value
  return out


def main(argv):
  cli.start(argv)
  result = echo_survey.survey(_WORKDIR.value, phase=_PHASE.value, num_prompts=_NUM_PROMPTS.value,
                              samples=_SAMPLES.value, seed=_SEED.value,
                              overrides=_overrides(_ECHO.value))
  text = json.dumps(result)
  print(text)
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      f.write(text + "\n")


if __name__ == "__main__":
  cli.run(main, required=("workdir",))
