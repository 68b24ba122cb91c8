"""Compiles every phase of an RL step for a TPU topology on any machine (no TPU, no weights).

    python -m experiments.aot --config=experiments/configs/scale.py:qwen3-1.7b --topology=v5e:2x4

Prints one JSON line per phase (`rl_jax.tools.aot` documents the phases and keys): per-device
memory and whether it fits the chip's HBM, FLOPs and bytes from XLA's cost analysis, a roofline
time. Needs libtpu (`pip install -e '.[tpu]'`). The mesh is `config.mesh.shape` over the
topology's devices (the one-device default (1, 1, 1) is spread over all chips on 'fsdp');
override it with `--config.mesh.shape='(2,-1,1)'`.
"""

from __future__ import annotations

import json

from absl import flags
from ml_collections import config_flags

from experiments import cli
from rl_jax.tools import aot

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file[:variant].",
                                          lock_config=True)
_TOPOLOGY = flags.DEFINE_string("topology", "v5e:2x2",
                                "TPU topology, e.g. v5e:2x4, v5p:2x2x1, v6e:2x4, v5e:4x4.")
_PHASES = flags.DEFINE_list("phases", list(aot.PHASES), f"Phases to compile, of {aot.PHASES}.")


def main(argv):
  cli.start(argv, quiet=False)
  for line in aot.compile_phases(cli.config_value(_CONFIG), _TOPOLOGY.value, _PHASES.value):
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
  cli.run(main, required=('config',))
