"""Where a scanned decode step's extra time goes on XLA:CPU: the weights copied out of the stack.

    python -m benchmarks.scan_decode                  # SmolLM2-135M's shape, random weights
    python -m benchmarks.scan_decode --preset=tiny --rows=4 --slots=16 --steps=2   # seconds

With `model.scan_layers` the decoder blocks run in one XLA loop over weights stacked on a leading
layer axis. XLA:CPU's loop body slices each layer's weights out of the stacked arrays into new
buffers before its matmuls read them (one `dynamic-slice` fusion per stacked weight), where the
unrolled program reads every layer's own buffers in place: so a scanned forward pass copies all
the layers' weights once more. This benchmark, in one process, with the same random weights in
both layouts:

- counts, in the compiled scanned decode step, the loop body's fusions that slice one layer out
  of a stacked floating-point array, and their bytes times the number of layers
  (`hlo_weight_copy_bytes`; every layer weight once is `layer_weight_bytes`);
- counts the same in the gradient of a forward pass (`--remat`; compiled, not run), where the
  backward loop slices the weights again (`hlo_grad_weight_copy_bytes`);
- times the decode step of `--rows` rows over `--slots` cache slots in both layouts (the cache
  donated and carried from step to step, as in the sampler's loop), alternating unrolled and
  scanned `--rounds` times (the median of `--steps` steps each);
- times a loop that does those copies alone (every stacked weight sliced out once per layer
  into the loop's carry), the same number of times.

Prints ONE JSON line: `decode_step_ratio_scanned_vs_unrolled`, `copy_share_of_gap` (the copy
loop's seconds over the scanned step's extra seconds), `hlo_weight_copy_bytes`,
`hlo_grad_weight_copy_bytes`, `layer_weight_bytes`, then the seconds. Run as a script, the
process runs with `--threads` CPU threads (XLA's flag, set before JAX starts its CPU backend);
`main()` called from another process leaves that process's environment and threads as they
are.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import statistics
import time
from typing import Any, Optional, Sequence

PROMPT = 4  # prompt tokens before the decode steps
_DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "f64": 8}
# A fused computation, and in it a dynamic-slice of one layer (leading size 1) of a float array
# (group 3: the sliced operand).
_FUSED = re.compile(r"^%(fused_\S+) .*?\{\n(.*?)\n\}", re.M | re.S)
_SLICE = re.compile(r"= (f32|bf16|f16|f64)\[([\d,]+)\]\{[^}]*\} dynamic-slice\((%[\w.-]+),.*"
                    r"dynamic_slice_sizes=\{1(?:,\d+)*\}")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--preset", default="smollm2-135m", help="rl_jax.models.config preset")
  p.add_argument("--vocab_size", type=int, default=0,
                 help="vocabulary size, for presets without one (0 = the preset's)")
  p.add_argument("--rows", type=int, default=32, help="decode batch (the 8x4 of --quick)")
  p.add_argument("--slots", type=int, default=128, help="KV cache slots per row")
  p.add_argument("--steps", type=int, default=20, help="timed steps per round")
  p.add_argument("--rounds", type=int, default=3, help="unrolled / scanned / copy rounds")
  p.add_argument("--threads", type=int, default=1, help="XLA CPU threads")
  p.add_argument("--remat", default="full",
                 help="model.remat of the gradient whose weight copies are counted")
  args = p.parse_args(argv)
  from rl_jax.models import config as config_lib  # pylint: disable=import-outside-toplevel
  try:
    config_lib.get_preset(args.preset, **_overrides(args))
  except (KeyError, ValueError) as e:
    p.error(f"--preset={args.preset}: {e.args[0]}")
  if args.remat not in config_lib.REMAT_POLICIES:
    p.error(f"--remat={args.remat}: expected one of {sorted(config_lib.REMAT_POLICIES)}")
  for name in ("rows", "slots", "steps", "rounds", "threads"):
    if getattr(args, name) < (2 if name == "rows" else 1):
      p.error(f"--{name}={getattr(args, name)}: expected >= {2 if name == 'rows' else 1}")
  need = PROMPT + 1 + args.rounds * args.steps
  if args.slots < need:
    p.error(f"--slots={args.slots}: expected >= {need} (a {PROMPT}-token prompt, then "
            f"1 + rounds x steps decode steps)")
  return args


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
  return {"vocab_size": args.vocab_size} if args.vocab_size else {}


def hlo_layer_slices(hlo_text: str, n_layers: int) -> tuple[int, int]:
  """(number of fusions, bytes) in an optimized HLO module's text that slice one layer (leading
  size 1) out of a float array whose leading axis is `n_layers`: the stacked weights a scanned
  loop body copies per layer. The bytes are per loop iteration."""
  count = nbytes = 0
  for _, body in _FUSED.findall(hlo_text):
    for m in _SLICE.finditer(body):
      # The sliced operand's own leading axis (its definition in the same fused computation).
      operand = re.search(re.escape(m.group(3)) + r" = \w+\[(\d+)[,\]]", body)
      if operand is None or int(operand.group(1)) != n_layers:
        continue
      count += 1
      nbytes += _DTYPE_BYTES[m.group(1)] * math.prod(int(d) for d in m.group(2).split(","))
  return count, nbytes


def _median_seconds(fn, steps: int) -> float:
  times = []
  for _ in range(steps):
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return statistics.median(times)


def run(args: argparse.Namespace) -> dict[str, Any]:
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  from rl_jax.models import config as config_lib  # pylint: disable=import-outside-toplevel
  from rl_jax.models import layout  # pylint: disable=import-outside-toplevel
  from rl_jax.models import model  # pylint: disable=import-outside-toplevel

  cfgs = {scan: config_lib.get_preset(args.preset, scan_layers=scan, **_overrides(args))
          for scan in (False, True)}
  n_layers = cfgs[True].n_layers
  weights = model.init_params(cfgs[False], jax.random.PRNGKey(0))
  params = {False: weights, True: layout.stack_layers(weights)}
  prompt = jnp.ones((args.rows, PROMPT), jnp.int32)
  steps, hlo = {}, ""
  for scan, cfg in cfgs.items():
    cache = model.init_cache(cfg, args.rows, args.slots)
    logits, cache = jax.jit(lambda p, c, t, m, cfg=cfg: model.prefill(cfg, p, c, t, m))(
        params[scan], cache, prompt, jnp.ones_like(prompt, bool))
    token = jnp.argmax(logits, -1).astype(jnp.int32)
    step = jax.jit(lambda p, c, t, cfg=cfg: model.decode_step(cfg, p, c, t), donate_argnums=1)
    if scan:
      hlo = step.lower(params[scan], cache, token).compile().as_text()
    # The cache is donated and carried from step to step, in place, as in the sampler's loop.
    state = {"cache": step(params[scan], cache, token)[1]}

    def one(step=step, p=params[scan], t=token, state=state):
      logits, state["cache"] = step(p, state["cache"], t)
      jax.block_until_ready(logits)

    steps[scan] = one

  stacked = jax.tree_util.tree_leaves(params[True]["layers"])

  @jax.jit
  def copy_layers(ws):
    # Each iteration's slices become the loop's carry: a real copy of the layer's weights into
    # the carry's buffers (a slice read only in part would be fused into its reader, not copied).
    return jax.lax.fori_loop(
        0, n_layers, lambda layer, _: tuple(
            jax.lax.dynamic_index_in_dim(w, layer, 0, False) for w in ws),
        tuple(jnp.zeros(w.shape[1:], w.dtype) for w in ws))

  jax.block_until_ready(copy_layers(stacked))
  secs = {"unrolled": [], "scanned": [], "copy": []}
  for _ in range(args.rounds):
    secs["unrolled"].append(_median_seconds(steps[False], args.steps))
    secs["scanned"].append(_median_seconds(steps[True], args.steps))
    secs["copy"].append(_median_seconds(lambda: jax.block_until_ready(copy_layers(stacked)),
                                        args.steps))
  med = {k: statistics.median(v) for k, v in secs.items()}
  gap = med["scanned"] - med["unrolled"]
  fusions, per_layer = hlo_layer_slices(hlo, n_layers)
  # The same count in a gradient of the scanned model (compiled, not run): the update's share.
  grad_cfg = dataclasses.replace(cfgs[True], remat=args.remat)
  tokens = jnp.ones((args.rows, 16), jnp.int32)
  grad_hlo = jax.jit(jax.grad(lambda p: model.forward(
      grad_cfg, p, tokens, jnp.ones_like(tokens, bool)).mean())).lower(
          params[True]).compile().as_text()
  _, grad_per_layer = hlo_layer_slices(grad_hlo, n_layers)
  layer_bytes = int(sum(x.size * x.dtype.itemsize for x in stacked))
  return {
      "benchmark": "scan_decode", "preset": args.preset, "rows": args.rows,
      "slots": args.slots, "steps": args.steps, "rounds": args.rounds, "threads": args.threads,
      "n_layers": n_layers, "param_dtype": cfgs[True].param_dtype,
      "decode_step_ratio_scanned_vs_unrolled": round(med["scanned"] / med["unrolled"], 3),
      "copy_share_of_gap": round(med["copy"] / gap, 3) if gap > 0 else None,
      "hlo_weight_slice_fusions": fusions,
      "hlo_weight_copy_bytes": per_layer * n_layers,
      "remat": args.remat,
      "hlo_grad_weight_copy_bytes": grad_per_layer * n_layers,
      "layer_weight_bytes": layer_bytes,
      "decode_step_s": {"unrolled": round(med["unrolled"], 5), "scanned": round(med["scanned"], 5)},
      "copy_layers_s": round(med["copy"], 5),
      "copy_gb_per_s": round(layer_bytes / med["copy"] / 1e9, 2),
      "rounds_s": {k: [round(x, 5) for x in v] for k, v in secs.items()},
  }


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
  out = run(parse_args(argv))
  print(json.dumps(out))
  return out


if __name__ == "__main__":
  # XLA's thread flag for --threads, before JAX starts its CPU backend. Only here: a process that
  # calls main() keeps its own environment and threads.
  from benchmarks import peers  # pylint: disable=import-outside-toplevel
  os.environ["XLA_FLAGS"] = peers.thread_xla_flags(parse_args().threads,
                                                   os.environ.get("XLA_FLAGS", ""))
  main()
