"""Rotary position embeddings: inverse frequencies (with Llama 3 / linear scaling) and rotation.

The frequencies depend only on the (static, hashable) `ModelConfig`, so they are computed once in
numpy and enter the jitted graph as a constant. The formulas follow Hugging Face's
`modeling_rope_utils` ('default', 'linear', 'llama3'), so imported checkpoints match exactly.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from rl_jax.models.config import ModelConfig


@functools.lru_cache(maxsize=64)
def _inv_freq(cfg: ModelConfig, local: bool = False) -> np.ndarray:
  hd = cfg.hd
  exponents = np.arange(0, hd, 2, dtype=np.float32) / np.float32(hd)
  if local and cfg.rope_local_theta:  # Local layers: their own base, never scaled (Gemma 3).
    return (1.0 / (np.float32(cfg.rope_local_theta) ** exponents)).astype(np.float32)
  inv_freq = (1.0 / (np.float32(cfg.rope_theta) ** exponents)).astype(np.float32)
  if cfg.rope_scaling == "linear":
    inv_freq = inv_freq / np.float32(cfg.rope_factor)
  elif cfg.rope_scaling == "llama3":
    factor = cfg.rope_factor
    old_len = cfg.rope_original_max_len
    low_freq_wavelen = old_len / cfg.rope_low_freq_factor
    high_freq_wavelen = old_len / cfg.rope_high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = ((old_len / wavelen - cfg.rope_low_freq_factor)
              / (cfg.rope_high_freq_factor - cfg.rope_low_freq_factor))
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    inv_freq = np.where(medium, smoothed, scaled).astype(np.float32)
  return inv_freq


def rope_frequencies(cfg: ModelConfig, local: bool = False) -> np.ndarray:
  """Float32 inverse frequencies [head_dim / 2] of `cfg`'s global layers (scaled per
  `cfg.rope_scaling`), or with `local` of its sliding-window layers (`cfg.rope_local_theta`,
  unscaled; the global ones where that is 0)."""
  return _inv_freq(cfg, local).copy()


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: np.ndarray) -> jax.Array:
  """Rotary embedding, rotate-half convention (HF Llama).

  Args:
    x: [B, L, H, hd] queries or keys.
    positions: [B, L] position ids.
    inv_freq: [hd / 2] inverse frequencies (`rope_frequencies`).

  Returns:
    The rotated `x`, in its dtype (the rotation itself runs in float32).
  """
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B, L, hd/2]
  cos = jnp.cos(angles)[:, :, None, :]
  sin = jnp.sin(angles)[:, :, None, :]
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x.dtype)
