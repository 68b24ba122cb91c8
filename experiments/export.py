"""Exports a run's policy as a Hugging Face directory: python -m experiments.export --workdir=RUN
--out=DIR [--phase=final].

DIR gets config.json and model.safetensors (`rl_jax.models.save_hf`, which transformers opens
with AutoModelForCausalLM) and the tokenizer files the run has: a Hugging Face checkpoint's
tokenizer.json / tokenizer_config.json / chat template are copied from `config.model.path`; a
run with a SentencePiece tokenizer trained at run time gets its `tokenizer.model` (the
SentencePiece model, readable with `sentencepiece.SentencePieceProcessor`) copied along.
"""

from __future__ import annotations

import json

from absl import flags
from ml_collections import config_flags

from experiments import cli
from rl_jax.evals import export, runner

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "The run's config file[:variant] (default: RUN/run_config.json).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "The run's work dir.")
_OUT = flags.DEFINE_string("out", None, "Output directory (created; weights are replaced).")
_PHASE = flags.DEFINE_enum("phase", "final", list(runner.PHASES),
                           "final (rl if it ran, else sft), rl, sft, or init.")


def main(argv):
  cli.start(argv)
  config = cli.run_config(_CONFIG, _WORKDIR.value)
  result = export.export_run(config, _WORKDIR.value, _OUT.value, phase=_PHASE.value)
  if "warning" in result:
    cli.warn(result["warning"])
  print(json.dumps(result))


if __name__ == "__main__":
  cli.run(main, required=('workdir', 'out'))
