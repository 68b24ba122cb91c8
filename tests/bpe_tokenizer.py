"""Writes tiny byte-level BPE `tokenizer.json` files for tokenizer tests (not a test module)."""

from __future__ import annotations

import pathlib
from typing import Optional, Sequence

import tokenizers as hf_tokenizers


def write_bpe_tokenizer(path: pathlib.Path, specials: Sequence[str], corpus: Sequence[str], *,
                        post_bos: Optional[str] = None) -> pathlib.Path:
  """Trains a 300-id byte-level BPE on `corpus` and saves `path/tokenizer.json`.

  `post_bos`: a special token the post-processor prepends to every encoding (Llama 3 style).
  """
  tok = hf_tokenizers.Tokenizer(hf_tokenizers.models.BPE())
  tok.pre_tokenizer = hf_tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = hf_tokenizers.decoders.ByteLevel()
  trainer = hf_tokenizers.trainers.BpeTrainer(
      vocab_size=300, special_tokens=list(specials),
      initial_alphabet=hf_tokenizers.pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(corpus, trainer)
  if post_bos is not None:
    tok.post_processor = hf_tokenizers.processors.TemplateProcessing(
        single=f"{post_bos} $A", special_tokens=[(post_bos, tok.token_to_id(post_bos))])
  path.mkdir(parents=True, exist_ok=True)
  tok.save(str(path / "tokenizer.json"))
  return path
