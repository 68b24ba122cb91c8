"""Tokenizers behind one small interface, and a cached run-time SentencePiece trainer.

`encode` never adds BOS/EOS; callers add `bos_id` / `eos_id` where the sequence format needs them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from typing import Any, Dict, Iterable, List, Protocol, Sequence, runtime_checkable

import sentencepiece as spm

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
MODEL_FILE = "tokenizer.model"
SIDECAR_FILE = "tokenizer.json"


@runtime_checkable
class Tokenizer(Protocol):
  """The interface the rest of rl_jax sees: text <-> ids plus the special ids."""

  bos_id: int
  eos_id: int
  pad_id: int
  vocab_size: int

  def encode(self, text: str) -> List[int]:
    """Token ids of `text`, without BOS/EOS."""

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids`; special ids (pad, bos, eos) are dropped."""


class SentencePieceTokenizer:
  """A SentencePiece model file.

  Args:
    model_path: path of a `.model` file.

  Raises:
    FileNotFoundError: naming `model_path` when it does not exist.
  """

  def __init__(self, model_path: str | os.PathLike):
    self.model_path = os.fspath(model_path)
    if not os.path.isfile(self.model_path):
      raise FileNotFoundError(f"sentencepiece model_path {self.model_path!r} does not exist")
    self._sp = spm.SentencePieceProcessor(model_file=self.model_path)
    self.bos_id = self._sp.bos_id()
    self.eos_id = self._sp.eos_id()
    self.pad_id = self._sp.pad_id()
    self.vocab_size = self._sp.get_piece_size()

  def encode(self, text: str) -> List[int]:
    return self._sp.encode(text)

  def decode(self, ids: Sequence[int]) -> str:
    return self._sp.decode([int(i) for i in ids])

  def id_to_piece(self, i: int) -> str:
    return self._sp.id_to_piece(int(i))


def _settings(vocab_size: int, extra: Dict[str, Any]) -> Dict[str, Any]:
  """All trainer flags; fixed so that the same corpus always gives the same model."""
  settings = dict(
      model_type="bpe",
      vocab_size=vocab_size,
      hard_vocab_limit=False,  # a small corpus may not support vocab_size pieces
      split_digits=True,  # every digit its own piece
      byte_fallback=False,
      character_coverage=1.0,
      normalization_rule_name="identity",  # decode(encode(s)) == s, no NFKC
      remove_extra_whitespaces=False,
      add_dummy_prefix=True,
      pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID,
      input_sentence_size=0,  # use every sentence: no sampling
      shuffle_input_sentence=False,
      num_threads=1,
  )
  settings.update(extra)
  return settings


def _fingerprint(settings: Dict[str, Any], texts: Sequence[str]) -> Dict[str, Any]:
  corpus = hashlib.sha256()
  for t in texts:
    b = t.encode("utf-8")
    corpus.update(len(b).to_bytes(8, "little"))
    corpus.update(b)
  return {"settings": settings, "sentencepiece": spm.__version__,
          "corpus_sha256": corpus.hexdigest(), "num_texts": len(texts)}


def train_sentencepiece(texts: Iterable[str], out_dir: str | os.PathLike, vocab_size: int = 96,
                        **trainer_options: Any) -> SentencePieceTokenizer:
  """Trains (or loads a cached) BPE SentencePiece model on `texts`.

  The model goes to `out_dir/tokenizer.model` beside a JSON sidecar holding a hash of the
  settings and the corpus. A later call with the same settings and corpus loads the file; any
  difference retrains and overwrites both.

  Args:
    texts: training sentences (prompts and answers); newlines inside a text are not allowed.
    out_dir: cache directory (created if missing).
    vocab_size: target size; a soft limit (`hard_vocab_limit=False`).
    **trainer_options: extra `SentencePieceTrainer` flags, overriding the defaults.

  Returns:
    The trained tokenizer, with pad=0, bos=1, eos=2, unk=3.
  """
  texts = [str(t) for t in texts]
  if not texts:
    raise ValueError("texts is empty; expected at least one training sentence")
  if any("\n" in t for t in texts):
    raise ValueError("texts must not contain newlines (one sentence per text)")
  out_dir = os.fspath(out_dir)
  os.makedirs(out_dir, exist_ok=True)
  model_path = os.path.join(out_dir, MODEL_FILE)
  sidecar_path = os.path.join(out_dir, SIDECAR_FILE)
  fingerprint = _fingerprint(_settings(vocab_size, trainer_options), texts)
  if os.path.isfile(model_path) and os.path.isfile(sidecar_path):
    try:
      with open(sidecar_path) as f:
        cached = json.load(f)
    except (OSError, ValueError):
      cached = None
    if cached == json.loads(json.dumps(fingerprint)):
      return SentencePieceTokenizer(model_path)
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model,
                                 minloglevel=2, **fingerprint["settings"])
  _atomic_write(model_path, model.getvalue())
  _atomic_write(sidecar_path, json.dumps(fingerprint, indent=1, sort_keys=True).encode())
  return SentencePieceTokenizer(model_path)


def _atomic_write(path: str, data: bytes) -> None:
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, path)
