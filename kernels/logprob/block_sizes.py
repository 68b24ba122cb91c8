"""Tile sizes of the fused log-prob, and the table of tuned sizes (data, not code).

How to pick block sizes (re-tune with `benchmarks/logprob.py` after changing hardware):
- CPU (XLA path): the [block_n, block_v] float32 tile is the largest temporary; a few MB keeps
  it in the last-level cache's reach while each matmul stays large enough for Eigen to run at
  full speed. Larger block_v means fewer loop steps; larger block_n re-reads W fewer times.
- GPU (Triton): all three are powers of 2. block_n x block_v float32 accumulators live in
  registers: 64 x 128 or 128 x 128 with num_warps=4..8; block_d = 32..64 bounds the operand
  tiles in shared memory. N / block_n * cdiv(V, block_v) programs should be many times the SM
  count (the grid is fully parallel). Check the backward for atomic contention: more column
  blocks spread the d_hidden atomics, more row blocks the d_unembedding ones.
- TPU (Mosaic): block_n a multiple of 8 (16 for bfloat16), block_v a multiple of 128 (256 on
  v6e). The [D, block_v] W tile, the [block_n, D] hidden tile (both double-buffered) and the
  [block_n, block_v] float32 tile must fit the scoped VMEM (16 MiB on v5e, 32 MiB on v6e):
  e.g. D=576 bf16, block_n=256, block_v=2048 uses about 2 * (1.2 + 0.3) + 2 MiB. Larger tiles
  raise the arithmetic intensity (W is re-read N / block_n times).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class BlockSizes:
  """Tile sizes.

  Attributes:
    block_n: tokens per tile (N is padded up to a multiple of it).
    block_v: vocabulary columns per tile (V need not be a multiple).
    block_d: model-width chunk of the GPU kernel's matmul loop (unused elsewhere).
  """

  block_n: int
  block_v: int
  block_d: int = 64

  def __post_init__(self):
    for name in ("block_n", "block_v", "block_d"):
      if getattr(self, name) <= 0:
        raise ValueError(f"BlockSizes.{name} must be positive, got {getattr(self, name)}")


# (platform, dtype) -> (block_n, block_v, block_d). 'cpu' is the XLA path: a sweep on a shared
# 2-core x86 CPU (N=4096, D=576, V=49152, float32, fwd+bwd) found 512x2048 and 1024x4096 equally
# fast and 1024x8192, 2048x2048, 4096x1024, 4096x4096 1.3-1.8x slower; bfloat16 reuses it
# unmeasured. 'gpu_xla' is the XLA path on a GPU (impl='auto' there): a sweep on one H100
# (2026-11-25, N=4096, D=576, V=151936, fwd+bwd) over block_n 512-4096 x block_v 4096-16384 found
# time falling with the tile (float32 1.98x materialized at 1024x4096, 1.36x at 4096x8192, 1.28x
# at 4096x16384; bfloat16 1.15x, 0.82x, 0.77x) and temp memory rising (1.3%, 4.1%, 8.0% of
# materialized in float32). The 'gpu' (Triton) entries were the fastest of ten block sizes on that
# H100 (float32 32x128x32 6.2x, bfloat16 128x128x32 3.3x materialized; 128x256x64 and 256x128x64
# float32 exceed shared memory); the 'tpu' entries are starting points from the guidance above,
# not yet measured on hardware.
TUNED: dict[tuple[str, str], tuple[int, int, int]] = {
    ("cpu", "float32"): (1024, 4096, 64),
    ("cpu", "bfloat16"): (1024, 4096, 64),
    ("gpu_xla", "float32"): (4096, 16384, 64),
    ("gpu_xla", "bfloat16"): (4096, 8192, 64),
    ("gpu", "float32"): (32, 128, 32),
    ("gpu", "bfloat16"): (128, 128, 32),
    ("tpu", "float32"): (256, 1024, 64),
    ("tpu", "bfloat16"): (256, 2048, 64),
}


def tuned(platform: str, dtype) -> BlockSizes:
  """The tuned sizes for `platform` and the matmul dtype.

  `platform`: 'cpu' (the XLA path on CPU), 'gpu_xla' (the XLA path on a GPU), 'gpu' (the Triton
  kernel) or 'tpu' (the Mosaic kernel, and the XLA path on a TPU).
  """
  key = (platform, str(dtype))
  if key not in TUNED:
    key = (platform, "float32")
  if key not in TUNED:
    raise KeyError(f"no tuned logprob block sizes for platform {platform!r}; pass block_sizes")
  return BlockSizes(*TUNED[key])
