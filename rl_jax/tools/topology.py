"""TPU topologies without a TPU: their devices (libtpu's description) and a mesh over them, for
compiling every phase ahead of time (`tools.aot`)."""

from __future__ import annotations

import math
import os
from typing import Sequence

import jax
import numpy as np

from rl_jax import chips, parallel


def topology_devices(topology: str) -> list[jax.Device]:
  """The devices of a TPU topology such as 'v5e:2x4' (needs libtpu; no TPU needed).

  Raises:
    ValueError: an unknown generation or a topology libtpu does not accept.
  """
  chips.chip_of_topology(topology)
  # Compiling opens no chip, so several processes may load libtpu at once (libtpu otherwise
  # holds a lock file for the process that drives the local TPU).
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  try:
    desc = topologies.get_topology_desc(topology_name=topology, platform="tpu")
  except jax.errors.JaxRuntimeError as e:
    if "INVALID_ARGUMENT" not in str(e):
      raise
    raise ValueError(f"topology {topology!r} is not a TPU topology libtpu knows (e.g. 'v5e:2x2', "
                     f"'v5e:2x4', 'v5p:2x2x1', 'v6e:2x4'): {e}") from e
  return list(desc.devices)


def topology_mesh(topology: str, shape: Sequence[int]) -> jax.sharding.Mesh:
  """A ('data', 'fsdp', 'tensor') mesh over all devices of `topology` (one entry may be -1).

  Devices are laid out by `mesh_utils.create_device_mesh` (neighbouring chips on the fastest
  axes). The one-device default (1, 1, 1) is spread over all chips on 'fsdp' ((1, -1, 1)).
  Raises ValueError when the shape does not use exactly the topology's devices.
  """
  devices = topology_devices(topology)
  n = len(devices)
  shape = list(shape)
  if shape == [1, 1, 1] and n > 1:  # A config written for one device: shard it fully.
    shape = [1, -1, 1]
  if len(shape) != len(parallel.AXES):
    raise ValueError(f"config.mesh.shape={tuple(shape)} must have {len(parallel.AXES)} entries "
                     f"for axes {parallel.AXES}")
  known = math.prod(s for s in shape if s != -1)
  if shape.count(-1) > 1 or known <= 0 or n % known or (-1 not in shape and known != n):
    raise ValueError(f"config.mesh.shape={tuple(shape)} does not divide the {n} devices of "
                     f"topology {topology!r}; expected a product of {n} (one entry may be -1)")
  if -1 in shape:
    shape[shape.index(-1)] = n // known
  from jax.experimental import mesh_utils  # pylint: disable=g-import-not-at-top
  try:
    grid = mesh_utils.create_device_mesh(shape, devices)
  except (ValueError, NotImplementedError, AssertionError):
    grid = np.asarray(devices).reshape(shape)  # Shapes the physical layout rules do not cover.
  return parallel.make_mesh(shape, list(grid.flat))
