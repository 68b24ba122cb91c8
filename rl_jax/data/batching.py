"""Text -> fixed-shape token arrays (prompts left-padded, completions right-padded + EOS)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rl_jax.tokenizers import Tokenizer


def prompt_ids(tokenizer: Tokenizer, text: str, *, chat_template: bool = False) -> list[int]:
  """The ids of one prompt: its text, or a user turn of the chat template ready for the answer.

  With `chat_template`, `text` becomes the single user message, rendered with the generation
  prompt by `tokenizer.apply_chat_template` (SmolLM2: a default system turn, the user turn, then
  `<|im_start|>assistant` and a newline). BOS is prepended only when the tokenizer's convention
  has one (`tokenizer.add_bos`) and the ids do not already start with it (templates such as
  Llama 3's write it themselves), so no prompt gets two.

  Raises:
    ValueError: `chat_template` is set and the tokenizer has no chat template.
  """
  if chat_template:
    if getattr(tokenizer, "chat_template", None) is None:
      raise ValueError(f"tokenizer {type(tokenizer).__name__} has no chat template; expected a "
                       "Hugging Face chat/instruct tokenizer")
    ids = list(tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True))
  else:
    ids = tokenizer.encode(text)
  if tokenizer.add_bos and ids[:1] != [tokenizer.bos_id]:
    ids = [tokenizer.bos_id] + ids
  return ids


def encode_prompts(tokenizer: Tokenizer, prompts: Sequence[str], length: int | None = None,
                   *, max_length: int | None = None, chat_template: bool = False):
  """Left-padded prompt ids [N, P] and mask [N, P] (each row `prompt_ids`).

  Args:
    tokenizer: the tokenizer.
    prompts: prompt texts.
    length: P; default the longest encoded prompt.
    max_length: the largest P the model can take; a longer prompt raises a ValueError that names
      it, its length and the limit.
    chat_template: wrap each prompt as a user message of the tokenizer's chat template.
  """
  ids = [prompt_ids(tokenizer, p, chat_template=chat_template) for p in prompts]
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
  """Right-padded completion ids [N, T] ending in EOS, and mask [N, T]; errors if one is too long.

  EOS is `tokenizer.eos_id`, the id the sampler stops on (a chat model's end-of-turn token).
  """
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
