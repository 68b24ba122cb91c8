"""Public per-chip numbers of TPU generations, for memory checks and roofline estimates.

`CHIPS[name]` is one chip (what a JAX device is on these generations, megacore included; on v4 a
topology may list each of a chip's two TensorCores as a device, see `per_device`). Sources (Google
Cloud TPU system-architecture pages, read 2026-11):

- v4:  https://cloud.google.com/tpu/docs/v4   275 TFLOP/s bf16, 32 GiB HBM2, 1,200 GB/s.
- v5e: https://cloud.google.com/tpu/docs/v5e  197 TFLOP/s bf16, 16 GiB HBM2, 819 GB/s.
- v5p: https://cloud.google.com/tpu/docs/v5p  459 TFLOP/s bf16, 95 GiB HBM2e, 2,765 GB/s.
- v6e: https://cloud.google.com/tpu/docs/v6e  918 TFLOP/s bf16, 32 GiB HBM, 1,640 GB/s.

The roofline time of a program is max(FLOPs / peak FLOP/s, HBM bytes / HBM bandwidth): a lower
bound that ignores communication, latency and float32 matmuls (which run at a fraction of the
bf16 peak).
"""

from __future__ import annotations

import dataclasses
from typing import Any

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
  """One accelerator chip.

  Attributes:
    name: generation, as in topology names ('v5e').
    device_kind: `jax.Device.device_kind` of its devices.
    peak_bf16_flops: dense bfloat16 FLOP/s.
    hbm_bytes: HBM capacity in bytes.
    hbm_bandwidth: HBM bytes/s.
  """

  name: str
  device_kind: str
  peak_bf16_flops: float
  hbm_bytes: int
  hbm_bandwidth: float

  def per_device(self, devices_per_chip: int) -> "Chip":
    """The share of one device when a chip shows up as `devices_per_chip` devices."""
    if devices_per_chip == 1:
      return self
    k = devices_per_chip
    return dataclasses.replace(self, peak_bf16_flops=self.peak_bf16_flops / k,
                               hbm_bytes=self.hbm_bytes // k,
                               hbm_bandwidth=self.hbm_bandwidth / k)

  def roofline_seconds(self, flops: float, hbm_bytes: float) -> float:
    """max(compute time, memory time) of one device's program."""
    return max(flops / self.peak_bf16_flops, hbm_bytes / self.hbm_bandwidth)


CHIPS: dict[str, Chip] = {
    "v4": Chip("v4", "TPU v4", 275e12, 32 * GIB, 1200e9),
    "v5e": Chip("v5e", "TPU v5 lite", 197e12, 16 * GIB, 819e9),
    "v5p": Chip("v5p", "TPU v5", 459e12, 95 * GIB, 2765e9),
    "v6e": Chip("v6e", "TPU v6 lite", 918e12, 32 * GIB, 1640e9),
}


def per_device_bytes(mem: Any) -> int:
  """What a compiled program holds on one device, from its `memory_analysis()`: arguments,
  outputs not aliased to arguments, temporaries and code (compare with `Chip.hbm_bytes`)."""
  return int(mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
             + mem.temp_size_in_bytes + mem.generated_code_size_in_bytes)


def chip_of_topology(topology: str) -> Chip:
  """The chip of a topology name such as 'v5e:2x4' (its part before ':')."""
  name = topology.split(":")[0].lower()
  if name not in CHIPS:
    raise ValueError(f"unknown TPU generation {name!r} in topology {topology!r}; expected one of "
                     f"{sorted(CHIPS)} (e.g. 'v5e:2x4', 'v5p:2x2x1')")
  return CHIPS[name]


# Model FLOPs (matmuls and causal attention; what a roofline divides by the peak).


def model_dims(cfg: Any) -> tuple[int, int, int, int, int, int, int]:
  """(layers, d_model, heads, kv_heads, head_dim, d_ff, vocab) of a ModelConfig or a dict."""
  get = (lambda k: cfg[k]) if isinstance(cfg, dict) else (lambda k: getattr(cfg, k))
  d, h = get("d_model"), get("n_heads")
  hd = (cfg.get("head_dim", 0) if isinstance(cfg, dict) else cfg.head_dim) or d // h
  return get("n_layers"), d, h, get("n_kv_heads"), hd, get("d_ff"), get("vocab_size")


def layer_matmul_params(cfg: Any) -> int:
  """Weights every token multiplies in the decoder blocks: q, k, v, o and the gated MLP."""
  n_layers, d, h, kv, hd, f, _ = model_dims(cfg)
  return n_layers * (d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f)


def sequence_flops(cfg: Any, start: int, length: int, unembed: int) -> int:
  """Forward FLOPs of `length` tokens at positions start.. of one row, under a causal mask.

  A token at position i multiplies the block weights (2 FLOPs per weight) and attends to i + 1
  keys (q.k and p.v: 4 * heads * head_dim per key and layer); `unembed` of the tokens also go
  through the [D, V] unembedding.
  """
  n_layers, d, h, _, hd, _, v = model_dims(cfg)
  keys = sum(range(start + 1, start + length + 1))
  return (2 * layer_matmul_params(cfg) * length + 4 * n_layers * h * hd * keys
          + 2 * d * v * unembed)
