"""Which JAX platforms a command starts: no TPU start-up errors on a machine without a TPU.

libtpu (installed by the `[test]` and `[tpu]` extras, for compiling against TPU topologies) makes
every JAX start try a TPU backend; on a machine without TPU chips it prints errors such as
`Failed to find host bounds for accelerator type` and `TPU_WORKER_HOSTNAMES` before falling back
to the CPU. `quiet_default()` (called by the `experiments.*` entry points before JAX starts a
backend) sets the platforms to `cpu` when

* the user chose none (`JAX_PLATFORMS` is unset),
* no TPU chip is attached (a Google PCI device, the check `jax._src.hardware_utils` makes), and
* no other accelerator plugin (CUDA, ROCm) is installed.

A TPU VM, a GPU machine and an explicit `JAX_PLATFORMS` are left as they are. Compiling for a TPU
topology on a CPU machine (`experiments.aot`, the tests) reads libtpu directly and works with
the CPU platform.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
import pkgutil
import sys
from typing import Optional

_GOOGLE_PCI_VENDOR = "0x1ae0"


def _tpu_attached() -> bool:
  for path in glob.glob("/sys/bus/pci/devices/*/vendor"):
    try:
      with open(path) as f:
        if f.read().strip() == _GOOGLE_PCI_VENDOR:
          return True
    except OSError:
      continue
  return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def _accelerator_plugins() -> list[str]:
  """Installed JAX PJRT plugins other than TPU's (e.g. `xla_cuda12`)."""
  names = {ep.name for ep in importlib.metadata.entry_points(group="jax_plugins")}
  try:
    import jax_plugins  # pylint: disable=g-import-not-at-top
    names.update(m.name for m in pkgutil.iter_modules(jax_plugins.__path__))
  except ImportError:
    pass
  return sorted(n for n in names if "tpu" not in n.lower())


def default_platforms() -> Optional[str]:
  """'cpu' where the TPU backend would only fail noisily (see the module docstring), else None."""
  if os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_PLATFORM_NAME"):
    return None
  if _tpu_attached() or _accelerator_plugins():
    return None
  return "cpu"


def quiet_default() -> Optional[str]:
  """Applies `default_platforms()` (env var for child processes, jax's config if imported);
  returns what it set, or None. Must run before JAX starts a backend."""
  platforms = default_platforms()
  if platforms is None:
    return None
  os.environ["JAX_PLATFORMS"] = platforms
  if "jax" in sys.modules:
    sys.modules["jax"].config.update("jax_platforms", platforms)
  return platforms
