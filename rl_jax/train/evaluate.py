"""Held-out evaluation: greedy and sampled completions, batched at a fixed shape (one compile per
strategy), their correctness, and the per-prompt success-rate histogram."""

from __future__ import annotations

import jax
import numpy as np

from rl_jax import parallel, sampling
from rl_jax.data.batching import decode_completions


def completions(params, prompts: np.ndarray, prompt_mask: np.ndarray, tokenizer, rng: jax.Array,
                *, cfg, strategy: sampling.Sampling, max_new_tokens: int, num_samples: int = 1,
                batch_size: int = 512) -> list[str]:
  """Completion texts for N prompts, `num_samples` each: item `i * num_samples + s`.

  Rows are generated in batches of `batch_size` (the last batch is padded with copies of row 0 and
  the copies are dropped), so every call with the same shapes reuses one compiled sampler.
  """
  n = len(prompts)
  rows = np.repeat(np.arange(n), num_samples)
  texts: list[str] = []
  for start in range(0, len(rows), batch_size):
    idx = rows[start:start + batch_size]
    take = np.concatenate([idx, np.zeros(batch_size - len(idx), idx.dtype)])
    res = sampling.generate(params, prompts[take], prompt_mask[take],
                            jax.random.fold_in(rng, start), cfg=cfg, strategy=strategy,
                            max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_id,
                            pad_id=tokenizer.pad_id)
    res = parallel.to_host(res)  # multi-host: every process reads every row
    texts += decode_completions(tokenizer, res.tokens, res.mask)[:len(idx)]
  return texts


def correctness(params, prompts: np.ndarray, prompt_mask: np.ndarray, examples, task, tokenizer,
                rng: jax.Array, *, cfg, strategy: sampling.Sampling, max_new_tokens: int,
                num_samples: int = 1, batch_size: int = 512) -> np.ndarray:
  """[N, num_samples] 0/1 correctness (`task.score`) of completions for N held-out problems."""
  texts = completions(params, prompts, prompt_mask, tokenizer, rng, cfg=cfg, strategy=strategy,
                      max_new_tokens=max_new_tokens, num_samples=num_samples,
                      batch_size=batch_size)
  ok = [task.score(t, examples[i // num_samples]) for i, t in enumerate(texts)]
  return np.asarray(ok, np.float32).reshape(len(examples), num_samples)


def spread(total: int, n: int) -> np.ndarray:
  """n indices evenly spaced over `total` items, (i · total) // n: a fixed subset that keeps the
  composition of an ordered list (the ladder's dev set is ordered by stratum: n/strata each)."""
  if not 0 < n <= total:
    raise ValueError(f"a subset of {n} of {total} items: expected 0 < n <= total")
  return (np.arange(n) * total) // n


HISTOGRAM_BINS = 10


def success_rate_histogram(rates: np.ndarray, bins: int = HISTOGRAM_BINS) -> dict:
  """Counts of per-prompt success rates over `bins` equal bins of [0, 1] (1.0 in the last bin),
  and the shares of prompts below 0.1, in [0.1, 0.9] and above 0.9."""
  rates = np.asarray(rates, np.float64)
  counts, _ = np.histogram(rates, bins=bins, range=(0.0, 1.0))
  n = max(len(rates), 1)
  return {"counts": counts.astype(int).tolist(),
          "share_below_0.1": float((rates < 0.1).sum() / n),
          "share_0.1_to_0.9": float(((rates >= 0.1) & (rates <= 0.9)).sum() / n),
          "share_above_0.9": float((rates > 0.9).sum() / n)}
