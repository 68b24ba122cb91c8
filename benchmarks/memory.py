"""Memory of one compiled RL step under the precision and remat options (issue 19, item 3).

    python -m benchmarks.memory --preset=small --shape=16x4x64x128

Compiles `rl_step` (the jitted update: shared-prompt log-prob passes, the KL reference pass, the
backward and AdamW) for the host CPU from shapes alone (`jax.ShapeDtypeStruct`, nothing is
materialized) once per option set, and prints one JSON line: XLA's `memory_analysis()` of each
(argument, output and temporary bytes) and each one's temporary bytes as a ratio of the float32,
no-remat step's. Options: `model.dtype` / `model.param_dtype` float32 or bfloat16 (on float32
master weights) and `model.remat`. CPU buffer assignment is not a TPU's, but the ratios show what
an option saves; `--shape` is B prompts x G samples x P prompt tokens x T completion tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import optax

from rl_jax import models
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState
from rl_jax.types import Rollout

PRECISIONS = {"float32": ("float32", "float32"), "bfloat16": ("bfloat16", "bfloat16")}


def step_memory(cfg: models.ModelConfig, b: int, g: int, p: int, t: int) -> dict:
  """Bytes of the compiled RL step for `cfg` (float32 master weights) at B x G x P x T."""
  master = dataclasses.replace(cfg, param_dtype="float32")
  tx = optax.adamw(1e-5)
  params = jax.eval_shape(functools.partial(models.init_params, master), jax.random.key(0))
  state = jax.eval_shape(functools.partial(TrainState.create, tx=tx), params)
  r = b * g
  sds = jax.ShapeDtypeStruct
  rollout = Rollout(prompt_tokens=sds((r, p), jnp.int32), prompt_mask=sds((r, p), bool),
                    tokens=sds((r, t), jnp.int32), mask=sds((r, t), bool),
                    logp=sds((r, t), jnp.float32), group=sds((r,), jnp.int32),
                    valid=sds((r,), bool))
  hyper = steps_lib.RLHyper(group_size=g, kl_coef=0.01, shared_prompts=True)
  step = jax.jit(functools.partial(steps_lib.rl_step, model_cfg=cfg, hyper=hyper),
                 donate_argnums=0)
  mem = step.lower(state, params, rollout, sds((r,), jnp.float32)).compile().memory_analysis()
  return {"argument_bytes": int(mem.argument_size_in_bytes),
          "output_bytes": int(mem.output_size_in_bytes),
          "temp_bytes": int(mem.temp_size_in_bytes)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--preset", default="small", help="rl_jax.models.PRESETS name")
  parser.add_argument("--vocab_size", type=int, default=32000)
  parser.add_argument("--shape", default="16x4x64x128", help="B x G x P x T")
  parser.add_argument("--remat", default="none,full,dots_saveable",
                      help="comma-separated model.remat values")
  parser.add_argument("--precisions", default="float32,bfloat16")
  args = parser.parse_args()
  b, g, p, t = (int(x) for x in args.shape.split("x"))
  results = {}
  for precision in args.precisions.split(","):
    dtype, param_dtype = PRECISIONS[precision]
    for remat in args.remat.split(","):
      cfg = models.get_preset(args.preset, vocab_size=args.vocab_size, max_seq_len=p + t,
                              dtype=dtype, param_dtype=param_dtype, remat=remat)
      results[f"{precision}/{remat}"] = step_memory(cfg, b, g, p, t)
  base = results.get("float32/none", next(iter(results.values())))["temp_bytes"]
  for v in results.values():
    v["temp_ratio"] = round(v["temp_bytes"] / max(base, 1), 3)
  print(json.dumps({"benchmark": "memory", "preset": args.preset, "vocab_size": args.vocab_size,
                    "shape": args.shape, "backend": jax.default_backend(),
                    "results": results}))


if __name__ == "__main__":
  main()
