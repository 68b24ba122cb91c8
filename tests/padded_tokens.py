"""Random padded token rows for the step tests (tests/train/test_steps.py, test_precision.py)."""

from __future__ import annotations

import numpy as np


def padded_tokens(rng: np.random.Generator, rows: int, length: int, vocab_size: int,
                  left: bool) -> tuple[np.ndarray, np.ndarray]:
  """(tokens [rows, length] int32, mask [rows, length]): each row holds 1..length random ids in
  [3, vocab_size), left-padded (prompts) or right-padded (completions) with 0."""
  lengths = rng.integers(1, length + 1, rows)
  pos = np.arange(length)[None, :]
  mask = pos >= (length - lengths)[:, None] if left else pos < lengths[:, None]
  return np.where(mask, rng.integers(3, vocab_size, (rows, length)), 0).astype(np.int32), mask
