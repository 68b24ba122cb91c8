"""The machine's measured matmul roof, and the fraction of it each rl_jax phase achieves.

    python -m benchmarks.roofline                       # tiny and smollm2 at 8x4x32, 1 thread
    python -m benchmarks.roofline --models=smollm2 --shapes=8x4x32,16x8x128 --threads=2

The roof is the best of --repeats timed float32 (and bfloat16) [N, N] x [N, N] matmuls under XLA
at the chosen thread count (XLA_FLAGS is set before jax is imported, as `benchmarks.peers` does
for its workers). Each phase's *model* FLOPs (`phase_flops`: matmuls and causal attention scores,
not the work a padded or masked implementation also does) are divided by its measured time:

  generate  `sampling.generate`: prefill of the B prompts (once each: `num_samples=G` copies the
            cache rows), then T-1 cached decode steps of the R = B*G rows
            (2 * matmul params per token, the unembedding for the T sampled positions, and
            4 * heads * head_dim * context per layer for attention).
  logprob   `rl.logprobs.completion_logprobs(group_size=G)`, the reference pass: each prompt once
            (the G rows of a group share it), then the R rows' completions.
  rl_step   `train.steps.rl_step`: the reference pass plus the policy's forward and backward
            (backward = 2x forward), i.e. 4x logprob; the AdamW update is not counted.

Weights are random (FLOPs and time do not depend on them): `tiny` is the Qwen3-shaped model of
`benchmarks.peers` (2 layers, d=64, vocab 258), `smollm2` the SmolLM2-135M shape. Prints one JSON
line.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from typing import Any, Optional, Sequence

from benchmarks import peers  # (imports no jax)
from rl_jax.chips import sequence_flops  # (rl_jax.chips imports no jax)

# Shapes of the benchmark models (rl_jax ModelConfig fields).
MODEL_SHAPES = {
    "tiny": dict(vocab_size=258, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                 d_ff=192, qk_norm=True, max_seq_len=512, norm_eps=1e-6),
    "smollm2": dict(vocab_size=49152, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3,
                    d_ff=1536, rope_theta=100000.0, norm_eps=1e-5, max_seq_len=2048),
}


def phase_flops(cfg: Any, batch: int, group: int, tokens: int, prompt_len: int) -> dict[str, int]:
  """Model FLOPs of rl_jax's phases for R = batch * group rows of prompt_len + tokens."""
  r, p, t = batch * group, prompt_len, tokens
  generate = batch * sequence_flops(cfg, 0, p, 1) + r * sequence_flops(cfg, p, t - 1, t - 1)
  # Shared prompts: each prompt once, then every row's T - 1 fed completion tokens; logits at
  # the last prompt position and those T - 1 positions. The same work as `generate`.
  logprob = generate
  return {"generate": generate, "logprob": logprob, "rl_step": 4 * logprob}


def set_threads(threads: int) -> None:
  """XLA CPU thread settings (before jax is imported), as `benchmarks.peers` gives its workers."""
  os.environ["XLA_FLAGS"] = peers.thread_xla_flags(threads)
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(threads)


def _best_time(fn, args, repeats: int) -> float:
  import jax  # pylint: disable=g-import-not-at-top
  jax.block_until_ready(fn(*args))  # Compile and warm up.
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - start)
  return best


def matmul_roof(n: int, repeats: int) -> dict[str, Any]:
  """Best achieved FLOP/s of an [n, n] @ [n, n] matmul in float32 and bfloat16."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  out = {"n": n}
  for dtype in ("float32", "bfloat16"):
    x = jax.random.normal(jax.random.key(0), (n, n), dtype)
    y = jax.random.normal(jax.random.key(1), (n, n), dtype)
    f = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    seconds = _best_time(f, (x, y), repeats)
    out[f"{dtype}_flops_per_s"] = round(2 * n ** 3 / seconds)
  return out


def measure_phases(model: str, batch: int, group: int, tokens: int, prompt_len: int,
                   repeats: int) -> dict[str, float]:
  """Best wall time of each rl_jax phase (jitted as `benchmarks.peers` runs them)."""
  import jax  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from rl_jax import models, sampling  # pylint: disable=g-import-not-at-top
  from rl_jax.rl import logprobs  # pylint: disable=g-import-not-at-top
  from rl_jax.train import steps  # pylint: disable=g-import-not-at-top
  from rl_jax.train_state import TrainState, make_optimizer  # pylint: disable=g-import-not-at-top
  from rl_jax.types import Rollout  # pylint: disable=g-import-not-at-top

  cfg = models.ModelConfig(**MODEL_SHAPES[model])
  params = models.init_params(cfg, jax.random.key(0))
  r = batch * group
  rng = np.random.default_rng(0)
  unique = rng.integers(3, cfg.vocab_size, (batch, prompt_len)).astype(np.int32)
  prompt, pmask = np.repeat(unique, group, 0), np.ones((r, prompt_len), bool)
  gen = jax.jit(functools.partial(sampling.generate, cfg=cfg, strategy=sampling.Sampling(1.0),
                                  max_new_tokens=tokens, eos_id=-1, pad_id=0, num_samples=group))
  gen_args = (params, unique, pmask[::group], jax.random.key(1))
  times = {"generate": _best_time(gen, gen_args, repeats)}
  out = gen(*gen_args)
  lp = jax.jit(functools.partial(logprobs.completion_logprobs, cfg, group_size=group))
  times["logprob"] = _best_time(lp, (params, prompt, pmask, out.tokens, out.mask), repeats)
  optim = ml_collections.ConfigDict(dict(lr=1e-6, warmup_steps=0, schedule="constant",
                                         end_lr_frac=1.0, weight_decay=0.0, b1=0.9, b2=0.999,
                                         eps=1e-8, grad_clip=1.0))
  tx = make_optimizer(optim, 10)
  hyper = steps.RLHyper(group_size=group, kl_coef=0.04, aggregation="seq-mean-token-mean",
                        num_minibatches=4 if batch % 4 == 0 else 1, shared_prompts=True)
  step = jax.jit(functools.partial(steps.rl_step, model_cfg=cfg, hyper=hyper))
  state = TrainState.create(params, tx)
  rollout = Rollout(prompt_tokens=prompt, prompt_mask=pmask, tokens=out.tokens, mask=out.mask,
                    logp=out.logp, group=np.repeat(np.arange(batch), group).astype(np.int32),
                    valid=np.ones(r, bool))
  rewards = rng.random(r).astype(np.float32)
  times["rl_step"] = _best_time(step, (state, params, rollout, rewards), repeats)
  return times


def roofline(roof_flops: float, flops: dict[str, int], times: dict[str, float]) -> dict:
  """Per phase: model FLOPs, time, achieved FLOP/s and its fraction of `roof_flops`."""
  out = {}
  for name, f in flops.items():
    achieved = f / times[name]
    out[name] = {"flops": f, "time_s": round(times[name], 4), "flops_per_s": round(achieved),
                 "fraction_of_roof": round(achieved / roof_flops, 4)}
  return out


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--models", default="tiny,smollm2")
  p.add_argument("--shapes", default="8x4x32", help="comma-separated BxGxT")
  p.add_argument("--prompt_len", type=int, default=16)
  p.add_argument("--threads", type=int, default=1)
  p.add_argument("--matmul_n", type=int, default=1024)
  p.add_argument("--repeats", type=int, default=3)
  args = p.parse_args(argv)
  args.models = [m for m in args.models.split(",") if m]
  for m in args.models:
    if m not in MODEL_SHAPES:
      p.error(f"unknown model {m!r}; expected some of {sorted(MODEL_SHAPES)}")
  from benchmarks.peers import parse_shape  # pylint: disable=g-import-not-at-top
  try:
    args.shapes = [(s, parse_shape(s)) for s in args.shapes.split(",") if s]
  except ValueError as e:
    p.error(str(e))
  return args


def main(argv: Optional[Sequence[str]] = None):
  args = parse_args(argv)
  set_threads(args.threads)
  import jax  # pylint: disable=g-import-not-at-top
  roof = matmul_roof(args.matmul_n, args.repeats)
  results = {}
  for model in args.models:
    for name, (b, g, t) in args.shapes:
      flops = phase_flops(MODEL_SHAPES[model], b, g, t, args.prompt_len)
      times = measure_phases(model, b, g, t, args.prompt_len, args.repeats)
      results[f"{model}/{name}"] = roofline(roof["float32_flops_per_s"], flops, times)
  print(json.dumps({"benchmark": "roofline", "backend": jax.default_backend(),
                    "threads": args.threads, "prompt_len": args.prompt_len,
                    "load_1min": round(os.getloadavg()[0], 2), "roof": roof,
                    "results": results}))


if __name__ == "__main__":
  main()
