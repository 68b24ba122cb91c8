"""Hugging Face `config.json` <-> `ModelConfig`, for the Llama / Qwen2 / Qwen3 / Gemma / Gemma 3
(text) families.

Both the transformers 4 layout (`rope_theta`, `rope_scaling`) and the transformers 5 layout
(`rope_parameters`) are read. Anything this library does not implement (an unknown `model_type`,
a RoPE scaling type other than linear/llama3, an active sliding window, biases on o_proj or the
MLP, quantized weights, ...) raises a ValueError naming the field and its value: a config is
either reproduced exactly or refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from rl_jax.models.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class _Family:
  architecture: str
  activations: tuple[str, ...]
  tie_default: bool
  max_len_default: int
  head_dim_default: Optional[int]  # None: hidden_size // num_attention_heads.
  switches: Mapping[str, Any]  # ModelConfig fields every model of the family has.


FAMILIES: dict[str, _Family] = {
    "llama": _Family("LlamaForCausalLM", ("silu",), False, 2048, None, {}),
    "qwen2": _Family("Qwen2ForCausalLM", ("silu",), False, 32768, None, {"qkv_bias": True}),
    "qwen3": _Family("Qwen3ForCausalLM", ("silu",), False, 32768, 128, {"qk_norm": True}),
    "gemma": _Family("GemmaForCausalLM", ("gelu_pytorch_tanh", "gelu", "gelu_tanh"), True, 8192,
                     256, {"mlp_activation": "gelu_tanh", "scale_embeddings": True,
                           "norm_plus_one": True}),
    # Gemma 3's text model (google/gemma-3-1b-it; the text tower of the larger ones).
    "gemma3_text": _Family("Gemma3ForCausalLM", ("gelu_pytorch_tanh", "gelu_tanh"), True, 131072,
                           256, {"mlp_activation": "gelu_tanh", "scale_embeddings": True,
                                 "norm_plus_one": True, "qk_norm": True, "post_norms": True}),
}
_GEMMA3 = "gemma3_text"
_LOCAL, _GLOBAL = "sliding_attention", "full_attention"

# Keys whose value must be "off" (falsy or the given value) for the model to be reproduced here.
_MUST_BE_OFF = {
    "mlp_bias": False,
    "use_bidirectional_attention": False,
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "quantization_config": None,
}


def _unsupported(field: str, value: Any, why: str) -> ValueError:
  return ValueError(f"unsupported Hugging Face config: {field}={value!r} ({why})")


def _rope_fields(hf: Mapping[str, Any], max_len: int) -> dict[str, Any]:
  """RoPE theta and scaling from either config layout."""
  params = hf.get("rope_parameters") or {}
  scaling = hf.get("rope_scaling") or {}
  if any(isinstance(v, Mapping) for v in params.values()):
    raise _unsupported("rope_parameters", params, "per-layer-type RoPE is not implemented")
  merged = {**scaling, **params}
  theta = merged.get("rope_theta", hf.get("rope_theta", 10000.0))
  kind = merged.get("rope_type", merged.get("type", "default"))
  field = "rope_parameters.rope_type" if params else "rope_scaling.rope_type"
  partial = merged.get("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
  if partial not in (None, 1.0):
    raise _unsupported("partial_rotary_factor", partial, "only full-width RoPE is implemented")
  out = {"rope_theta": float(theta)}
  if kind == "default":
    return out
  if kind == "linear":
    return {**out, "rope_scaling": "linear", "rope_factor": float(merged["factor"])}
  if kind == "llama3":
    return {**out, "rope_scaling": "llama3", "rope_factor": float(merged["factor"]),
            "rope_low_freq_factor": float(merged["low_freq_factor"]),
            "rope_high_freq_factor": float(merged["high_freq_factor"]),
            "rope_original_max_len": int(merged.get("original_max_position_embeddings",
                                                    max_len))}
  raise _unsupported(field, kind, "implemented RoPE types: 'default', 'linear', 'llama3'")


def _gemma3_fields(hf: Mapping[str, Any], n_layers: int, max_len: int) -> dict[str, Any]:
  """Gemma 3's window, layer pattern, per-kind RoPE, attention scale and logit soft-cap.

  Layer kinds come from `layer_types` (transformers 5) or `sliding_window_pattern` (4; default
  6); RoPE from per-kind `rope_parameters` (5) or `rope_theta` / `rope_local_base_freq` /
  `rope_scaling` (4, the scaling on the global layers only).
  """
  window = int(hf.get("sliding_window") or 0)
  pattern = int(hf.get("sliding_window_pattern") or 6)
  layer_types = hf.get("layer_types")
  if layer_types:
    if len(layer_types) != n_layers or set(layer_types) - {_LOCAL, _GLOBAL}:
      raise _unsupported("layer_types", layer_types,
                         f"expected num_hidden_layers={n_layers} of {_LOCAL!r} / {_GLOBAL!r}")
    globals_at = [i for i, t in enumerate(layer_types) if t == _GLOBAL]
    pattern = globals_at[0] + 1 if globals_at else 0
    want = [_GLOBAL if pattern and (i + 1) % pattern == 0 else _LOCAL for i in range(n_layers)]
    if list(layer_types) != want:
      raise _unsupported("layer_types", layer_types,
                         "only a global layer every k-th layer (sliding_window_pattern) is "
                         "implemented")
  if not window and pattern != 1:
    raise _unsupported("sliding_window", hf.get("sliding_window"),
                       "Gemma 3 layers of kind 'sliding_attention' without a window are not "
                       "implemented")
  params = hf.get("rope_parameters") or {}
  if any(isinstance(v, Mapping) for v in params.values()):
    unknown = set(params) - {_LOCAL, _GLOBAL}
    if unknown:
      raise _unsupported("rope_parameters", params, f"unknown layer types {sorted(unknown)}")
    global_rope = _rope_fields({"rope_parameters": dict(params.get(_GLOBAL) or {})}, max_len)
    local = dict(params.get(_LOCAL) or {})
    local_theta = float(local.get("rope_theta", 10000.0))
    if local.get("rope_type", "default") != "default":
      raise _unsupported("rope_parameters.sliding_attention.rope_type", local["rope_type"],
                         "local layers use default RoPE here")
  else:
    global_rope = _rope_fields({**hf, "rope_theta": hf.get("rope_theta", 1000000.0)}, max_len)
    local_theta = float(hf.get("rope_local_base_freq", 10000.0))
  return dict(sliding_window=window, sliding_window_pattern=pattern,
              rope_local_theta=local_theta,
              query_pre_attn_scalar=float(hf.get("query_pre_attn_scalar") or 0.0),
              final_logit_softcap=float(hf.get("final_logit_softcapping") or 0.0),
              **global_rope)


def _check_sliding_window(hf: Mapping[str, Any], n_layers: int) -> None:
  layer_types = hf.get("layer_types")
  if layer_types and any(t != "full_attention" for t in layer_types):
    raise _unsupported("layer_types", layer_types, "only full attention is implemented")
  if hf.get("use_sliding_window"):
    if hf.get("max_window_layers", 0) < n_layers:
      raise _unsupported("use_sliding_window", True,
                         f"sliding window attention is active (max_window_layers="
                         f"{hf.get('max_window_layers')} < num_hidden_layers={n_layers}); "
                         "only full attention is implemented")
  elif "use_sliding_window" not in hf and hf.get("sliding_window"):
    raise _unsupported("sliding_window", hf["sliding_window"],
                       "only full attention is implemented")


def from_hf_config(hf: Mapping[str, Any], dtype: str = "float32",
                   param_dtype: Optional[str] = None) -> ModelConfig:
  """The `ModelConfig` of a Hugging Face `config.json` (a parsed dict).

  Args:
    hf: the parsed config.json.
    dtype: compute dtype of the returned config.
    param_dtype: parameter dtype (defaults to `dtype`).

  Raises:
    ValueError: the model type or one of its features is not implemented (the message names the
      config.json field and its value).
  """
  model_type = hf.get("model_type")
  if model_type == "gemma3":
    raise _unsupported("model_type", model_type, "the multimodal Gemma 3 is not implemented; its "
                       "text model (model_type 'gemma3_text', Gemma3ForCausalLM, e.g. "
                       "google/gemma-3-1b-it) is")
  if model_type not in FAMILIES:
    raise ValueError(f"unsupported Hugging Face config: model_type={model_type!r}; supported "
                     f"model types: {sorted(FAMILIES)}")
  fam = FAMILIES[model_type]
  for key, off in _MUST_BE_OFF.items():
    if key == "final_logit_softcapping" and model_type == _GEMMA3:
      continue  # Implemented (ModelConfig.final_logit_softcap).
    if hf.get(key, off) not in (off, None, False):
      raise _unsupported(key, hf[key], "not implemented")
  act = hf.get("hidden_activation") or hf.get("hidden_act") or fam.activations[0]
  if act not in fam.activations:
    raise _unsupported("hidden_act", act, f"{model_type} models here use {fam.activations[0]!r}")
  bias = bool(hf.get("attention_bias", False))
  if bias and model_type != "qwen2":
    raise _unsupported("attention_bias", True, "o_proj bias is not implemented")
  n_heads = int(hf["num_attention_heads"])
  n_layers = int(hf["num_hidden_layers"])
  max_len = int(hf.get("max_position_embeddings") or fam.max_len_default)
  if model_type == _GEMMA3:
    extra = _gemma3_fields(hf, n_layers, max_len)
  else:
    _check_sliding_window(hf, n_layers)
    extra = _rope_fields(hf, max_len)
  head_dim = hf.get("head_dim") or fam.head_dim_default or hf["hidden_size"] // n_heads
  fields = dict(
      vocab_size=int(hf["vocab_size"]),
      d_model=int(hf["hidden_size"]),
      n_layers=n_layers,
      n_heads=n_heads,
      n_kv_heads=int(hf.get("num_key_value_heads") or n_heads),
      d_ff=int(hf["intermediate_size"]),
      head_dim=int(head_dim),
      norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
      tie_embeddings=bool(hf.get("tie_word_embeddings", fam.tie_default)),
      max_seq_len=max_len,
      dtype=dtype,
      param_dtype=param_dtype or dtype,
      **fam.switches,
      **extra,
  )
  return ModelConfig(**fields)


def _int_if_whole(x: float) -> float | int:
  """transformers' Gemma3TextConfig types query_pre_attn_scalar as an int."""
  return int(x) if float(x).is_integer() else x


def model_type_of(cfg: ModelConfig) -> str:
  """The Hugging Face family that reproduces `cfg`.

  Raises:
    ValueError: no supported family has this combination of switches.
  """
  gemma = (cfg.mlp_activation == "gelu_tanh", cfg.scale_embeddings, cfg.norm_plus_one)
  gemma3 = (cfg.qk_norm, cfg.post_norms)
  if all(gemma) and all(gemma3) and not cfg.qkv_bias:
    return _GEMMA3
  if cfg.post_norms or cfg.query_pre_attn_scalar or cfg.final_logit_softcap:
    raise ValueError("ModelConfig has no Hugging Face family: post_norms, query_pre_attn_scalar "
                     "and final_logit_softcap are Gemma 3's (with qk_norm, mlp_activation="
                     "'gelu_tanh', scale_embeddings and norm_plus_one)")
  if cfg.sliding_window or cfg.rope_local_theta:
    raise ValueError("ModelConfig has no Hugging Face family: sliding_window / rope_local_theta "
                     "are written for Gemma 3 only")
  if all(gemma) and not (cfg.qkv_bias or cfg.qk_norm):
    return "gemma"
  if any(gemma):
    raise ValueError(
        "ModelConfig has no Hugging Face family: mlp_activation='gelu_tanh', scale_embeddings and "
        f"norm_plus_one go together (Gemma); got {cfg.mlp_activation!r}, "
        f"{cfg.scale_embeddings}, {cfg.norm_plus_one}")
  if cfg.qk_norm and cfg.qkv_bias:
    raise ValueError("ModelConfig has no Hugging Face family: qk_norm=True with qkv_bias=True")
  if cfg.qk_norm:
    return "qwen3"
  return "qwen2" if cfg.qkv_bias else "llama"


def to_hf_config(cfg: ModelConfig) -> dict[str, Any]:
  """A config.json dict (both the transformers 4 and 5 RoPE keys) that loads `cfg` in HF."""
  model_type = model_type_of(cfg)
  fam = FAMILIES[model_type]
  rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
  if cfg.rope_scaling == "linear":
    rope.update(rope_type="linear", factor=cfg.rope_factor)
  elif cfg.rope_scaling == "llama3":
    rope.update(rope_type="llama3", factor=cfg.rope_factor,
                low_freq_factor=cfg.rope_low_freq_factor,
                high_freq_factor=cfg.rope_high_freq_factor,
                original_max_position_embeddings=cfg.rope_original_max_len)
  out = {
      "architectures": [fam.architecture],
      "model_type": model_type,
      "vocab_size": cfg.vocab_size,
      "hidden_size": cfg.d_model,
      "intermediate_size": cfg.d_ff,
      "num_hidden_layers": cfg.n_layers,
      "num_attention_heads": cfg.n_heads,
      "num_key_value_heads": cfg.n_kv_heads,
      "head_dim": cfg.hd,
      "hidden_act": fam.activations[0],
      "max_position_embeddings": cfg.max_seq_len,
      "rms_norm_eps": cfg.norm_eps,
      "tie_word_embeddings": cfg.tie_embeddings,
      "attention_bias": cfg.qkv_bias,
      "rope_theta": cfg.rope_theta,
      "rope_parameters": rope,
      "torch_dtype": cfg.param_dtype,
  }
  if cfg.rope_scaling != "none":
    out["rope_scaling"] = dict(rope)
  if model_type in ("qwen2", "qwen3"):
    out.update(use_sliding_window=False, sliding_window=None)
  if model_type == _GEMMA3:
    out.pop("hidden_act")
    layer_types = [_LOCAL if cfg.is_local(i) else _GLOBAL for i in range(cfg.n_layers)]
    local_theta = cfg.rope_local_theta or cfg.rope_theta
    out.update(
        hidden_activation=fam.activations[0], sliding_window=cfg.sliding_window or None,
        layer_types=layer_types, rope_local_base_freq=local_theta,
        rope_parameters={_GLOBAL: rope, _LOCAL: {"rope_type": "default",
                                                 "rope_theta": local_theta}},
        query_pre_attn_scalar=_int_if_whole(cfg.query_pre_attn_scalar or cfg.hd),
        final_logit_softcapping=cfg.final_logit_softcap or None, attn_logit_softcapping=None)
    if cfg.sliding_window and cfg.sliding_window_pattern:
      out["sliding_window_pattern"] = cfg.sliding_window_pattern
  if model_type == "qwen2":
    out.pop("attention_bias")  # Qwen2 always has q/k/v bias (and no such key).
  return out
