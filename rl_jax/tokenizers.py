"""Tokenizers behind one small interface, and a cached run-time SentencePiece trainer.

`SentencePieceTokenizer` wraps a `.model` file; `HFTokenizer` wraps a Hugging Face
`tokenizer.json` (and renders its chat template); it needs the optional `tokenizers` package.

Chat prompts as users set them (`config.tokenizer.system_prompt` and `template_kwargs`):
`chat_messages` puts an optional system turn before the user turn, and `render_chat` passes
template arguments through to the Jinja template as transformers' `apply_chat_template` does
(Qwen3's `enable_thinking=False` closes an empty thinking block in the prompt).

`encode` never adds BOS/EOS; callers add `bos_id` / `eos_id` where the sequence format needs them.
`add_bos` says whether the model's own convention starts a sequence with BOS (SentencePiece here:
yes; a Hugging Face tokenizer: what its tokenizer.json post-processor does, e.g. Llama 3 yes,
SmolLM2 and Qwen no).
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
  """The interface the rest of rl_jax sees: text <-> ids plus the special ids.

  `add_bos`: whether a sequence starts with `bos_id` (False for tokenizers without a BOS token,
  and for those whose model was trained without one).
  """

  bos_id: int
  eos_id: int
  pad_id: int
  vocab_size: int
  add_bos: bool

  def encode(self, text: str) -> List[int]:
    """Token ids of `text`, without BOS/EOS."""

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids`; special ids (pad, bos, eos) and ids outside [0, vocab_size) are dropped."""


def _in_vocab(ids: Sequence[int], vocab_size: int) -> List[int]:
  """The ids in [0, vocab_size), as Python ints: a model's embedding may have more rows than its
  tokenizer has ids (padded vocabularies), and a sampler can emit those."""
  out = [int(i) for i in ids]
  return [i for i in out if 0 <= i < vocab_size]


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
    self.add_bos = self.bos_id >= 0  # SentencePiece reports -1 when the model has no BOS.

  def encode(self, text: str) -> List[int]:
    return self._sp.encode(text)

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids`; ids outside [0, vocab_size) (a model's padded embedding rows) are dropped."""
    return self._sp.decode(_in_vocab(ids, self.vocab_size))

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
    texts: training sentences (prompts and answers). A newline inside a text is kept as a
      character of its own (identity normalization), so multi-line answers round-trip.
    out_dir: cache directory (created if missing).
    vocab_size: target size; a soft limit (`hard_vocab_limit=False`).
    **trainer_options: extra `SentencePieceTrainer` flags, overriding the defaults.

  Returns:
    The trained tokenizer, with pad=0, bos=1, eos=2, unk=3.
  """
  texts = [str(t) for t in texts]
  if not texts:
    raise ValueError("texts is empty; expected at least one training sentence")
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


def _token_text(value: Any) -> str | None:
  """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
  if isinstance(value, dict):
    return value.get("content")
  return value if isinstance(value, str) else None


def _read_json(path: str) -> Dict[str, Any]:
  if not os.path.isfile(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def chat_messages(text: str, system_prompt: str = "") -> List[Dict[str, str]]:
  """The messages of one prompt: a system turn holding `system_prompt` (none when '') and the
  user turn holding `text`."""
  user = [{"role": "user", "content": text}]
  return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + user


class HFTokenizer:
  """A Hugging Face `tokenizer.json` (the `tokenizers` library), e.g. of a downloaded checkpoint.

  Special tokens and the chat template come from `tokenizer_config.json` (and
  `special_tokens_map.json`, `chat_template.jinja`) beside it when present. `encode` adds no
  special tokens; `decode` drops them.

  Attributes:
    bos_id: BOS id; a tokenizer without one (Qwen) reports `has_bos = False` and bos_id = eos_id.
    add_bos: whether sequences start with BOS: `add_bos_token` of tokenizer_config.json when
      set, else whether tokenizer.json's post-processor prepends BOS to an encoded text (as
      transformers does with add_special_tokens=True). False without a BOS token. SmolLM2's BOS
      `<|im_start|>` opens chat turns but is not prepended to plain text, so it is False there.
    eos_id: EOS id, the token that ends a completion (the sampler stops on it and SFT targets
      end with it): `eos_token` if given, else tokenizer_config.json's eos_token. For chat models
      that is the end-of-turn token the model emits after an answer (SmolLM2-Instruct and
      Qwen-Instruct: `<|im_end|>`); where tokenizer_config.json names another (Gemma-it: `<eos>`
      while turns end with `<end_of_turn>`), pass the end-of-turn token as `eos_token`.
    pad_id: PAD id; pad_token if set, else eos_id.
    vocab_size: number of ids, added tokens included (a model's embedding may be larger).
    chat_template: the Jinja chat template, or None.

  Args:
    path: a directory holding tokenizer.json, or the tokenizer.json file itself.
    eos_token: the text of the token that ends a completion, overriding tokenizer_config.json's
      eos_token for `eos_id` (and `pad_id` when there is no pad token); None keeps it.

  Raises:
    FileNotFoundError: naming the path when there is no tokenizer.json.
    ImportError: the `tokenizers` package (the `hf` extra) is not installed.
    ValueError: tokenizer_config.json (or `eos_token`) names a special token the vocabulary
      lacks, or there is no EOS token.
  """

  def __init__(self, path: str | os.PathLike, eos_token: str | None = None):
    path = os.fspath(path)
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
      raise FileNotFoundError(f"no Hugging Face tokenizer.json at {path!r}")
    try:
      import tokenizers as hf_tokenizers  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ImportError("HFTokenizer needs the `tokenizers` package: pip install "
                        "'rl_jax[hf]'") from e
    self.path = file
    self._tok = hf_tokenizers.Tokenizer.from_file(file)
    directory = os.path.dirname(file)
    config = {**_read_json(os.path.join(directory, "special_tokens_map.json")),
              **_read_json(os.path.join(directory, "tokenizer_config.json"))}
    model_config = _read_json(os.path.join(directory, "config.json"))
    self.special_tokens: Dict[str, str] = {}
    ids = {}
    for kind in ("bos", "eos", "pad", "unk"):
      text = _token_text(config.get(f"{kind}_token"))
      if text is not None:
        token_id = self._tok.token_to_id(text)
        if token_id is None:
          raise ValueError(f"tokenizer_config.json {kind}_token={text!r} is not in the "
                           f"vocabulary of {file!r}")
        self.special_tokens[f"{kind}_token"] = text
        ids[kind] = token_id
      elif isinstance(model_config.get(f"{kind}_token_id"), int):
        ids[kind] = model_config[f"{kind}_token_id"]
    if eos_token is not None:  # The chat template still sees tokenizer_config's eos_token.
      ids["eos"] = self._tok.token_to_id(eos_token)
      if ids["eos"] is None:
        raise ValueError(f"eos_token={eos_token!r} is not in the vocabulary of {file!r}")
    if "eos" not in ids:
      raise ValueError(f"no EOS token for {file!r}: set eos_token in tokenizer_config.json")
    self.has_bos = "bos" in ids
    self.eos_id = ids["eos"]
    self.bos_id = ids.get("bos", self.eos_id)
    self.pad_id = ids.get("pad", self.eos_id)
    self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
    self.chat_template = self._read_chat_template(directory, config)
    self.add_bos = self.has_bos and self._adds_bos(config.get("add_bos_token"))

  def _adds_bos(self, configured: Any) -> bool:
    if isinstance(configured, bool):
      return configured
    plain = self._tok.encode("a", add_special_tokens=False).ids
    special = self._tok.encode("a", add_special_tokens=True).ids
    return special[:1] == [self.bos_id] and plain[:1] != [self.bos_id]

  @staticmethod
  def _read_chat_template(directory: str, config: Dict[str, Any]) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
      named = {t.get("name"): t.get("template") for t in template}
      template = named.get("default")
    jinja_file = os.path.join(directory, "chat_template.jinja")
    if template is None and os.path.isfile(jinja_file):
      with open(jinja_file, encoding="utf-8") as f:
        template = f.read()
    return template

  def encode(self, text: str) -> List[int]:
    return self._tok.encode(text, add_special_tokens=False).ids

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids`; ids outside [0, vocab_size) (a model's padded embedding rows) are dropped."""
    return self._tok.decode(_in_vocab(ids, self.vocab_size), skip_special_tokens=True)

  def id_to_piece(self, i: int) -> str:
    return self._tok.id_to_token(int(i))

  def render_chat(self, messages: Sequence[Dict[str, Any]], add_generation_prompt: bool = True,
                  **kwargs: Any) -> str:
    """The chat template applied to `messages` ([{"role": ..., "content": ...}, ...]).

    `kwargs` are template variables (`enable_thinking=False` for Qwen3), as in transformers'
    `apply_chat_template(..., **kwargs)`. Rendering follows transformers (sandboxed Jinja,
    trim_blocks, lstrip_blocks, `tojson`, `raise_exception`, `strftime_now`; the special tokens
    as variables).

    Raises:
      ValueError: the tokenizer has no chat template, or the template raises on the messages
        (Gemma's refuses a system turn; the message names the roles).
      ImportError: jinja2 is not installed.
    """
    if self.chat_template is None:
      raise ValueError(f"tokenizer {self.path!r} has no chat_template (tokenizer_config.json or "
                       "chat_template.jinja); it is not an instruct/chat tokenizer")
    try:
      import jinja2  # pylint: disable=g-import-not-at-top
      import jinja2.ext  # pylint: disable=g-import-not-at-top
      import jinja2.sandbox  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ImportError("HFTokenizer chat templates need jinja2: pip install jinja2") from e

    def raise_exception(message):
      raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
      return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                        sort_keys=sort_keys)

    def strftime_now(fmt):
      import datetime  # pylint: disable=g-import-not-at-top
      return datetime.datetime.now().strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    variables = {**self.special_tokens, **kwargs}
    try:
      return env.from_string(self.chat_template).render(
          messages=list(messages), add_generation_prompt=add_generation_prompt, **variables)
    except jinja2.exceptions.TemplateError as e:  # e.g. Gemma's: 'System role not supported'
      roles = [m.get("role") for m in messages]
      raise ValueError(f"the chat template of {self.path!r} refused messages with roles {roles} "
                       f"({e}); a template without a system role takes no "
                       "config.tokenizer.system_prompt") from None

  def apply_chat_template(self, messages: Sequence[Dict[str, Any]],
                          add_generation_prompt: bool = True, **kwargs: Any) -> List[int]:
    """Token ids of `render_chat(messages, ...)`; special tokens in the text map to their ids.

    The ids already hold any BOS the template writes: do not prepend `bos_id` again.
    """
    text = self.render_chat(messages, add_generation_prompt=add_generation_prompt, **kwargs)
    return self._tok.encode(text, add_special_tokens=False).ids
