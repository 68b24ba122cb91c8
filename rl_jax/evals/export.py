"""A run's policy as a Hugging Face directory (`experiments.export`).

The directory works the Hugging Face way: `AutoTokenizer.from_pretrained(out)` encodes a prompt
with the run's ids (BOS where the run starts prompts with it) and pads on the left with the
run's pad token, and `AutoModelForCausalLM.from_pretrained(out).generate(...)` decodes greedily
and stops at the run's EOS (generation_config.json), so it reproduces the run's greedy answers.
"""

from __future__ import annotations

import json
import os
import shutil

import jax
import ml_collections

from rl_jax import experiment
from rl_jax import models, tokenizers
from rl_jax.evals import runner


def export_run(config: ml_collections.ConfigDict, workdir: str, out: str, *,
               phase: str = "final") -> dict:
  """Writes the policy of `phase` (`runner.load_params`) of the run in `workdir` to `out`.

  `out` gets config.json + model.safetensors (`models.save_hf`; the run's token ids bos / eos /
  pad go into config.json), generation_config.json (greedy, the run's bos / eos / pad ids and
  max_new_tokens) and the run's tokenizer files: those of a Hugging Face checkpoint
  (`config.model.path`, chat template included), or for a run that trained a SentencePiece
  model its `tokenizer.model` plus a tokenizer.json / tokenizer_config.json converted from it
  (BOS prepended as the run does, pad token, left padding; needs transformers).

  Returns:
    {'out': out, 'phase': the phase exported, 'step' / 'steps': the checkpoint's step and the
    phase's steps (and 'warning' for an unfinished phase), 'files': the file names written}.

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
      _write_hf_tokenizer(out, tok, exp.model_cfg.max_seq_len)
  _write_generation_config(out, tok, config.sampling.max_new_tokens)
  return {"out": out, "phase": phase, **runner.progress_note(config, workdir, phase),
          "files": sorted(os.listdir(out))}


def _write_hf_tokenizer(out: str, tok, max_seq_len: int) -> None:
  """tokenizer.json + tokenizer_config.json converted (by transformers) from the run's
  SentencePiece tokenizer.model in `out`, with its special tokens and BOS convention."""
  import tokenizers as hf_tokenizers  # pylint: disable=g-import-not-at-top (the [hf] extra)
  import transformers  # pylint: disable=g-import-not-at-top
  fast = transformers.AutoTokenizer.from_pretrained(out)
  piece = tok.id_to_piece
  special = {"bos_token": piece(tok.bos_id), "eos_token": piece(tok.eos_id),
             "pad_token": piece(tok.pad_id)}
  if tok.add_bos:  # The run starts every prompt with BOS; so does the exported tokenizer.
    bos = special["bos_token"]
    fast.backend_tokenizer.post_processor = hf_tokenizers.processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.bos_id)])
  fast.add_special_tokens({k: v for k, v in special.items()})
  fast.save_pretrained(out)
  path = os.path.join(out, "tokenizer_config.json")
  with open(path) as f:
    settings = json.load(f)
  settings.update(special, add_bos_token=bool(tok.add_bos), add_eos_token=False,
                  padding_side="left", model_max_length=int(max_seq_len),
                  clean_up_tokenization_spaces=False)
  with open(path, "w") as f:
    json.dump(settings, f, indent=2, sort_keys=True)


def _write_generation_config(out: str, tok, max_new_tokens: int) -> None:
  """generation_config.json: greedy decoding of up to the run's max_new_tokens, stopping at the
  run's EOS (merged into a copied checkpoint's own file, whose other fields are kept)."""
  path = os.path.join(out, "generation_config.json")
  settings = {}
  if os.path.isfile(path):
    with open(path) as f:
      settings = json.load(f)
  eos = settings.get("eos_token_id")
  eos = [eos] if isinstance(eos, int) else list(eos or [])
  eos = [int(tok.eos_id)] + [e for e in eos if e != tok.eos_id]
  settings.update(eos_token_id=eos[0] if len(eos) == 1 else eos, pad_token_id=int(tok.pad_id),
                  do_sample=False, max_new_tokens=int(max_new_tokens))
  if getattr(tok, "has_bos", tok.bos_id is not None and tok.bos_id >= 0):
    settings["bos_token_id"] = int(tok.bos_id)
  for key in ("temperature", "top_p", "top_k"):  # Sampling settings of a greedy config warn.
    settings.pop(key, None)
  with open(path, "w") as f:
    json.dump(settings, f, indent=2, sort_keys=True)
