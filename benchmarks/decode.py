"""Decode engines side by side on a long-tailed length distribution: how much decode work is useful.

    python -m benchmarks.decode                              # synthetic long tail, tiny model
    python -m benchmarks.decode --smollm2_dir=runs/models/smollm2-135m-instruct  # also SmolLM2

Engines (rl_jax/sampling/engines.py), in one process on the same parameters and prompts:
  scan          the fixed `lax.scan`: every row decodes T tokens (the sampler before issue 18);
  stop          stop when done: the loop ends once every row has ended (same samples as scan);
  refill_S<k>   slot refill with k decode slots for the B·G requests (continuous batching).

Per engine: `useful_tokens_per_slot_step` (completion tokens that count, divided by the token
draws the engine spent: rows x steps for scan / stop, requests + slots x steps for refill),
`tokens_per_s` (useful tokens per wall second), `wall_s` (median of --repeats jitted runs after
a warm-up), and `wall_ratio_vs_scan`. `goal_met_by` lists the engines with a useful share >= 0.8
(issue 18's goal).

Synthetic: a random tiny policy whose rows end at lengths drawn from a log-normal distribution
(median --median_len, sigma --sigma, clipped to [1, T]): each request gets that length as its
own limit (`max_lengths`) and the EOS id is one the model never draws, so the lengths are exactly
the drawn ones and every engine decodes the same requests. SmolLM2 (optional, needs the HF
conversion of README 'RL from a real Hugging Face model'): gsm_symbolic prompts in the chat
template, natural EOS, T = --smollm2_tokens.

Prints one JSON line. Absolute times on a 2-core CPU mean little; compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import numpy as np

from rl_jax import models, sampling
from rl_jax.sampling import engines

GOAL = 0.8


def long_tail_lengths(n: int, max_len: int, median: float, sigma: float, seed: int) -> np.ndarray:
  """n lengths from a log-normal (median, sigma), rounded and clipped to [1, max_len]."""
  rng = np.random.default_rng(seed)
  x = np.round(median * np.exp(sigma * rng.standard_normal(n)))
  return np.clip(x, 1, max_len).astype(np.int32)


def _timed(fn, repeats: int):
  out = jax.block_until_ready(fn())  # warm-up (compiles)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return out, statistics.median(times)


def run_engines(params, prompt: np.ndarray, prompt_mask: np.ndarray, *, cfg, strategy,
                num_samples: int, max_new_tokens: int, eos_id: int, pad_id: int,
                slots: list[int], repeats: int, max_lengths=None, seed: int = 0) -> dict:
  """{engine: measurements} for scan, stop and refill at each slot count in `slots`."""
  runs = [("scan", engines.EngineOptions()), ("stop", engines.EngineOptions())]
  runs += [(f"refill_S{s}", engines.EngineOptions(num_slots=s)) for s in slots]
  kw = dict(cfg=cfg, strategy=strategy, max_new_tokens=max_new_tokens, eos_id=eos_id,
            pad_id=pad_id, num_samples=num_samples)
  extra = {} if max_lengths is None else {"max_lengths": np.asarray(max_lengths, np.int32)}
  key = jax.random.key(seed)
  out = {}
  for name, opts in runs:
    engine = engines.DECODE_LOOPS.get(name.split("_")[0])
    res, wall = _timed(lambda: engine(params, prompt, prompt_mask, key, options=opts, **kw,  # noqa: B023
                                      **extra), repeats)
    useful = int(np.asarray(res.samples.mask).sum())
    steps = int(res.slot_steps)
    out[name] = {"useful_tokens": useful, "slot_steps": steps,
                 "useful_tokens_per_slot_step": useful / steps,
                 "tokens_per_s": useful / wall, "wall_s": wall,
                 "lengths": np.asarray(res.samples.mask).sum(1)}
  for name, r in out.items():
    r["wall_ratio_vs_scan"] = r["wall_s"] / out["scan"]["wall_s"]
  return out


def _summary(results: dict, lengths: np.ndarray) -> dict:
  for r in results.values():
    r.pop("lengths")
  return {"engines": results,
          "lengths": {"mean": float(lengths.mean()), "p50": float(np.median(lengths)),
                      "p90": float(np.percentile(lengths, 90)), "max": int(lengths.max())},
          "goal_met_by": [k for k, r in results.items()
                          if r["useful_tokens_per_slot_step"] >= GOAL]}


def synthetic(args) -> dict:
  cfg = models.get_preset(args.preset, vocab_size=args.vocab, max_seq_len=args.prompt_len
                          + args.tokens)
  params = models.init_params(cfg, jax.random.key(args.seed))
  rng = np.random.default_rng(args.seed)
  b, p = args.prompts, args.prompt_len
  prompt = rng.integers(2, args.vocab, (b, p)).astype(np.int32)
  prompt_mask = np.ones((b, p), bool)
  q = b * args.samples
  limits = long_tail_lengths(q, args.tokens, args.median_len, args.sigma, args.seed)
  res = run_engines(params, prompt, prompt_mask, cfg=cfg, strategy=sampling.Sampling(1.0),
                    num_samples=args.samples, max_new_tokens=args.tokens, eos_id=args.vocab,
                    pad_id=0, slots=[q // d for d in args.slot_divisors if q // d >= 1],
                    repeats=args.repeats, max_lengths=limits, seed=args.seed)
  for name, r in res.items():  # Every engine decoded exactly the drawn lengths.
    if not np.array_equal(r["lengths"], limits):
      raise AssertionError(f"engine {name} did not end the rows at their drawn lengths")
  return {"rows": q, "new_tokens": args.tokens, "preset": args.preset, **_summary(res, limits)}


def smollm2(args) -> dict:
  """SmolLM2-135M-Instruct on gsm_symbolic questions as chat prompts, natural EOS."""
  from benchmarks import tree  # pylint: disable=g-import-not-at-top
  params, prompt, prompt_mask, cfg, tok = tree.smollm2_policy(args)
  q = len(prompt) * args.samples
  res = run_engines(params, prompt, prompt_mask, cfg=cfg, strategy=sampling.Sampling(1.0),
                    num_samples=args.samples, max_new_tokens=args.smollm2_tokens,
                    eos_id=tok.eos_id, pad_id=tok.pad_id,
                    slots=[q // d for d in args.slot_divisors if q // d >= 1],
                    repeats=1, seed=args.seed)
  lengths = res["scan"]["lengths"]
  return {"rows": q, "new_tokens": args.smollm2_tokens, **_summary(res, lengths)}


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--preset", default="tiny")
  parser.add_argument("--vocab", type=int, default=256)
  parser.add_argument("--prompts", type=int, default=16)
  parser.add_argument("--samples", type=int, default=8)
  parser.add_argument("--prompt_len", type=int, default=32)
  parser.add_argument("--tokens", type=int, default=256)
  parser.add_argument("--median_len", type=float, default=32.0)
  parser.add_argument("--sigma", type=float, default=1.0)
  parser.add_argument("--slot_divisors", type=int, nargs="*", default=[2, 4])
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--smollm2_dir", default="", help="HF dir of SmolLM2-135M-Instruct")
  parser.add_argument("--smollm2_prompts", type=int, default=8)
  parser.add_argument("--smollm2_tokens", type=int, default=256)
  args = parser.parse_args(argv)
  out = {"benchmark": "decode", "backend": jax.default_backend(),
         "date": time.strftime("%Y-%m-%d"), "synthetic": synthetic(args)}
  if args.smollm2_dir:
    out["smollm2"] = smollm2(args)
  print(json.dumps(out))
  return out


if __name__ == "__main__":
  main()
