"""Tests for rl_jax.tokenizers: round trip on chain_sum, digit pieces, caching, errors."""

from __future__ import annotations

import os

import pytest
import sentencepiece as spm

from rl_jax import tokenizers
from rl_jax.data import make_task

CHAIN_SUM = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2)


@pytest.fixture(scope="module")
def task():
  return make_task("chain_sum", CHAIN_SUM, seed=0, train_size=1000, eval_size=200)


@pytest.fixture(scope="module")
def corpus(task):
  return [ex.prompt for ex in task.train] + [ex.answer for ex in task.train]


@pytest.fixture(scope="module")
def tok(corpus, tmp_path_factory):
  return tokenizers.train_sentencepiece(corpus, tmp_path_factory.mktemp("tok"))


def test_special_ids_and_vocab(tok):
  assert isinstance(tok, tokenizers.Tokenizer)
  assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
  assert 96 <= tok.vocab_size <= 128


def test_round_trip_on_prompts_and_answers(tok, task):
  texts = [s for ex in task.train + task.heldout for s in (ex.prompt, ex.answer)]
  texts += ["-37", "-4", "0", "191", "-", "5 - 9 =", "12 + 34 ="]
  assert any(t.startswith("-") for t in texts[:-7])
  for text in texts:
    ids = tok.encode(text)
    assert tokenizers.UNK_ID not in ids, text
    assert tok.decode(ids) == text


def test_digits_are_single_tokens(tok, task):
  for d in "0123456789":
    assert tok.id_to_piece(tok.encode(d)[-1]) == d
  for ex in task.heldout[:50]:
    for i in tok.encode(ex.prompt + " " + ex.answer):
      piece = tok.id_to_piece(i)
      if any(c.isdigit() for c in piece):
        assert len(piece) == 1, piece


def test_decode_drops_specials(tok):
  ids = [tok.bos_id] + tok.encode("12") + [tok.eos_id, tok.pad_id]
  assert tok.decode(ids) == "12"


def test_cache_hit_does_not_retrain(corpus, tmp_path, monkeypatch):
  first = tokenizers.train_sentencepiece(corpus, tmp_path)
  model = tmp_path / tokenizers.MODEL_FILE
  assert (tmp_path / tokenizers.SIDECAR_FILE).is_file()
  os.utime(model, ns=(10**9, 10**9))

  def fail(**kwargs):
    raise AssertionError("retrained on a cache hit")

  monkeypatch.setattr(spm.SentencePieceTrainer, "train", fail)
  second = tokenizers.train_sentencepiece(corpus, tmp_path)
  assert model.stat().st_mtime_ns == 10**9
  assert second.encode(corpus[0]) == first.encode(corpus[0])


def test_cache_miss_retrains(corpus, tmp_path):
  tokenizers.train_sentencepiece(corpus, tmp_path)
  model = tmp_path / tokenizers.MODEL_FILE
  os.utime(model, ns=(10**9, 10**9))
  tokenizers.train_sentencepiece(corpus[:-1], tmp_path)  # different corpus
  assert model.stat().st_mtime_ns != 10**9
  os.utime(model, ns=(10**9, 10**9))
  tokenizers.train_sentencepiece(corpus[:-1], tmp_path, vocab_size=100)  # different settings
  assert model.stat().st_mtime_ns != 10**9


def test_training_is_deterministic(corpus, tmp_path):
  tokenizers.train_sentencepiece(corpus, tmp_path / "a")
  tokenizers.train_sentencepiece(corpus, tmp_path / "b")
  a = (tmp_path / "a" / tokenizers.MODEL_FILE).read_bytes()
  assert a == (tmp_path / "b" / tokenizers.MODEL_FILE).read_bytes()


def test_missing_model_path(tmp_path):
  path = str(tmp_path / "nope.model")
  with pytest.raises(FileNotFoundError, match="nope.model"):
    tokenizers.SentencePieceTokenizer(path)


def test_bad_corpus(tmp_path):
  with pytest.raises(ValueError, match="texts"):
    tokenizers.train_sentencepiece([], tmp_path)


def test_newlines_round_trip(tmp_path):
  """Multi-line answers (the ladder's scratchpads) keep their newlines through the tokenizer."""
  texts = ["17+8=25\n25-5=20\n20", "3+4=7\n7", "State the answer: 17 + 8 - 5 ="] * 20
  tok = tokenizers.train_sentencepiece(texts, tmp_path)
  for text in texts[:3]:
    ids = tok.encode(text)
    assert tok.decode(ids) == text
  assert "\n" in {tok.id_to_piece(i) for i in tok.encode(texts[0])}
