"""V0 parameters on disk: `v0.safetensors` (flattened `a/b/c` names) + `v0_config.json` (sizes).

    save(directory, cfg, params, extra={...})      # atomic: temporary files renamed into place
    cfg, params = load(directory)

`config.value.v0.init=DIRECTORY` starts a run's V0 from such a directory (e.g. trained offline by
`experiments/train_value.py` on another run's history).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import safetensors.numpy
from flax import traverse_util

from rl_jax.value.v0.core import V0Config

PARAMS_FILE = "v0.safetensors"
CONFIG_FILE = "v0_config.json"


def save(directory: str, cfg: V0Config, params, extra: dict | None = None) -> None:
  os.makedirs(directory, exist_ok=True)
  flat = {"/".join(k): np.asarray(v, np.float32)
          for k, v in traverse_util.flatten_dict(params).items()}
  path = os.path.join(directory, PARAMS_FILE)
  safetensors.numpy.save_file(flat, path + ".tmp")
  os.replace(path + ".tmp", path)
  path = os.path.join(directory, CONFIG_FILE)
  with open(path + ".tmp", "w") as f:
    json.dump(dict(dataclasses.asdict(cfg), **(extra or {})), f, indent=1, sort_keys=True)
  os.replace(path + ".tmp", path)


def load(directory: str) -> tuple[V0Config, dict]:
  """Raises FileNotFoundError naming the missing file."""
  for name in (PARAMS_FILE, CONFIG_FILE):
    if not os.path.isfile(os.path.join(directory, name)):
      raise FileNotFoundError(f"{os.path.join(directory, name)} does not exist; expected a V0 "
                              f"directory written by experiments/train_value.py")
  with open(os.path.join(directory, CONFIG_FILE)) as f:
    cfg = V0Config.from_config(json.load(f))
  flat = safetensors.numpy.load_file(os.path.join(directory, PARAMS_FILE))
  params = traverse_util.unflatten_dict({tuple(k.split("/")): v for k, v in flat.items()})
  return cfg, params


def check_same_shapes(loaded, expected, source: str) -> None:
  """Raises ValueError when `loaded` params do not have `expected`'s names and shapes."""
  a = {k: np.shape(v) for k, v in traverse_util.flatten_dict(loaded).items()}
  b = {k: tuple(v.shape) for k, v in traverse_util.flatten_dict(expected).items()}
  if a != b:
    diff = sorted(set(a.items()) ^ set(b.items()))[:4]
    raise ValueError(f"V0 parameters in {source} do not fit config.value.v0 and the backbone "
                     f"width (first differences: {diff})")
