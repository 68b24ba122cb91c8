"""Text -> fixed-shape token arrays (prompts left-padded, completions right-padded + EOS)."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from rl_jax.tokenizers import Tokenizer, chat_messages


def prompt_ids(tokenizer: Tokenizer, text: str, *, chat_template: bool = False,
               system_prompt: str = "",
               template_kwargs: Optional[Mapping[str, Any]] = None) -> list[int]:
  """The ids of one prompt: its text, or a user turn of the chat template ready for the answer.

  With `chat_template`, `text` becomes the user message (after a system message holding
  `system_prompt`, when set), rendered with the generation prompt by
  `tokenizer.apply_chat_template` with `template_kwargs` as template arguments (SmolLM2: a
  default system turn, the user turn, then `<|im_start|>assistant` and a newline; Qwen3 with
  `enable_thinking=False`: an empty thinking block after it). Without `chat_template`,
  `system_prompt` and `template_kwargs` must be empty. BOS is prepended only when the
  tokenizer's convention has one (`tokenizer.add_bos`) and the ids do not already start with it
  (templates such as Llama 3's write it themselves), so no prompt gets two.

  Raises:
    ValueError: `chat_template` is set and the tokenizer has no chat template, or it is not set
      and a system prompt or template arguments are.
  """
  kwargs = dict(template_kwargs or {})
  if chat_template:
    if getattr(tokenizer, "chat_template", None) is None:
      raise ValueError(f"tokenizer {type(tokenizer).__name__} has no chat template; expected a "
                       "Hugging Face chat/instruct tokenizer")
    ids = list(tokenizer.apply_chat_template(chat_messages(text, system_prompt),
                                             add_generation_prompt=True, **kwargs))
  elif system_prompt or kwargs:
    raise ValueError("a system prompt and chat template arguments need chat_template=True "
                     "(config.task.chat_template)")
  else:
    ids = tokenizer.encode(text)
  if tokenizer.add_bos and ids[:1] != [tokenizer.bos_id]:
    ids = [tokenizer.bos_id] + ids
  return ids


def encode_prompts(tokenizer: Tokenizer, prompts: Sequence[str], length: int | None = None,
                   *, max_length: int | None = None, chat_template: bool = False,
                   system_prompt: str = "", template_kwargs: Optional[Mapping[str, Any]] = None):
  """Left-padded prompt ids [N, P] and mask [N, P] (each row `prompt_ids`).

  Args:
    tokenizer: the tokenizer.
    prompts: prompt texts.
    length: P; default the longest encoded prompt.
    max_length: the largest P the model can take; a longer prompt raises a ValueError that names
      it, its length and the limit.
    chat_template, system_prompt, template_kwargs: as `prompt_ids`.
  """
  ids = [prompt_ids(tokenizer, p, chat_template=chat_template, system_prompt=system_prompt,
                    template_kwargs=template_kwargs) for p in prompts]
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


class LengthBuckets:
  """Examples grouped by length so that a batch is padded to its bucket's longest, not the
  dataset's (the SFT phase's `sft.length_buckets`).

  The examples are sorted by (completion length, prompt length) and cut into `num_buckets`
  buckets of (nearly) equal count. `sample` picks a bucket with probability proportional to its
  size, then `batch_size` distinct examples in it, so every example is equally likely in every
  step, as with uniform sampling; only the composition of a batch changes. Each bucket's batches
  have one shape ([B, P_b] prompt, [B, T_b] completion), so a jitted step compiles once per
  bucket.

  Args:
    prompt_mask: [N, P] bool, left-padded prompts.
    completion_mask: [N, T] bool, right-padded completions.
    num_buckets: K >= 1; every bucket must hold at least `batch_size` examples.
    batch_size: examples per batch.
  """

  def __init__(self, prompt_mask: np.ndarray, completion_mask: np.ndarray, num_buckets: int,
               batch_size: int):
    n = len(prompt_mask)
    if num_buckets < 1 or n // num_buckets < batch_size:
      raise ValueError(f"sft.length_buckets={num_buckets} with sft.batch_size={batch_size}: each "
                       f"of the buckets of {n} examples must hold at least one batch; expected "
                       f"1 <= length_buckets <= {max(n // batch_size, 1)}")
    p_len = np.asarray(prompt_mask).sum(1)
    t_len = np.asarray(completion_mask).sum(1)
    order = np.lexsort((p_len, t_len))
    self.members = np.array_split(order, num_buckets)
    self.prompt_width = [int(p_len[m].max()) for m in self.members]
    self.completion_width = [int(t_len[m].max()) for m in self.members]
    self.batch_size = batch_size
    self._p = np.array([len(m) for m in self.members], np.float64) / n

  def sample(self, rng: np.random.Generator) -> tuple[np.ndarray, int, int]:
    """(example indices [B], prompt width P_b, completion width T_b) of one batch."""
    b = int(rng.choice(len(self.members), p=self._p))
    idx = rng.choice(self.members[b], self.batch_size, replace=False)
    return idx, self.prompt_width[b], self.completion_width[b]
