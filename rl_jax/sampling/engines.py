"""Linear decode loops by name (`DECODE_LOOPS`, `config.sampling.engine`): how the rows of
independent samples are decoded. Every engine returns the same `Samples` layout ([B·G, T],
prompt b's samples in rows b·G .. b·G + G − 1) and the token draws it spent (`slot_steps`).

  scan    the fixed `lax.scan`: every row decodes all T tokens (`decode.generate`, exit_every=0).
  stop    stop when done: the loop ends once every row has ended, checked every
          `exit_every` steps; the same samples as 'scan' bit for bit (the default).
  refill  slot refill (continuous batching, `refill.refill_generate`): `num_slots` rows decode
          at once and a row that ends takes the next queued request. Token t of row q is drawn
          with fold_in(fold_in(rng, q), t), so for a given key its samples differ from 'scan' /
          'stop' (which draw token t of all rows with fold_in(rng, t)) but equal
          `decode.generate(row_keys=True)`'s.

    sample = engines.from_config(config)
    samples = sample(params, prompt, prompt_mask, rng, cfg=..., strategy=..., max_new_tokens=T,
                     eos_id=..., pad_id=..., num_samples=G)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import flax.struct
import jax

from rl_jax import models
from rl_jax.registry import Registry
from rl_jax.sampling import decode, refill
from rl_jax.sampling.strategies import Sampling

DECODE_LOOPS = Registry("sampling engine")


@dataclasses.dataclass(frozen=True)
class EngineOptions:
  """exit_every: 'stop' checks for the end every that many steps (>= 1). num_slots: 'refill''s
  decode slots S (0 = all B·G rows)."""

  exit_every: int = 1
  num_slots: int = 0

  def __post_init__(self):
    if self.exit_every < 1:
      raise ValueError(f"config.sampling.exit_every must be >= 1, got {self.exit_every}")
    if self.num_slots < 0:
      raise ValueError(f"config.sampling.num_slots must be >= 0 (0 = all rows), got "
                       f"{self.num_slots}")


@flax.struct.dataclass
class EngineResult:
  """samples [B·G, T]; slot_steps: token draws spent (rows · draws per row; for refill Q first
  draws + S per decode step)."""

  samples: decode.Samples
  slot_steps: jax.Array


@functools.partial(jax.jit, static_argnames=("cfg", "strategy", "max_new_tokens", "eos_id",
                                             "pad_id", "num_samples", "exit_every"))
def _linear(params, prompt, prompt_mask, rng, *, cfg: models.ModelConfig, strategy: Sampling,
            max_new_tokens: int, eos_id: int, pad_id: int, num_samples: int,
            exit_every: int, max_lengths=None) -> EngineResult:
  out, cache = decode.generate_with_cache(
      params, prompt, prompt_mask, rng, cfg=cfg, strategy=strategy, max_new_tokens=max_new_tokens,
      eos_id=eos_id, pad_id=pad_id, num_samples=num_samples, exit_every=exit_every,
      max_lengths=max_lengths)
  steps = cache.index - prompt.shape[1]  # decode steps run (each fed token takes a slot)
  return EngineResult(samples=out, slot_steps=out.tokens.shape[0] * (steps + 1))


@DECODE_LOOPS.register("scan")
def scan_engine(params, prompt, prompt_mask, rng, *, options: EngineOptions, **kw) -> EngineResult:
  del options
  return _linear(params, prompt, prompt_mask, rng, exit_every=0, **kw)


@DECODE_LOOPS.register("stop")
def stop_engine(params, prompt, prompt_mask, rng, *, options: EngineOptions, **kw) -> EngineResult:
  return _linear(params, prompt, prompt_mask, rng, exit_every=options.exit_every, **kw)


def decode_rows(engine: str, options: EngineOptions, rows: int) -> int:
  """Rows one decode step of `engine` runs for `rows` requested rows: 'refill''s S =
  options.num_slots (at most `rows`; 0 = all), every other engine all of them."""
  if engine == "refill" and options.num_slots:
    return min(options.num_slots, rows)
  return rows


@DECODE_LOOPS.register("refill")
def refill_engine(params, prompt, prompt_mask, rng, *, options: EngineOptions,
                  **kw) -> EngineResult:
  slots = decode_rows("refill", options, prompt.shape[0] * kw.get("num_samples", 1))
  out = refill.refill_generate(params, prompt, prompt_mask, rng, num_slots=slots, **kw)
  return EngineResult(samples=out.samples, slot_steps=out.slot_steps)


def options_from_config(config) -> EngineOptions:
  s = config.sampling
  return EngineOptions(exit_every=s.exit_every, num_slots=s.num_slots)


def from_config(config) -> Callable[..., decode.Samples]:
  """The `config.sampling.engine` sampler: (params, prompt, prompt_mask, rng, *, cfg, strategy,
  max_new_tokens, eos_id, pad_id, num_samples) -> Samples."""
  engine = DECODE_LOOPS.get(config.sampling.engine)
  options = options_from_config(config)

  def sample(params, prompt, prompt_mask, rng, **kw) -> decode.Samples:
    kw.setdefault("pad_id", 0)
    kw.setdefault("num_samples", 1)
    return engine(params, prompt, prompt_mask, rng, options=options, **kw).samples

  return sample
