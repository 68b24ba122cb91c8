"""Meshes and sharding rules.

A mesh has axes ('data', 'fsdp', 'tensor'). Parameters get PartitionSpecs from rules keyed on their
path (the HF-style names in `rl_jax.models.transformer`), batches are split over ('data', 'fsdp').
One device is a mesh of size 1, so the same code path runs everywhere.

Multi-host (`jax.distributed`): every process runs the same program on the global mesh (all
devices of all processes). Host data go to the devices with `put_global` (each process supplies
only the shards of its own devices), device results come back to every host with `to_host`, and
`is_primary` / `sync` / `broadcast` coordinate what only one process may do (writing files).
With one process all of these reduce to the single-host calls.

Axis types are `Auto` on purpose: `jax.jit` with `in_shardings` / `out_shardings` then behaves as the
classic pjit (the compiler propagates shardings through the model), and model code needs no
sharding annotations. (`jax.make_mesh` defaults to Explicit axes in current JAX, which would make
every op's sharding part of its type.)
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXES = ("data", "fsdp", "tensor")
BATCH = ("data", "fsdp")

# (regex on the parameter path, spec for the trailing dims). First match wins. Leading dims the
# spec does not name are not split: the layer axis of scanned layers (`ModelConfig.scan_layers`:
# `layers/self_attn/q_proj/kernel` [L, D, X]) gets no mesh axis, so every device holds its share
# of every layer and the layer scan slices it locally (no gather per layer), exactly as the
# unrolled `layers_i/...` [D, X] are split.
PARAM_RULES: tuple[tuple[str, tuple], ...] = (
    (r"embed_tokens.*embedding", ("tensor", "fsdp")),  # [V, D]
    (r"lm_head", ("fsdp", "tensor")),  # [D, V]
    (r"(q_proj|k_proj|v_proj|gate_proj|up_proj).*kernel", ("fsdp", "tensor")),  # [D, X]
    (r"(o_proj|down_proj).*kernel", ("tensor", "fsdp")),  # [X, D]
)


def make_mesh(shape: Sequence[int], devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A ('data', 'fsdp', 'tensor') mesh; one entry of `shape` may be -1 (use the rest)."""
  devices = list(jax.devices() if devices is None else devices)
  shape = list(shape)
  if len(shape) != len(AXES):
    raise ValueError(f"mesh shape {shape} must have {len(AXES)} entries for axes {AXES}")
  if shape.count(-1) > 1:
    raise ValueError(f"mesh shape {shape} may hold at most one -1")
  if -1 in shape:
    rest = math.prod(s for s in shape if s != -1)
    if len(devices) % rest:
      raise ValueError(f"mesh shape {shape} does not divide {len(devices)} devices")
    shape[shape.index(-1)] = len(devices) // rest
  if math.prod(shape) > len(devices):
    raise ValueError(f"mesh shape {shape} needs {math.prod(shape)} devices, "
                     f"only {len(devices)} available")
  grid = np.asarray(devices[:math.prod(shape)]).reshape(shape)
  return Mesh(grid, AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(AXES))


def _fit(spec: tuple, shape: tuple, mesh: Mesh) -> P:
  """Drops mesh axes from dims they do not divide (tiny models stay correct on any mesh)."""
  spec = (None,) * (len(shape) - len(spec)) + tuple(spec)
  out = []
  for dim, axis in zip(shape, spec):
    size = 1 if axis is None else mesh.shape[axis]
    out.append(axis if axis is not None and size > 1 and dim % size == 0 else None)
  return P(*out)


def param_spec(path: str, shape: tuple, mesh: Mesh) -> P:
  """PartitionSpec for one parameter (or optimizer-state leaf shaped like one)."""
  if len(shape) >= 2:
    for pattern, spec in PARAM_RULES:
      if re.search(pattern, path):
        return _fit(spec, shape, mesh)
  return P()


def tree_shardings(tree: Any, mesh: Mesh) -> Any:
  """NamedShardings for a pytree of arrays / ShapeDtypeStructs by path rules."""

  def one(path, leaf):
    shape = getattr(leaf, "shape", ())
    return NamedSharding(mesh, param_spec(jax.tree_util.keystr(path), tuple(shape), mesh))

  return jax.tree_util.tree_map_with_path(one, tree)


def batch_sharding(mesh: Mesh, ndim: int, batch_size: int | None = None) -> NamedSharding:
  """Leading axis split over ('data', 'fsdp') when it divides, replicated otherwise."""
  n = mesh.shape["data"] * mesh.shape["fsdp"]
  lead = BATCH if batch_size is None or batch_size % n == 0 else None
  return NamedSharding(mesh, P(lead, *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def initialize_distributed(coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None) -> None:
  """Joins this process to a multi-process run (`jax.distributed.initialize`).

  Call before any other JAX call. Arguments left None are detected from the environment where
  JAX can (Cloud TPU pods, SLURM, ...); on other machines pass all three (the coordinator is
  `host:port` of process 0).
  """
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id)


def is_primary() -> bool:
  """Whether this is the process that writes files (process 0)."""
  return jax.process_index() == 0


def sync(name: str) -> None:
  """A barrier across processes (no-op with one process): e.g. after process 0 wrote a file
  the others read."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def broadcast(value: Any) -> Any:
  """Process 0's `value` (a pytree of numbers or arrays) in every process (itself with one
  process): for values that must agree across processes but depend on the host, such as wall
  times."""
  if jax.process_count() == 1:
    return value
  return jax.tree_util.tree_map(lambda x: x.item() if np.ndim(x) == 0 else x,
                                multihost_utils.broadcast_one_to_all(value))


def to_host(tree: Any) -> Any:
  """`tree` readable on this host: arrays spread over other processes' devices are gathered
  (every process gets the whole value, as numpy). With one process `tree` itself is returned."""
  if jax.process_count() == 1:
    return tree

  def one(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return x

  return jax.tree_util.tree_map(one, tree)


def put_global(tree: Any, shardings: Any) -> Any:
  """Host arrays (the same in every process) -> arrays with `shardings` (a matching tree, or one
  sharding for all leaves). Each process copies only the slices its own devices hold, so a batch
  split over ('data', 'fsdp') has every process load just its rows. With one process this is
  `jax.device_put`."""
  if jax.process_count() == 1:
    return jax.device_put(tree, shardings)
  if isinstance(shardings, jax.sharding.Sharding):
    shardings = jax.tree_util.tree_map(lambda _: shardings, tree)

  def one(x, sharding):
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

  return jax.tree_util.tree_map(one, tree, shardings)


def process_chunk(n: int) -> slice:
  """This process's contiguous share of `n` items of host work (all of them with one process);
  `gather_chunks` reassembles the results."""
  per = -(-n // jax.process_count())
  start = min(jax.process_index() * per, n)
  return slice(start, min(start + per, n))


def gather_chunks(local: np.ndarray, n: int) -> np.ndarray:
  """The [n, ...] concatenation of every process's `process_chunk(n)` result `local`."""
  if jax.process_count() == 1:
    return np.asarray(local)
  per = -(-n // jax.process_count())
  local = np.asarray(local)
  padded = np.zeros((per, *local.shape[1:]), local.dtype)
  padded[:len(local)] = local
  every = np.asarray(multihost_utils.process_allgather(padded))  # [processes, per, ...]
  return every.reshape(-1, *local.shape[1:])[:n]


def shard_batch(tree: Any) -> Any:
  """Constrains the leading axis of every array in `tree` to ('data', 'fsdp') inside a jit.

  Uses the context mesh (`jax.set_mesh`, which the training loop and `experiments.aot` set); with
  none, or where the axis does not divide, leaves arrays unconstrained. Buffers created inside a
  jitted function (the sampler's KV cache) otherwise get no sharding from the arguments, and the
  compiler may replicate them on every device.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or not set(BATCH) <= set(mesh.axis_names):
    return tree
  n = mesh.shape["data"] * mesh.shape["fsdp"]

  def one(x):
    if n == 1 or x.ndim == 0 or x.shape[0] % n:
      return x
    return jax.lax.with_sharding_constraint(x, P(BATCH, *([None] * (x.ndim - 1))))

  return jax.tree_util.tree_map(one, tree)
