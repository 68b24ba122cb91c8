"""What every `benchmarks.peers` worker shares: prompts, reward, settings, timing, output.

Imported by the worker processes (`_peer_rl_jax`, `_peer_tunix`, `_peer_trl`) before their
framework: it imports nothing heavy. The driver (`peers.py`) sets the thread environment
(OMP_NUM_THREADS, XLA_FLAGS, ...) of each worker; `torch.set_num_threads` is called by the TRL
worker itself.

Every system runs the same GRPO step on the same weights and prompts:
  rollout of B prompts x G samples x T new tokens at temperature 1 (no top-k / top-p),
  reward = `reward_fn` of the decoded completion text (cheap, deterministic, identical code),
  group-normalized advantages, reference log-probs (KL beta `BETA`, k3 estimator),
  one PPO-clip (`EPSILON`) update per rollout (so the old log-probs equal the current ones),
  sequence-mean-token-mean loss, AdamW(lr `LR`, betas (0.9, 0.999), eps 1e-8, no weight decay),
  global-norm gradient clipping at `GRAD_CLIP`, float32 weights and compute.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from typing import Any, Sequence

BETA = 0.04
EPSILON = 0.2
LR = 1e-6
GRAD_CLIP = 1.0
TEMPERATURE = 1.0
SEED = 0
REWARD_CHAR = "e"

_SUBJECTS = ("the sun", "a river", "the moon", "an old tree", "the sea", "a small bird",
             "the city", "a mountain", "the wind", "a red apple", "the night", "a quiet road",
             "the forest", "a candle", "the desert", "a winter morning")


def prompts(n: int) -> list[str]:
  """`n` short plain-text prompts (no chat template: the same text reaches every tokenizer)."""
  return [f"Write one sentence about {_SUBJECTS[i % len(_SUBJECTS)]}, number {i}:"
          for i in range(n)]


def reward_fn(texts: Sequence[str]) -> list[float]:
  """Fraction of the completion's characters that are `REWARD_CHAR` (0 for an empty one)."""
  return [t.count(REWARD_CHAR) / len(t) if t else 0.0 for t in texts]


def peak_rss_bytes() -> int:
  """Peak resident set size of this process (Linux reports ru_maxrss in KiB)."""
  return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def worker_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  """The flags the driver passes to every worker."""
  p = argparse.ArgumentParser()
  p.add_argument("--model_dir", required=True)
  p.add_argument("--batch", type=int, required=True, help="B prompts")
  p.add_argument("--group", type=int, required=True, help="G samples per prompt")
  p.add_argument("--tokens", type=int, required=True, help="T new tokens")
  p.add_argument("--steps", type=int, default=2, help="timed steps after the first")
  p.add_argument("--threads", type=int, default=1)
  p.add_argument("--workdir", default=None, help="scratch directory (checkpoints, logs)")
  p.add_argument("--num_minibatches", type=int, default=1,
                 help="rl_jax only: gradient-accumulation micro-batches of the update")
  p.add_argument("--compile_cache_dir", default="",
                 help="rl_jax only: JAX's persistent compilation cache ('' = off; "
                      "rl_jax/compile_cache.py)")
  p.add_argument("--scan_layers", action="store_true",
                 help="rl_jax only: decoder blocks under nn.scan (ModelConfig.scan_layers)")
  return p.parse_args(argv)


class Timer:
  """Accumulates wall time per named phase for the current step."""

  def __init__(self):
    self.current: dict[str, float] = {}

  def add(self, name: str, seconds: float) -> None:
    self.current[name] = self.current.get(name, 0.0) + seconds

  def take(self) -> dict[str, float]:
    out, self.current = self.current, {}
    return out


def timed(timer: Timer, name: str, fn):
  """Wraps `fn` so that each call's wall time is added to `timer` under `name`."""
  def wrapper(*args, **kwargs):
    start = time.perf_counter()
    try:
      return fn(*args, **kwargs)
    finally:
      timer.add(name, time.perf_counter() - start)
  wrapper.__wrapped__ = fn
  return wrapper


def summarize(step_records: list[dict[str, Any]], batch: int, group: int,
              tokens: int) -> dict[str, Any]:
  """Figures from per-step records {'step_s', 'gen_s', 'gen_tokens', ...}; step 0 = compile.

  tokens/s counts generated tokens up to and including EOS (what a system produced), over the
  generation wall time of the timed steps.
  """
  if not step_records:
    raise ValueError("no step records")
  first, rest = step_records[0], step_records[1:] or step_records[:1]
  mean = lambda key: sum(r.get(key, 0.0) for r in rest) / len(rest)
  gen_s = sum(r["gen_s"] for r in rest)
  gen_tok = sum(r["gen_tokens"] for r in rest)
  phases = sorted({k for r in rest for k in r if k.endswith("_s") and k != "step_s"})
  return {
      "first_step_s": round(first["step_s"], 3),
      "step_s": round(mean("step_s"), 3),
      "gen_s": round(mean("gen_s"), 3),
      "gen_tokens_per_s": round(gen_tok / gen_s, 2) if gen_s > 0 else None,
      "mean_completion_len": round(gen_tok / len(rest) / (batch * group), 2),
      "phases_s": {k: round(mean(k), 3) for k in phases},
      "timed_steps": len(step_records) - 1,
      "step_s_all": [round(r["step_s"], 3) for r in step_records],
  }


def emit(result: dict[str, Any]) -> None:
  """Prints the worker's one JSON result line (the driver parses the last such line)."""
  result = dict(result, peak_rss_bytes=peak_rss_bytes(), pid=os.getpid())
  sys.stdout.flush()
  print("PEER_RESULT " + json.dumps(result), flush=True)
