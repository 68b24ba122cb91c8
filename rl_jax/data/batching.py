"""Text -> fixed-shape token arrays (prompts left-padded, completions right-padded + EOS)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rl_jax.tokenizers import Tokenizer


def encode_prompts(tokenizer: Tokenizer, prompts: Sequence[str], length: int | None = None,
                   *, max_length: int | None = None):
  """Left-padded prompt ids [N, P] and mask [N, P].

  Args:
    tokenizer: the tokenizer.
    prompts: prompt texts.
    length: P; default the longest encoded prompt.
    max_length: the largest P the model can take; a longer prompt raises a ValueError that names
      it, its length and the limit.
  """
  ids = [[tokenizer.bos_id] + tokenizer.encode(p) for p in prompts]
  if not ids:
    raise ValueError("no prompts to encode (the dataset is empty)")
  longest = max(range(len(ids)), key=lambda i: len(ids[i]))
  p = len(ids[longest]) if length is None else length
  limit = p if max_length is None else min(p, max_length)
  if len(ids[longest]) > limit:
    raise ValueError(f"prompt {prompts[longest]!r} is {len(ids[longest])} tokens long; expected at "
                     f"most {limit} (the model context minus the completion length)")
  tokens = np.full((len(ids), p), tokenizer.pad_id, np.int32)
  mask = np.zeros((len(ids), p), bool)
  for i, row in enumerate(ids):
    tokens[i, p - len(row):] = row
    mask[i, p - len(row):] = True
  return tokens, mask


def encode_completions(tokenizer: Tokenizer, texts: Sequence[str], length: int):
  """Right-padded completion ids [N, T] ending in EOS, and mask [N, T]; errors if one is too long."""
  tokens = np.full((len(texts), length), tokenizer.pad_id, np.int32)
  mask = np.zeros((len(texts), length), bool)
  for i, text in enumerate(texts):
    row = tokenizer.encode(text) + [tokenizer.eos_id]
    if len(row) > length:
      raise ValueError(f"completion {text!r} needs {len(row)} tokens with EOS; "
                       f"sampling.max_new_tokens={length} is too small")
    tokens[i, :len(row)] = row
    mask[i, :len(row)] = True
  return tokens, mask


def decode_completions(tokenizer: Tokenizer, tokens: np.ndarray, mask: np.ndarray) -> list[str]:
  """Completion texts (up to EOS) from sampled ids [N, T]."""
  return [tokenizer.decode(row[m].tolist()) for row, m in zip(np.asarray(tokens), np.asarray(mask))]
