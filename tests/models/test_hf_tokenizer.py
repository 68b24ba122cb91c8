"""`HFTokenizer` agrees with transformers on a small byte-level BPE tokenizer.json."""

import json

import pytest
import transformers

from rl_jax import tokenizers

from bpe_tokenizer import write_bpe_tokenizer  # tests/bpe_tokenizer.py

CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
          "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
CORPUS = ["What is 12 + 30?", "The answer is 42.", "Add the numbers: 7 + 8 = 15.",
          "Hello, how are you today?"] * 4


def _build(path, chat_template=CHATML, pad="<pad>"):
  write_bpe_tokenizer(path, SPECIALS, CORPUS)
  config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|im_start|>",
            "eos_token": {"__type": "AddedToken", "content": "<|im_end|>",
                          "special": True}, "pad_token": pad}
  if chat_template:
    config["chat_template"] = chat_template
  with open(path / "tokenizer_config.json", "w") as f:
    json.dump(config, f)
  return path


def test_matches_transformers(tmp_path):
  path = _build(tmp_path)
  ours = tokenizers.HFTokenizer(path)
  ref = transformers.AutoTokenizer.from_pretrained(path)
  assert isinstance(ours, tokenizers.Tokenizer)
  assert (ours.bos_id, ours.eos_id, ours.pad_id) == (ref.bos_token_id, ref.eos_token_id,
                                                      ref.pad_token_id)
  assert ours.vocab_size == len(ref)
  for text in ["What is 7 + 30?", "Unseen wörds, too!"]:
    ids = ours.encode(text)
    assert ids == ref.encode(text, add_special_tokens=False)
    assert ours.decode(ids + [ours.eos_id, ours.pad_id]) == text
  messages = [{"role": "user", "content": "What is 12 + 30?"}]
  text = ours.render_chat(messages)
  assert text == ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
  assert text.endswith("<|im_start|>assistant\n")
  ids = ours.apply_chat_template(messages)
  assert ids == list(ref.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                             return_dict=False))
  assert ids[0] == ours.bos_id and ours.eos_id in ids
  assert tokenizers.HFTokenizer(path / "tokenizer.json").encode("12") == ours.encode("12")


def test_defaults_and_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="nowhere"):
    tokenizers.HFTokenizer(tmp_path / "nowhere")
  path = _build(tmp_path / "plain", chat_template=None, pad=None)
  tok = tokenizers.HFTokenizer(path)
  assert tok.pad_id == tok.eos_id  # No pad token: pad with EOS.
  with pytest.raises(ValueError, match="no chat_template"):
    tok.apply_chat_template([{"role": "user", "content": "hi"}])
