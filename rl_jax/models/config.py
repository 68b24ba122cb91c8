"""`ModelConfig`: one frozen description of a decoder-only transformer.

One config covers the Llama / Qwen2 / Qwen3 / Gemma / Gemma 3 / SmolLM2 layouts through a few
switches (q/k/v bias, q/k RMSNorm, GeGLU vs SwiGLU, scaled embeddings, the (1 + w) RMSNorm,
norms after attention and MLP, interleaved sliding-window layers, logit soft-capping) and RoPE
scaling (linear, Llama 3). Presets give named sizes (the shapes of a few public checkpoints among
them; weights come from `models.load_hf`); `get_preset('tiny', vocab_size=128)` overrides fields
of a preset.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
_ROPE_SCALINGS = ("none", "linear", "llama3")
# `ModelConfig.remat` -> the `jax.checkpoint` policy of each decoder block (what the backward pass
# may keep from the forward; everything else is recomputed). 'none' does not wrap the blocks.
REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,  # keep only each block's input
    "dots_saveable": jax.checkpoint_policies.dots_saveable,  # keep matmul outputs
    # keep matmul outputs without batch dimensions (the projections, not attention's einsums)
    "dots_with_no_batch_dims_saveable":
        jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Decoder-only transformer hyper-parameters (hashable: usable as a static jit argument).

  Attributes:
    vocab_size: V, number of token ids.
    d_model: D, residual width.
    n_layers: number of decoder blocks.
    n_heads: query heads.
    n_kv_heads: key/value heads (grouped-query attention; must divide n_heads).
    head_dim: per-head width (0 means d_model // n_heads).
    d_ff: hidden width of the gated MLP.
    rope_theta: RoPE base frequency.
    norm_eps: RMSNorm epsilon.
    tie_embeddings: unembed with the transposed token embedding (no separate lm_head).
    max_seq_len: longest sequence (prompt + completion) the model is used with.
    qkv_bias: bias on q/k/v projections (Qwen2).
    qk_norm: RMSNorm over each head of q and k (Qwen3).
    mlp_activation: 'silu' (SwiGLU) or 'gelu_tanh' (GeGLU, Gemma).
    scale_embeddings: multiply embeddings by sqrt(D) (Gemma).
    norm_plus_one: RMSNorm scales by (1 + w) (Gemma).
    dtype: compute dtype of matmuls and activations ('float32' or 'bfloat16'); norms, softmax and
      log-probs are always float32.
    param_dtype: dtype of the parameters the model is called with (`init_params` creates them
      in it; `cast_params` makes such a copy of float32 master weights, which is how the trainer
      runs bfloat16 parameters: `config.train.master_dtype`).
    remat: rematerialization of each decoder block in differentiated passes, a key of
      `REMAT_POLICIES`: 'none' (keep every activation), 'full' (keep each block's
      input, recompute the rest in the backward pass), 'dots_saveable' or
      'dots_with_no_batch_dims_saveable' (keep those matmul outputs). Values are unchanged;
      passes that are not differentiated (sampling) are unaffected.
    rope_scaling: RoPE frequency scaling: 'none', 'linear' (all frequencies / rope_factor) or
      'llama3' (Llama 3.1: low frequencies / rope_factor, high ones kept, a smooth ramp between).
    rope_factor: the scaling factor of 'linear' and 'llama3'.
    rope_low_freq_factor: 'llama3' only: wavelengths above original_max_len / this are scaled.
    rope_high_freq_factor: 'llama3' only: wavelengths below original_max_len / this are kept.
    rope_original_max_len: 'llama3' only: the pre-training context length.
    sliding_window: W > 0 makes some layers local: their queries attend only to keys whose
      position is less than W behind theirs (q_pos - k_pos < W, Gemma 3 / Mistral). 0: every layer
      attends to the whole prefix.
    sliding_window_pattern: with a window, layer i (0-based) is global (full attention) when
      (i + 1) % sliding_window_pattern == 0, local otherwise (Gemma 3: 6, five local layers then
      one global). 0: every layer is local.
    rope_local_theta: RoPE base of the local layers (Gemma 3: 10,000), which are never scaled
      (rope_scaling applies to the global ones). 0: the local layers use the global frequencies.
    post_norms: RMSNorm the attention and MLP outputs before each residual add (Gemma 2 / 3: four
      norms a layer, `input_layernorm`, `post_attention_layernorm`, `pre_feedforward_layernorm`,
      `post_feedforward_layernorm`). Without it `post_attention_layernorm` is the pre-MLP norm.
    query_pre_attn_scalar: attention scores are scaled by its -1/2 power (Gemma 3); 0 means
      head_dim.
    final_logit_softcap: c > 0 maps logits z to c * tanh(z / c) (Gemma 2 / 3 when set); 0: off.
    scan_layers: run the decoder blocks under `nn.scan` over parameters stacked on a leading
      layer axis (`layers/...` [n_layers, ...] instead of `layers_0/..` .. `layers_{L-1}/..`),
      so tracing and compiling cost one block, not n_layers. The KV cache is stacked too
      (`KVCache.k` one [B, n_layers, KVH, S, hd] array). Values are unchanged; HF import and
      export, checkpoints (`models.layout`) and sharding rules accept either layout.
  """

  vocab_size: int
  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  d_ff: int
  head_dim: int = 0
  rope_theta: float = 10000.0
  norm_eps: float = 1e-6
  tie_embeddings: bool = True
  max_seq_len: int = 512
  qkv_bias: bool = False
  qk_norm: bool = False
  mlp_activation: str = "silu"
  scale_embeddings: bool = False
  norm_plus_one: bool = False
  dtype: str = "float32"
  param_dtype: str = "float32"
  rope_scaling: str = "none"
  rope_factor: float = 1.0
  rope_low_freq_factor: float = 1.0
  rope_high_freq_factor: float = 4.0
  rope_original_max_len: int = 8192
  remat: str = "none"
  scan_layers: bool = False
  sliding_window: int = 0
  sliding_window_pattern: int = 0
  rope_local_theta: float = 0.0
  post_norms: bool = False
  query_pre_attn_scalar: float = 0.0
  final_logit_softcap: float = 0.0

  def __post_init__(self):
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff",
                 "max_seq_len"):
      if getattr(self, name) <= 0:
        raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
    if self.n_heads % self.n_kv_heads:
      raise ValueError(f"ModelConfig.n_heads={self.n_heads} must be a multiple of "
                       f"n_kv_heads={self.n_kv_heads}")
    if not self.head_dim and self.d_model % self.n_heads:
      raise ValueError(f"ModelConfig.d_model={self.d_model} is not divisible by "
                       f"n_heads={self.n_heads}; set head_dim explicitly")
    if self.mlp_activation not in ("silu", "gelu_tanh"):
      raise ValueError(f"ModelConfig.mlp_activation must be 'silu' or 'gelu_tanh', got "
                       f"{self.mlp_activation!r}")
    if self.rope_scaling not in _ROPE_SCALINGS:
      raise ValueError(f"ModelConfig.rope_scaling must be one of {list(_ROPE_SCALINGS)}, got "
                       f"{self.rope_scaling!r}")
    if self.rope_scaling != "none" and self.rope_factor <= 0:
      raise ValueError(f"ModelConfig.rope_factor must be positive, got {self.rope_factor}")
    if self.rope_scaling == "llama3" and not (
        0 < self.rope_low_freq_factor < self.rope_high_freq_factor):
      raise ValueError("ModelConfig.rope_low_freq_factor must be positive and below "
                       f"rope_high_freq_factor, got {self.rope_low_freq_factor} and "
                       f"{self.rope_high_freq_factor}")
    if self.remat not in REMAT_POLICIES:
      raise ValueError(f"ModelConfig.remat must be one of {list(REMAT_POLICIES)}, got "
                       f"{self.remat!r}")
    for name in ("sliding_window", "sliding_window_pattern", "rope_local_theta",
                 "query_pre_attn_scalar", "final_logit_softcap"):
      if getattr(self, name) < 0:
        raise ValueError(f"ModelConfig.{name} must be >= 0 (0 = off), got {getattr(self, name)}")
    for name in ("dtype", "param_dtype"):
      if getattr(self, name) not in _DTYPES:
        raise ValueError(f"ModelConfig.{name} must be one of {sorted(_DTYPES)}, got "
                         f"{getattr(self, name)!r}")

  @property
  def hd(self) -> int:
    """Per-head width."""
    return self.head_dim or self.d_model // self.n_heads

  def is_local(self, layer: int) -> bool:
    """Whether decoder layer `layer` (0-based) uses the sliding window."""
    if not self.sliding_window:
      return False
    pattern = self.sliding_window_pattern
    return not (pattern and (layer + 1) % pattern == 0)

  @property
  def local_layers(self) -> tuple[bool, ...]:
    """`is_local` of every layer, in order."""
    return tuple(self.is_local(i) for i in range(self.n_layers))

  @property
  def attn_scale(self) -> float:
    """The factor attention scores are multiplied by (query_pre_attn_scalar or head_dim)^-1/2."""
    return (self.query_pre_attn_scalar or self.hd) ** -0.5

  @property
  def compute_dtype(self) -> Any:
    return _DTYPES[self.dtype]

  @property
  def params_dtype(self) -> Any:
    return _DTYPES[self.param_dtype]


PRESETS: dict[str, dict[str, Any]] = {
    # ~0.4M parameters at vocab 128: fast enough for RL on a 2-core CPU.
    "tiny": dict(d_model=128, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=384, max_seq_len=64),
    # ~3M parameters: the next size up for CPU experiments.
    "small": dict(d_model=256, n_layers=6, n_heads=8, n_kv_heads=4, d_ff=768, max_seq_len=256),
    # Shapes of public checkpoints (weights come from `load_hf`; these give the layouts only).
    # SmolLM2 (Llama layout, tied embeddings).
    "smollm2-135m": dict(vocab_size=49152, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3,
                         d_ff=1536, rope_theta=100000.0, norm_eps=1e-5, max_seq_len=2048),
    "smollm2-360m": dict(vocab_size=49152, d_model=960, n_layers=32, n_heads=15, n_kv_heads=5,
                         d_ff=2560, rope_theta=100000.0, norm_eps=1e-5, max_seq_len=2048),
    # Llama 3.2 1B (tied embeddings, llama3 RoPE scaling).
    "llama3-1b": dict(vocab_size=128256, d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8,
                      head_dim=64, d_ff=8192, rope_theta=500000.0, norm_eps=1e-5,
                      max_seq_len=131072, rope_scaling="llama3", rope_factor=32.0,
                      rope_low_freq_factor=1.0, rope_high_freq_factor=4.0,
                      rope_original_max_len=8192),
    # Qwen2.5 0.5B (q/k/v bias, tied embeddings).
    "qwen2.5-0.5b": dict(vocab_size=151936, d_model=896, n_layers=24, n_heads=14, n_kv_heads=2,
                         d_ff=4864, rope_theta=1000000.0, norm_eps=1e-6, max_seq_len=32768,
                         qkv_bias=True),
    # Qwen3 0.6B (q/k RMSNorm, head_dim 128 != d_model / n_heads, tied embeddings).
    "qwen3-0.6b": dict(vocab_size=151936, d_model=1024, n_layers=28, n_heads=16, n_kv_heads=8,
                       head_dim=128, d_ff=3072, rope_theta=1000000.0, norm_eps=1e-6,
                       max_seq_len=40960, qk_norm=True),
    # Llama 3.2 3B (config.json of meta-llama/Llama-3.2-3B: tied embeddings, llama3 RoPE).
    "llama3-3b": dict(vocab_size=128256, d_model=3072, n_layers=28, n_heads=24, n_kv_heads=8,
                      head_dim=128, d_ff=8192, rope_theta=500000.0, norm_eps=1e-5,
                      max_seq_len=131072, rope_scaling="llama3", rope_factor=32.0,
                      rope_low_freq_factor=1.0, rope_high_freq_factor=4.0,
                      rope_original_max_len=8192),
    # Qwen3 1.7B and 8B (config.json of Qwen/Qwen3-1.7B, Qwen/Qwen3-8B; 8B has its own lm_head).
    "qwen3-1.7b": dict(vocab_size=151936, d_model=2048, n_layers=28, n_heads=16, n_kv_heads=8,
                       head_dim=128, d_ff=6144, rope_theta=1000000.0, norm_eps=1e-6,
                       max_seq_len=40960, qk_norm=True),
    "qwen3-8b": dict(vocab_size=151936, d_model=4096, n_layers=36, n_heads=32, n_kv_heads=8,
                     head_dim=128, d_ff=12288, rope_theta=1000000.0, norm_eps=1e-6,
                     max_seq_len=40960, qk_norm=True, tie_embeddings=False),
    # Gemma 2B (GeGLU, sqrt(D)-scaled embeddings, (1 + w) RMSNorm, multi-query attention).
    "gemma-2b": dict(vocab_size=256000, d_model=2048, n_layers=18, n_heads=8, n_kv_heads=1,
                     head_dim=256, d_ff=16384, rope_theta=10000.0, norm_eps=1e-6,
                     max_seq_len=8192, mlp_activation="gelu_tanh", scale_embeddings=True,
                     norm_plus_one=True),
    # Gemma 3 1B (config.json of google/gemma-3-1b-it): q/k RMSNorm, four norms a layer, five
    # sliding-window layers (512 tokens, RoPE base 10,000) then one global (RoPE base 1e6).
    "gemma3-1b": dict(vocab_size=262144, d_model=1152, n_layers=26, n_heads=4, n_kv_heads=1,
                      head_dim=256, d_ff=6912, rope_theta=1000000.0, norm_eps=1e-6,
                      max_seq_len=32768, mlp_activation="gelu_tanh", scale_embeddings=True,
                      norm_plus_one=True, qk_norm=True, post_norms=True, sliding_window=512,
                      sliding_window_pattern=6, rope_local_theta=10000.0,
                      query_pre_attn_scalar=256.0),
}


def get_preset(name: str, **overrides: Any) -> ModelConfig:
  """Returns the preset `name` with `overrides` applied (e.g. vocab_size for a tokenizer)."""
  if name not in PRESETS:
    raise KeyError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
  fields = dict(PRESETS[name])
  fields.update(overrides)
  unknown = set(fields) - {f.name for f in dataclasses.fields(ModelConfig)}
  if unknown:
    raise ValueError(f"unknown ModelConfig field(s) {sorted(unknown)} for preset {name!r}")
  if "vocab_size" not in fields:
    raise ValueError(f"preset {name!r} needs vocab_size (the tokenizer's vocabulary size)")
  return ModelConfig(**fields)
