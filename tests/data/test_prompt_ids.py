"""Prompt ids get exactly one BOS where the model's convention has one, chat templated or not.

Three Hugging Face conventions, each a tiny byte-level BPE tokenizer.json:
* SmolLM2: BOS `<|im_start|>` opens chat turns; plain text gets no BOS (`add_bos` False).
* Llama 3: the post-processor prepends BOS and the chat template writes `{{ bos_token }}`.
* Qwen: no BOS token at all.
"""

from __future__ import annotations

import json

import pytest

from rl_jax import tokenizers
from rl_jax.data.batching import encode_completions, encode_prompts, prompt_ids

from bpe_tokenizer import write_bpe_tokenizer  # tests/bpe_tokenizer.py

CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif %}"
          "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# Llama 3 style: the template writes BOS itself.
LLAMA = ("{{ bos_token }}{% for message in messages %}{{ '<|header|>' + message['role'] + '\n' + "
         "message['content'] + '<|eot|>' }}{% endfor %}"
         "{% if add_generation_prompt %}{{ '<|header|>assistant\n' }}{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin|>", "<|header|>", "<|eot|>"]
CORPUS = ["What is 12 + 30?", "The answer is 42.", "Hello, how are you?"] * 4
TEXT = "What is 7 + 30?"


def _build(path, config, *, post_bos: str | None = None):
  write_bpe_tokenizer(path, SPECIALS, CORPUS, post_bos=post_bos)
  with open(path / "tokenizer_config.json", "w") as f:
    json.dump(config, f)
  return tokenizers.HFTokenizer(path)


@pytest.fixture
def smollm2(tmp_path):
  return _build(tmp_path / "smollm2", {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                                       "pad_token": "<|im_end|>", "chat_template": CHATML})


@pytest.fixture
def llama(tmp_path):
  return _build(tmp_path / "llama", {"bos_token": "<|begin|>", "eos_token": "<|eot|>",
                                     "chat_template": LLAMA}, post_bos="<|begin|>")


@pytest.fixture
def qwen(tmp_path):
  return _build(tmp_path / "qwen", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                                    "chat_template": CHATML})


def test_smollm2_convention_no_bos_on_text_one_im_start_in_chat(smollm2):
  assert smollm2.has_bos and not smollm2.add_bos
  assert prompt_ids(smollm2, TEXT) == smollm2.encode(TEXT)
  ids = prompt_ids(smollm2, TEXT, chat_template=True)
  assert ids == smollm2.apply_chat_template([{"role": "user", "content": TEXT}])
  assert ids[0] == smollm2.bos_id and ids[1] != smollm2.bos_id
  assert smollm2.decode(ids).endswith("assistant\n")
  assert smollm2.eos_id == smollm2._tok.token_to_id("<|im_end|>")


def test_llama_convention_one_bos_on_text_and_in_chat(llama):
  assert llama.add_bos
  assert prompt_ids(llama, TEXT) == [llama.bos_id] + llama.encode(TEXT)
  ids = prompt_ids(llama, TEXT, chat_template=True)
  assert ids[0] == llama.bos_id
  assert ids.count(llama.bos_id) == 1  # The template wrote it; none prepended again.


def test_no_bos_tokenizer_never_gets_one(qwen):
  assert not qwen.has_bos and not qwen.add_bos
  assert prompt_ids(qwen, TEXT) == qwen.encode(TEXT)
  chat = prompt_ids(qwen, TEXT, chat_template=True)
  assert chat == qwen.apply_chat_template([{"role": "user", "content": TEXT}])
  tokens, mask = encode_prompts(qwen, [TEXT, "Hi"], chat_template=True)
  assert tokens[0][mask[0]].tolist() == chat


def test_add_bos_token_in_config_wins(tmp_path):
  tok = _build(tmp_path / "forced", {"bos_token": "<|begin|>", "eos_token": "<|eot|>",
                                     "add_bos_token": True})
  assert tok.add_bos
  assert prompt_ids(tok, TEXT) == [tok.bos_id] + tok.encode(TEXT)
  off = _build(tmp_path / "off", {"bos_token": "<|begin|>", "eos_token": "<|eot|>",
                                  "add_bos_token": False}, post_bos="<|begin|>")
  assert not off.add_bos


def test_sentencepiece_keeps_one_leading_bos(tmp_path):
  sp = tokenizers.train_sentencepiece(CORPUS, tmp_path / "sp", vocab_size=64)
  assert sp.add_bos
  tokens, mask = encode_prompts(sp, [TEXT, "Hi"])
  assert tokens[0][mask[0]].tolist() == [sp.bos_id] + sp.encode(TEXT)
  assert tokens[1][mask[1]].tolist() == [sp.bos_id] + sp.encode("Hi")


def test_chat_template_without_template_raises(tmp_path):
  plain = _build(tmp_path / "plain", {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"})
  with pytest.raises(ValueError, match="no chat template"):
    prompt_ids(plain, TEXT, chat_template=True)
  sp = tokenizers.train_sentencepiece(CORPUS, tmp_path / "sp", vocab_size=64)
  with pytest.raises(ValueError, match="SentencePieceTokenizer has no chat template"):
    encode_prompts(sp, [TEXT], chat_template=True)


def test_eos_token_override_ends_completions(tmp_path):
  _build(tmp_path / "gemma", {"bos_token": "<|begin|>", "eos_token": "<|endoftext|>",
                              "chat_template": LLAMA})
  default = tokenizers.HFTokenizer(tmp_path / "gemma")
  turn = tokenizers.HFTokenizer(tmp_path / "gemma", eos_token="<|eot|>")
  assert default.eos_id == default._tok.token_to_id("<|endoftext|>")
  assert turn.eos_id == turn._tok.token_to_id("<|eot|>") != default.eos_id
  assert turn.pad_id == turn.eos_id  # No pad token: pad with the (overridden) EOS.
  tokens, mask = encode_completions(turn, ["42"], 8)
  assert tokens[0][mask[0]].tolist() == turn.encode("42") + [turn.eos_id]
  with pytest.raises(ValueError, match="eos_token='<nope>' is not in the vocabulary"):
    tokenizers.HFTokenizer(tmp_path / "gemma", eos_token="<nope>")
