"""Held-out accuracy: greedy and sampled, batched at a fixed shape (one compile per strategy)."""

from __future__ import annotations

import jax
import numpy as np

from rl_jax import sampling
from rl_jax.data.batching import decode_completions


def correctness(params, prompts: np.ndarray, prompt_mask: np.ndarray, examples, task, tokenizer,
                rng: jax.Array, *, cfg, strategy: sampling.Sampling, max_new_tokens: int,
                num_samples: int = 1, batch_size: int = 512) -> np.ndarray:
  """[N, num_samples] 0/1 correctness of completions for N held-out problems.

  Rows are generated in batches of `batch_size` (the last batch is padded with copies of row 0 and
  the copies are dropped), so every call with the same shapes reuses one compiled sampler.
  """
  n = len(examples)
  rows = np.repeat(np.arange(n), num_samples)
  out = np.zeros(len(rows), np.float32)
  for start in range(0, len(rows), batch_size):
    idx = rows[start:start + batch_size]
    pad = batch_size - len(idx)
    take = np.concatenate([idx, np.zeros(pad, idx.dtype)])
    res = sampling.generate(params, prompts[take], prompt_mask[take],
                            jax.random.fold_in(rng, start), cfg=cfg, strategy=strategy,
                            max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_id,
                            pad_id=tokenizer.pad_id)
    texts = decode_completions(tokenizer, res.tokens, res.mask)[:len(idx)]
    out[start:start + len(idx)] = [task.score(t, examples[i]) for t, i in zip(texts, idx)]
  return out.reshape(n, num_samples)
