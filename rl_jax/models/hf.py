"""Hugging Face checkpoint directories: `load_hf` and `save_hf`.

    cfg, params = load_hf("path/to/Qwen2.5-0.5B", dtype="bfloat16")
    cfg, params = load_hf("Qwen/Qwen3-0.6B")   # a hub id: fetched into the Hugging Face cache
    save_hf("out/policy", cfg, params)   # opens with transformers' from_pretrained

A directory holds `config.json` and either `model.safetensors` or shards listed in
`model.safetensors.index.json`. Tensor names map one to one onto this library's parameter tree
(`model.layers.3.mlp.up_proj.weight` <-> `layers_3/mlp/up_proj/kernel`, transposed: torch Linear
weights are [out, in], Flax kernels [in, out]). A model with scanned layers
(`ModelConfig.scan_layers`) is read and written through the same names: import stacks the
layers (`layout.stack_layers`) and export unstacks them, so the files do not depend on it.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import shutil
from typing import Any, Iterator, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy

from rl_jax.models.config import ModelConfig
from rl_jax.models.hf_config import from_hf_config, to_hf_config
from rl_jax.models.hub import resolve_model_dir
from rl_jax.models.layout import stack_layers, unstack_layers
from rl_jax.models.model import init_params

Params = Any
CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 5 * 2**30
# Files `save_hf(copy_files_from=...)` copies next to the weights (tokenizer and generation).
AUX_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "tokenizer.model", "generation_config.json", "vocab.json", "merges.txt",
             "added_tokens.json", "chat_template.jinja")
# Tensors some checkpoints carry that hold nothing this library needs.
_IGNORED = re.compile(r"(.*\.rotary_emb\.inv_freq|lm_head\.weight)$")
NP_DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def _linear(prefix: str) -> dict[str, tuple[str, ...]]:
  return {f"{prefix}.weight": ("kernel",), f"{prefix}.bias": ("bias",)}


def _name_map(cfg: ModelConfig) -> dict[str, tuple[tuple[str, ...], bool]]:
  """HF tensor name -> (path in the params tree, transpose?) for every parameter of `cfg`."""
  out = {"model.embed_tokens.weight": (("embed_tokens", "embedding"), False),
         "model.norm.weight": (("norm", "weight"), False)}
  if not cfg.tie_embeddings:
    out["lm_head.weight"] = (("lm_head",), True)
  for i in range(cfg.n_layers):
    hf, ours = f"model.layers.{i}", f"layers_{i}"
    projections = [("self_attn", p, cfg.qkv_bias and p != "o_proj")
                   for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
    projections += [("mlp", p, False) for p in ("gate_proj", "up_proj", "down_proj")]
    for module, proj, bias in projections:
      out[f"{hf}.{module}.{proj}.weight"] = ((ours, module, proj, "kernel"), True)
      if bias:
        out[f"{hf}.{module}.{proj}.bias"] = ((ours, module, proj, "bias"), False)
    norms = ("input_layernorm", "post_attention_layernorm")
    if cfg.post_norms:
      norms += ("pre_feedforward_layernorm", "post_feedforward_layernorm")
    for norm in norms:
      out[f"{hf}.{norm}.weight"] = ((ours, norm, "weight"), False)
    if cfg.qk_norm:
      for norm in ("q_norm", "k_norm"):
        out[f"{hf}.self_attn.{norm}.weight"] = ((ours, "self_attn", norm, "weight"), False)
  return out


def _weight_files(path: str) -> list[str]:
  index = os.path.join(path, INDEX_FILE)
  if os.path.isfile(index):
    with open(index) as f:
      weight_map = json.load(f)["weight_map"]
    files = [os.path.join(path, name) for name in sorted(set(weight_map.values()))]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
      raise FileNotFoundError(f"{index} lists shard(s) that do not exist: {missing}")
    return files
  files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
  if not files:
    raise FileNotFoundError(f"no *.safetensors files (or {INDEX_FILE}) in {path!r}")
  return files


def _read_tensors(files: Sequence[str]) -> Iterator[tuple[str, np.ndarray]]:
  for file in files:
    with safetensors.safe_open(file, framework="numpy") as f:
      for name in f.keys():
        yield name, f.get_tensor(name)


def read_hf_config(path: str | os.PathLike) -> dict[str, Any]:
  """The parsed `config.json` of checkpoint directory `path` (or hub id: `resolve_model_dir`).

  Raises:
    FileNotFoundError: naming `path` when it or its config.json does not exist.
  """
  path = resolve_model_dir(path)
  config_file = os.path.join(path, CONFIG_FILE)
  if not os.path.isfile(config_file):
    raise FileNotFoundError(f"no {CONFIG_FILE} in Hugging Face model directory {path!r}")
  with open(config_file) as f:
    return json.load(f)


def _dtype_name(dtype: Any) -> str:
  return dtype if isinstance(dtype, str) else jnp.dtype(dtype).name


def load_hf(path: str | os.PathLike, dtype: Any = "float32", param_dtype: Any = None, *,
            scan_layers: bool = False, on_host: bool = False) -> tuple[ModelConfig, Params]:
  """Reads a Hugging Face checkpoint directory (config.json + safetensors).

  Args:
    path: the directory, or a hub id `ORG/NAME` (downloaded into the Hugging Face cache, or found
      there offline: `models.hub.resolve_model_dir`).
    dtype: compute dtype ('float32' or 'bfloat16'; a jnp dtype also works). Norms, softmax and
      logits stay float32 either way.
    param_dtype: storage dtype of the parameters; defaults to `dtype`.
    scan_layers: return the config with `scan_layers=True` and the layers stacked.
    on_host: leave the parameters in host memory (numpy leaves), for the caller to place with
      its shardings (`jax.device_put`); otherwise they go to the default device.

  Returns:
    (cfg, params): the config and a parameter tree in `param_dtype`, ready for `forward`. Each
    tensor is converted from its stored dtype on its own (never a float32 copy of the whole
    model: a bfloat16 checkpoint loaded as bfloat16 is not converted at all).

  Raises:
    FileNotFoundError: `path`, its config.json or its safetensors files are missing.
    ValueError: the config is not supported (see `hf_config`), a tensor is missing, unexpected
      or of the wrong shape.
  """
  path = resolve_model_dir(path)
  dtype = _dtype_name(dtype)
  param_dtype = _dtype_name(param_dtype) if param_dtype is not None else dtype
  cfg = from_hf_config(read_hf_config(path), dtype=dtype, param_dtype=param_dtype)
  files = _weight_files(path)
  expected = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))
  names = _name_map(cfg)
  params: dict[str, Any] = {}
  unexpected = []
  for name, array in _read_tensors(files):
    if name not in names:
      if not _IGNORED.match(name):
        unexpected.append(name)
      continue
    tree_path, transpose = names.pop(name)
    want = _get(expected, tree_path).shape
    want_hf = want[::-1] if transpose else want
    if array.shape != want_hf:
      raise ValueError(f"tensor {name!r} in {path!r} has shape {array.shape}; the config needs "
                       f"{want_hf}")
    array = (array.T if transpose else array).astype(NP_DTYPES[param_dtype], copy=False)
    _set(params, tree_path, np.ascontiguousarray(array) if on_host else jnp.asarray(array))
  if unexpected:
    raise ValueError(f"{path!r} has tensors this model does not use (a feature the config does "
                     f"not describe?): {sorted(unexpected)[:8]}")
  if names:
    raise ValueError(f"{path!r} lacks tensors the config needs: {sorted(names)[:8]}")
  if scan_layers:
    return dataclasses.replace(cfg, scan_layers=True), stack_layers(params)
  return cfg, params


def _get(tree: Mapping[str, Any], path: Sequence[str]) -> Any:
  for key in path:
    tree = tree[key]
  return tree


def _set(tree: dict[str, Any], path: Sequence[str], value: Any) -> None:
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def _shard_name(i: int, n: int) -> str:
  return f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def save_hf(path: str | os.PathLike, cfg: ModelConfig, params: Params, *,
            max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
            extra_config: Optional[Mapping[str, Any]] = None,
            copy_files_from: Optional[str | os.PathLike] = None) -> None:
  """Writes `params` as a Hugging Face checkpoint directory that transformers can open.

  Tensors keep the dtype of `params` (so bfloat16 parameters give a bfloat16 checkpoint).

  Args:
    path: output directory (created if missing; its config.json, model*.safetensors and
      index are replaced).
    cfg: the model config (its switches pick the family: llama, qwen2, qwen3, gemma or
      gemma3_text).
    params: the parameter tree of `cfg` (either layer layout).
    max_shard_bytes: above this total size the weights go into several files plus
      `model.safetensors.index.json`.
    extra_config: keys merged into config.json (e.g. bos_token_id, eos_token_id).
    copy_files_from: a directory whose tokenizer and generation files (`AUX_FILES`) are copied
      along, and whose config.json token ids (bos/eos/pad) are kept.

  Raises:
    ValueError: `cfg` has no Hugging Face family, or `params` does not fit `cfg`.
  """
  path = os.fspath(path)
  hf_config = to_hf_config(cfg)
  if copy_files_from is not None:
    copy_files_from = resolve_model_dir(copy_files_from)
    source = read_hf_config(copy_files_from)
    hf_config.update({k: source[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")
                      if k in source})
  hf_config.update(extra_config or {})
  params = unstack_layers(params)
  tensors = {}
  for name, (tree_path, transpose) in _name_map(cfg).items():
    try:
      value = np.asarray(_get(params, tree_path))
    except KeyError as e:
      raise ValueError(f"params lack {'/'.join(tree_path)} (HF tensor {name!r})") from e
    tensors[name] = np.ascontiguousarray(value.T if transpose else value)
  shards: list[dict[str, np.ndarray]] = [{}]
  size = 0
  for name, value in tensors.items():
    if shards[-1] and size + value.nbytes > max_shard_bytes:
      shards.append({})
      size = 0
    shards[-1][name] = value
    size += value.nbytes
  os.makedirs(path, exist_ok=True)
  for stale in glob.glob(os.path.join(path, "model*.safetensors")) + [
      os.path.join(path, INDEX_FILE)]:
    if os.path.exists(stale):
      os.remove(stale)
  metadata = {"format": "pt"}
  if len(shards) == 1:
    safetensors.numpy.save_file(shards[0], os.path.join(path, SINGLE_FILE), metadata=metadata)
  else:
    weight_map = {}
    for i, shard in enumerate(shards):
      name = _shard_name(i, len(shards))
      safetensors.numpy.save_file(shard, os.path.join(path, name), metadata=metadata)
      weight_map.update({k: name for k in shard})
    index = {"metadata": {"total_size": sum(v.nbytes for v in tensors.values())},
             "weight_map": weight_map}
    with open(os.path.join(path, INDEX_FILE), "w") as f:
      json.dump(index, f, indent=2, sort_keys=True)
  with open(os.path.join(path, CONFIG_FILE), "w") as f:
    json.dump(hf_config, f, indent=2, sort_keys=True)
  if copy_files_from is not None:
    for name in AUX_FILES:
      src = os.path.join(os.fspath(copy_files_from), name)
      if os.path.isfile(src) and os.path.abspath(src) != os.path.abspath(os.path.join(path, name)):
        shutil.copyfile(src, os.path.join(path, name))
