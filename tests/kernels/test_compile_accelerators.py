"""The Pallas kernels on the real compilers, without an accelerator: Mosaic compiles the TPU
kernels for a v5e device (libtpu's topology API), Triton lowers the GPU kernels for CUDA
(`jax.export`). Interpret mode, which the other kernel tests use, never sees layout or VMEM
errors; these compiles do, with the tuned block sizes of `kernels.logprob.block_sizes`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import export
from jax.sharding import SingleDeviceSharding

from kernels.grouped_advantage import kernel as ga_kernel
from kernels.logprob import common, kernel_gpu, kernel_tpu
from kernels.logprob.block_sizes import tuned
from rl_jax.tools import topology

N, V = 512, 151936  # Qwen3's vocabulary: the last vocabulary block is partial.
TRITON_CALL = "__gpu$xla.gpu.triton"


@pytest.fixture(scope="module")
def tpu_device():
  return SingleDeviceSharding(topology.topology_devices("v5e:2x2")[0])


def _sds(shape, dtype, sharding=None):
  return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


def _logprob_args(d, dtype, vocab_major, sharding=None):
  w = (V, d) if vocab_major else (d, V)
  vec = _sds((N,), jnp.float32, sharding)
  return (_sds((N, d), dtype, sharding), _sds(w, dtype, sharding), _sds((N,), jnp.int32, sharding),
          vec, vec, vec, vec)


@pytest.mark.parametrize("d,dtype,vocab_major", [
    (2048, jnp.bfloat16, True),    # Qwen3-1.7B: tied embedding, used as stored.
    (1024, jnp.float32, False),    # A separate lm_head in float32.
    # Qwen3-8B's separate bfloat16 lm_head, [D, V]: Mosaic keeps a second copy of the W block,
    # which `vmem_bytes` once left out (the forward asked for 17.48 MiB of 16).
    (4096, jnp.bfloat16, False)])
def test_tpu_logprob_kernels_compile_with_tuned_blocks(tpu_device, d, dtype, vocab_major):
  blocks = tuned("tpu", jnp.dtype(dtype).name)
  kw = dict(transform=common.Transform(temperature=0.7), block_n=blocks.block_n,
            block_v=blocks.block_v, vocab_major=vocab_major)
  args = _logprob_args(d, dtype, vocab_major, tpu_device)
  fwd = jax.jit(lambda h, w, t: kernel_tpu.forward(h, w, t, **kw)).trace(*args[:3]).lower()
  bwd = jax.jit(lambda *a: kernel_tpu.backward(*a, entropy_grad=True, **kw)).trace(*args).lower()
  for lowered, matmuls in ((fwd, 1), (bwd, 4)):
    text = lowered.as_text()
    assert "tpu_custom_call" in text  # The Mosaic kernel, not an XLA fallback.
    compiled = lowered.compile()
    assert compiled.memory_analysis().argument_size_in_bytes >= N * d * jnp.dtype(dtype).itemsize
    # The kernels' cost estimates reach XLA's cost analysis (the roofline of experiments.aot).
    assert compiled.cost_analysis()["flops"] >= 2 * N * d * V * matmuls


def test_tpu_tile_fitting():
  # The tile Mosaic rejected (25 MiB of scoped VMEM for the [D, block_v] float32 dW block).
  assert kernel_tpu.vmem_bytes("dw", 256, 2048, 1024, 2) > kernel_tpu.VMEM_BUDGET
  for kernel in ("fwd", "dh", "dw"):
    for d in (576, 1024, 2048, 4096):
      bn, bv = kernel_tpu.fit_blocks(kernel, 256, 2048, d, 2)
      assert kernel_tpu.vmem_bytes(kernel, bn, bv, d, 2) <= kernel_tpu.VMEM_BUDGET
      assert bv % 128 == 0 and 256 % bn == 0
  assert kernel_tpu.fit_blocks("fwd", 256, 2048, 576, 2) == (256, 2048)  # Small D: unchanged.
  # The [D, V] layout counts the second W block Mosaic keeps; [V, D] does not.
  assert (kernel_tpu.vmem_bytes("fwd", 256, 512, 4096, 2)
          == kernel_tpu.vmem_bytes("fwd", 256, 512, 4096, 2, vocab_major=True) + 4096 * 512 * 2)
  assert kernel_tpu.fit_blocks("fwd", 256, 2048, 4096, 2) == (256, 256)
  with pytest.raises(ValueError, match="d_model=1000000"):
    kernel_tpu.fit_blocks("dw", 256, 2048, 1_000_000, 4)


def _ga_args(sharding=None, r=512, t=1024):
  return (_sds((r, 1), jnp.float32, sharding), _sds((r, 1), jnp.float32, sharding),
          _sds((r, 1), jnp.int32, sharding), _sds((r, t), jnp.float32, sharding))


def _ga(platform):
  return jax.jit(lambda *a: ga_kernel.grouped_advantage(
      *a, mode="mean_std", eps=1e-6, weights=(1.0,), num_segments=64, block_r=256, block_t=512,
      platform=platform))


def test_tpu_grouped_advantage_kernel_compiles(tpu_device):
  lowered = _ga("tpu").trace(*_ga_args(tpu_device)).lower()
  assert "tpu_custom_call" in lowered.as_text()
  assert lowered.compile().memory_analysis().output_size_in_bytes >= 512 * 1024 * 4


def test_gpu_kernels_lower_to_triton_for_cuda():
  checks = [export.DisabledSafetyCheck.custom_call(TRITON_CALL)]
  blocks = tuned("gpu", "bfloat16")
  kw = dict(transform=common.Transform(), block_n=blocks.block_n, block_v=blocks.block_v,
            block_d=blocks.block_d, vocab_major=True)
  args = _logprob_args(1024, jnp.bfloat16, True)
  fns = [(jax.jit(lambda h, w, t: kernel_gpu.forward(h, w, t, **kw)), args[:3]),
         (jax.jit(lambda *a: kernel_gpu.backward(*a, entropy_grad=True, **kw)), args),
         (_ga("gpu"), _ga_args())]
  for fn, fn_args in fns:
    exported = export.export(fn, platforms=["cuda"], disabled_checks=checks)(*fn_args)
    assert exported.platforms == ("cuda",)
    assert TRITON_CALL in exported.mlir_module()


def test_auto_logprob_lowers_to_mosaic_for_tpu(tpu_device):
  # impl='auto' picks the kernel when lowering: traced on this CPU host for a TPU device, the
  # forward and its gradient are the Mosaic kernels, while a CPU lowering has none.
  from kernels import logprob  # pylint: disable=g-import-not-at-top

  def loss(h, w, t):
    return jnp.sum(logprob.token_logprobs(h, w, t, vocab_major=True))

  grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
  args = [_sds((64, 128), jnp.bfloat16, tpu_device), _sds((1000, 128), jnp.bfloat16, tpu_device),
          _sds((64,), jnp.int32, tpu_device)]
  assert grad.trace(*args).lower().as_text().count("tpu_custom_call") >= 3  # fwd, dh, dw
  cpu = [jnp.zeros(a.shape, a.dtype) for a in args]
  assert "custom_call" not in grad.lower(*cpu).as_text()


def test_auto_logprob_lowers_to_xla_loops_for_cuda():
  # On a GPU impl='auto' takes the tiled XLA loops (an H100 ran them 5x faster than the Triton
  # kernel, kernels/logprob/block_sizes.py): a CUDA export has no Triton call, while
  # impl='pallas' (the kernel called directly above) still lowers to one.
  from kernels import logprob  # pylint: disable=g-import-not-at-top

  def loss(h, w, t):
    return jnp.sum(logprob.token_logprobs(h, w, t, vocab_major=True))

  args = _logprob_args(256, jnp.float32, True)[:3]
  exported = export.export(jax.jit(jax.grad(loss, argnums=(0, 1))), platforms=["cuda"])(*args)
  assert exported.platforms == ("cuda",)
  assert TRITON_CALL not in exported.mlir_module()
  assert "while" in exported.mlir_module()  # the tile loops
