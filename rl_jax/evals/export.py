"""A run's policy as a Hugging Face directory (`experiments.export`)."""

from __future__ import annotations

import os
import shutil

import jax
import ml_collections

from rl_jax import models, tokenizers
from rl_jax.evals import runner
from rl_jax.train import experiment


def export_run(config: ml_collections.ConfigDict, workdir: str, out: str, *,
               phase: str = "final") -> dict:
  """Writes the policy of `phase` (`runner.load_params`) of the run in `workdir` to `out`.

  `out` gets config.json + model.safetensors (`models.save_hf`; the run's token ids bos / eos /
  pad go into config.json) and the run's tokenizer files: those of a Hugging Face checkpoint
  (`config.model.path`), or the SentencePiece `tokenizer.model` of a run that trained one.

  Returns:
    {'out': out, 'phase': the phase exported, 'files': the file names written}.

  Raises:
    ValueError: `out` is the run's work dir or its checkpoint directory (weights there would be
      replaced); FileNotFoundError: no checkpoint for the phase.
  """
  if os.path.abspath(out) in {os.path.abspath(workdir), os.path.abspath(config.model.path or "")
                              if config.model.path else ""}:
    raise ValueError(f"--out={out!r} is the run's work dir or its source checkpoint; expected a "
                     "new directory")
  exp = experiment.build(config, workdir)
  phase = runner.resolve_phase(workdir, phase)
  params = jax.device_get(runner.load_params(exp, phase))
  tok = exp.tokenizer
  ids = {k: int(v) for k, v in (("bos_token_id", tok.bos_id), ("eos_token_id", tok.eos_id),
                                ("pad_token_id", tok.pad_id)) if v is not None and v >= 0}
  source = config.model.path or None
  models.save_hf(out, exp.model_cfg, params, extra_config=ids if source is None else None,
                 copy_files_from=source)
  if source is None:
    sp_model = os.path.join(workdir, "tokenizer", tokenizers.MODEL_FILE)
    if os.path.isfile(sp_model):
      shutil.copyfile(sp_model, os.path.join(out, tokenizers.MODEL_FILE))
  return {"out": out, "phase": phase, **runner.progress_note(config, workdir, phase),
          "files": sorted(os.listdir(out))}
