"""Slow: SmolLM2-135M-Instruct GGUF -> safetensors; greedy decoding matches transformers.

Deselected by default (pytest.ini: -m "not slow"); run with
    python -m pytest -m slow tests/models/test_convert_gguf.py
"""

import jax.numpy as jnp
import pytest
import torch
import transformers

from rl_jax import models, tokenizers
from rl_jax.models import convert_gguf

NEW_TOKENS = 16


@pytest.mark.slow
def test_smollm2_gguf_greedy_decoding_matches_transformers(tmp_path):
  out = convert_gguf.convert(tmp_path / "smollm2")
  cfg, params = models.load_hf(out)
  assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads) == (30, 576, 9, 3)
  assert cfg.tie_embeddings and cfg.vocab_size == 49152

  tok = tokenizers.HFTokenizer(out)
  messages = [{"role": "user", "content": "What is the capital of France?"}]
  prompt = tok.apply_chat_template(messages)
  ref_tok = transformers.AutoTokenizer.from_pretrained(out)
  assert prompt == list(ref_tok.apply_chat_template(messages, add_generation_prompt=True,
                                                    return_dict=False))

  cache = models.init_cache(cfg, 1, len(prompt) + NEW_TOKENS)
  p = jnp.asarray([prompt])
  logits, cache = models.prefill(cfg, params, cache, p, jnp.ones_like(p, bool))
  ours = []
  for _ in range(NEW_TOKENS):
    ours.append(int(jnp.argmax(logits[0])))
    logits, cache = models.decode_step(cfg, params, cache, jnp.asarray(ours[-1:]))

  torch.set_num_threads(1)
  model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  ids = torch.tensor([prompt])
  with torch.no_grad():
    for _ in range(NEW_TOKENS):
      ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
  ref = ids[0, len(prompt):].tolist()
  assert ours == ref, (tok.decode(ours), tok.decode(ref))
  assert tok.decode(ours).strip()  # Real text, not padding or EOS only.
