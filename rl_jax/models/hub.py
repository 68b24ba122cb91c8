"""Model paths that are Hugging Face hub ids: `resolve_model_dir("Qwen/Qwen3-0.6B")`.

A model path is either a local checkpoint directory (returned as it is) or a hub id `ORG/NAME`,
downloaded with `huggingface_hub.snapshot_download` (config, tokenizer and safetensors files only)
into the user's Hugging Face cache (`HF_HUB_CACHE`, else `HF_HOME/hub`, else
`~/.cache/huggingface/hub`), or found there without a network when `HF_HUB_OFFLINE=1`. Both
variables are read at each call. huggingface_hub comes with the `hf` extra (transformers needs it)
and is imported only for a hub id.
"""

from __future__ import annotations

import functools
import os
import re

# What a checkpoint directory needs here (weights, config, tokenizer, chat template); nothing else
# of a repository (PyTorch .bin duplicates, GGUF, ONNX) is downloaded.
HUB_PATTERNS = ("config.json", "generation_config.json", "*.safetensors",
                "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt",
                "added_tokens.json", "chat_template.jinja", "chat_template.json")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TRUE = ("1", "true", "yes", "on")


def is_hub_id(path: str | os.PathLike) -> bool:
  """Whether `path` names a hub repository (`ORG/NAME`) rather than a local path: it has that
  form, and neither it nor its first component exists relative to the working directory (so a
  missing `runs/model` under an existing `runs/` stays a local path)."""
  path = os.fspath(path)
  return (bool(_HUB_ID.match(path)) and not os.path.exists(path)
          and not os.path.exists(path.split("/")[0]))


def _cache_dir() -> str | None:
  if os.environ.get("HF_HUB_CACHE"):
    return os.environ["HF_HUB_CACHE"]
  if os.environ.get("HF_HOME"):
    return os.path.join(os.environ["HF_HOME"], "hub")
  return None  # huggingface_hub's default


def resolve_model_dir(path: str | os.PathLike) -> str:
  """The local checkpoint directory of model path `path` (a directory, or a hub id).

  Raises:
    FileNotFoundError: one line naming `path`: it is neither an existing directory nor a hub id,
      or the hub id could not be fetched (unknown repository, no network, not in the cache while
      offline).
    ImportError: `path` is a hub id and huggingface_hub is not installed (the `hf` extra).
  """
  path = os.fspath(path)
  if os.path.isdir(path) or not is_hub_id(path):
    if not os.path.isdir(path):
      raise FileNotFoundError(f"Hugging Face model directory {path!r} does not exist (and it is "
                              "not a hub id ORG/NAME)")
    return path
  offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE
  return _download(path, _cache_dir(), offline)


@functools.lru_cache(maxsize=32)
def _download(repo_id: str, cache_dir: str | None, offline: bool) -> str:
  """One download (or cache look-up) per repository, cache and mode in a process."""
  try:
    import huggingface_hub  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError(f"model path {repo_id!r} is a Hugging Face hub id; fetching it needs "
                      "huggingface_hub: pip install -e '.[hf]'") from e
  try:
    return huggingface_hub.snapshot_download(repo_id, cache_dir=cache_dir,
                                             allow_patterns=list(HUB_PATTERNS),
                                             local_files_only=offline)
  except Exception as e:  # pylint: disable=broad-except  (one line for every failure)
    where = f"the cache {cache_dir}" if cache_dir else "the Hugging Face cache"
    mode = (f"HF_HUB_OFFLINE is set and it is not in {where}" if offline
            else "unknown repository, gated without a token, or no network")
    reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
    raise FileNotFoundError(f"could not fetch Hugging Face hub model {repo_id!r} ({mode}): "
                            f"{type(e).__name__}: {reason}") from None
