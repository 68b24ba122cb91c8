"""Fused unembedding + log-softmax: per-token log-probs without materializing [N, V] logits.

    logp = token_logprobs(hidden, unembedding, targets)                  # [N] float32
    logp, entropy = token_logprobs(..., with_entropy=True, temperature=0.7)

A `jax.custom_vjp`: the forward keeps only [N] statistics (logsumexp, entropy) besides its inputs;
the backward recomputes the logit tiles and returns d_hidden and d_unembedding. The tile loops
run as:
  impl='xla'        tiled XLA loops (`xla.py`), the default on CPU;
  impl='pallas'     the Pallas kernel of the backend: Triton on GPU, Mosaic on TPU;
  impl='interpret'  that Pallas kernel in interpret mode (tests; slow). On CPU it runs the GPU
                    kernel unless `platform='tpu'`;
  impl='auto'       'pallas' on TPU, 'xla' elsewhere (GPU included, with the GPU's own tiles),
                    chosen when the program is lowered (`lax.platform_dependent`), so a TPU
                    program compiled ahead of time on a CPU host (`experiments.aot`) gets the
                    Mosaic kernel. GPUs get the XLA loops (the 'gpu_xla' tiles) unless
                    impl='pallas': there they beat the Triton kernel
                    (docs/research/logprob-gpu.md).

Block sizes: `block_sizes=None` takes the tuned entry of `block_sizes.TUNED` for the platform and
dtype; see `block_sizes.py` for how to pick them on a GPU or TPU. block_n is clipped to the
(padded) token count, so small inputs run one row block.

Under a sharded jit, the XLA path is partitioned by XLA like any other loop; XLA cannot partition
the Pallas kernels, so under a context mesh of several devices (`jax.set_mesh`, which the
training loop sets) impl='auto' runs them in a `shard_map` over the token axis, each device with
the whole unembedding (`_sharded`). impl='pallas' calls the kernel directly (one device).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.sharding import PartitionSpec as P

from kernels.logprob import common, kernel_gpu, kernel_tpu, xla
from kernels.logprob.block_sizes import BlockSizes, tuned

IMPLS = ("auto", "pallas", "xla", "interpret")


@dataclasses.dataclass(frozen=True)
class _Plan:
  """Everything static about one call (hashable: the custom_vjp's non-differentiable input)."""

  transform: common.Transform
  impl: str        # 'xla', 'gpu' or 'tpu'
  blocks: BlockSizes
  interpret: bool
  entropy_grad: bool
  vocab_major: bool

  def forward(self, h, w, t):
    kw = dict(transform=self.transform, block_n=self.blocks.block_n,
              block_v=self.blocks.block_v, vocab_major=self.vocab_major)
    if self.impl == "xla":
      return xla.forward(h, w, t, **kw)
    if self.impl == "gpu":
      return kernel_gpu.forward(h, w, t, block_d=self.blocks.block_d,
                                interpret=self.interpret, **kw)
    return kernel_tpu.forward(h, w, t, interpret=self.interpret, **kw)

  def backward(self, h, w, t, lse, ent, g_logp, g_ent):
    kw = dict(transform=self.transform, block_n=self.blocks.block_n,
              block_v=self.blocks.block_v, vocab_major=self.vocab_major)
    if self.impl == "xla":
      return xla.backward(h, w, t, lse, ent, g_logp, g_ent if self.entropy_grad else None, **kw)
    kw.update(entropy_grad=self.entropy_grad, interpret=self.interpret)
    if self.impl == "gpu":
      return kernel_gpu.backward(h, w, t, lse, ent, g_logp, g_ent, block_d=self.blocks.block_d,
                                 **kw)
    return kernel_tpu.backward(h, w, t, lse, ent, g_logp, g_ent, **kw)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(plan: _Plan, hidden, unembedding, targets):
  logp, entropy, _ = plan.forward(hidden, unembedding, targets)
  return logp, entropy


def _fused_fwd(plan, hidden, unembedding, targets):
  logp, entropy, lse = plan.forward(hidden, unembedding, targets)
  return (logp, entropy), (hidden, unembedding, targets, lse, entropy)


def _fused_bwd(plan, res, cotangents):
  hidden, unembedding, targets, lse, entropy = res
  g_logp, g_ent = cotangents
  d_hidden, d_unembedding = plan.backward(hidden, unembedding, targets, lse, entropy,
                                          g_logp.astype(jnp.float32), g_ent.astype(jnp.float32))
  return d_hidden, d_unembedding, None


_fused.defvjp(_fused_fwd, _fused_bwd)


def _resolve(impl: str, platform: Optional[str]) -> tuple[str, str, bool]:
  """-> (kernel family 'xla' | 'gpu' | 'tpu', platform for the block-size table, interpret)."""
  if impl not in IMPLS:
    raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
  backend = jax.default_backend()
  accel = "tpu" if backend == "tpu" else "gpu" if backend in ("gpu", "cuda", "rocm") else None
  if impl == "auto":
    impl = "pallas" if accel == "tpu" else "xla"
  if impl == "xla":
    return "xla", {None: "cpu", "gpu": "gpu_xla"}.get(accel, accel), False
  if impl == "pallas" and accel is None:
    raise ValueError(f"impl='pallas' needs a GPU or TPU backend, got {backend!r}; "
                     "use impl='xla' or impl='interpret'")
  family = platform or accel or "gpu"
  if family not in ("gpu", "tpu"):
    raise ValueError(f"platform must be 'gpu' or 'tpu', got {platform!r}")
  return family, family, impl == "interpret"


def token_logprobs(hidden: jax.Array, unembedding: jax.Array, targets: jax.Array, *,
                   soft_cap: Optional[float] = None, temperature: float = 1.0,
                   with_entropy: bool = False, impl: str = "auto",
                   block_sizes: Optional[BlockSizes] = None, platform: Optional[str] = None,
                   vocab_major: bool = False):
  """log p(targets | hidden) [N] (and entropy [N]) under logits softcap(h @ W) / temperature.

  Args:
    hidden: [N, D] final hidden states (the matmul runs in their dtype, accumulating in float32;
      cast hidden and unembedding to the compute dtype first).
    unembedding: [D, V] unembedding matrix W, or [V, D] with `vocab_major`.
    targets: [N] int target ids in [0, V).
    soft_cap: c of `c * tanh(x / c)` applied to the raw logits x, or None.
    temperature: the (soft-capped) logits are divided by it; must be > 0.
    with_entropy: also return the entropy of each token's distribution (differentiable).
    impl: 'auto' | 'pallas' | 'xla' | 'interpret' (see the module docstring).
    block_sizes: tile sizes; None takes the tuned ones for the platform and dtype.
    platform: 'gpu' or 'tpu': which Pallas kernel impl='interpret' runs (default: the backend's,
      'gpu' on CPU).
    vocab_major: `unembedding` is [V, D], e.g. a tied input embedding used as stored. Prefer
      this to passing `embedding.T`: the kernels slice W by vocabulary blocks, and slicing a
      transposed view makes XLA copy the whole matrix (and its gradient) first.

  Returns:
    logp [N] float32, or (logp, entropy) with `with_entropy`. Gradients flow to hidden and
    unembedding (in their dtypes); targets get none.
  """
  kw = dict(soft_cap=soft_cap, temperature=temperature, with_entropy=with_entropy,
            block_sizes=block_sizes, vocab_major=vocab_major)
  if impl != "auto":
    family, table, interpret = _resolve(impl, platform)
    return _run(hidden, unembedding, targets, family=family, table=table, interpret=interpret,
                **kw)
  _resolve(impl, platform)
  # Chosen when lowering: a TPU executable gets the Mosaic kernel even when it is traced on a CPU
  # host (experiments.aot); CUDA the tiled XLA loops with the GPU's tiles (faster there than the
  # Triton kernel, see the module docstring); other platforms the XLA loops with the CPU's tiles.
  tpu = functools.partial(
      _sharded, functools.partial(_run, family="tpu", table="tpu", interpret=False, **kw),
      with_entropy=with_entropy)
  return jax.lax.platform_dependent(
      hidden, unembedding, targets, tpu=tpu,
      cuda=functools.partial(_run, family="xla", table="gpu_xla", interpret=False, **kw),
      default=functools.partial(_run, family="xla", table="cpu", interpret=False, **kw))


def _sharded(fn, hidden, unembedding, targets, *, with_entropy: bool):
  """`fn` per device in a `shard_map` over the tokens under a context mesh of several devices.

  XLA cannot partition a Pallas kernel. Tokens split over the mesh's ('data', 'fsdp') axes (padded
  to a multiple of their devices); the unembedding is gathered whole on each device, and its
  gradient summed over the token shards by the shard_map's transpose. A mesh without those axes
  calls `fn` directly.
  """
  mesh = jax.sharding.get_abstract_mesh()
  axes = tuple(a for a in ("data", "fsdp") if a in mesh.axis_names)
  if mesh.empty or mesh.size == 1 or not axes:
    return fn(hidden, unembedding, targets)
  n = hidden.shape[0]
  pad = -n % math.prod(mesh.shape[a] for a in axes)
  h = jnp.pad(hidden, ((0, pad), (0, 0)))
  t = jnp.pad(targets, (0, pad))
  tok = P(axes)
  out = (tok, tok) if with_entropy else tok
  res = jax.shard_map(fn, mesh=mesh, in_specs=(tok, P(), tok), out_specs=out,
                      check_vma=False)(h, unembedding, t)
  return jax.tree_util.tree_map(lambda x: x[:n], res)


def _run(hidden, unembedding, targets, *, family: str, table: str, interpret: bool, soft_cap,
         temperature, with_entropy, block_sizes, vocab_major):
  """`token_logprobs` with the kernel family chosen: blocks, padding, the custom_vjp call."""
  n = hidden.shape[0]
  if block_sizes is None:
    block_sizes = tuned(table, jnp.dtype(hidden.dtype).name)
  # Small inputs run one row block: N rounded up to a multiple of 16 (the TPU bfloat16 sublane
  # tile), or to a power of 2 for Triton.
  fit = max(16, pl.next_power_of_2(n)) if family == "gpu" else -(-n // 16) * 16
  block_n = min(block_sizes.block_n, fit)
  blocks = dataclasses.replace(block_sizes, block_n=block_n)
  plan = _Plan(common.Transform(soft_cap, temperature), family, blocks, interpret, with_entropy,
               vocab_major)
  pad = -n % block_n
  h = jnp.pad(hidden, ((0, pad), (0, 0)))
  t = jnp.pad(targets.astype(jnp.int32), (0, pad))
  logp, entropy = _fused(plan, h, unembedding, t)
  if with_entropy:
    return logp[:n], entropy[:n]
  return logp[:n]
