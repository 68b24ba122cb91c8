"""Hugging Face parity: tiny random transformers models of every family give our logits.

Each test builds a 2-layer, width-64, vocab-128 float32 model with transformers, saves it with
`save_pretrained`, loads it with `models.load_hf` and compares logits on a left-padded batch
(atol 1e-4). `models.save_hf` output must load back in transformers with the same logits.
"""

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from rl_jax import models

V, D, T = 128, 64, 7
_COMMON = dict(vocab_size=V, hidden_size=D, intermediate_size=96, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
               rms_norm_eps=1e-5)

FAMILIES = {
    # Llama 3 with llama3 RoPE scaling: at head_dim 16 and an original length of 64 the
    # frequencies fall in all three bands (kept, smoothed, divided by the factor).
    "llama3": (transformers.LlamaConfig, dict(
        tie_word_embeddings=False, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "qwen2": (transformers.Qwen2Config, dict(tie_word_embeddings=False, rope_theta=1e6)),
    # Qwen3's head_dim (32) differs from hidden_size / num_attention_heads (16).
    "qwen3": (transformers.Qwen3Config, dict(head_dim=32, tie_word_embeddings=True)),
    "gemma": (transformers.GemmaConfig, dict(head_dim=16, num_key_value_heads=1,
                                             hidden_act="gelu_pytorch_tanh")),
    "smollm2": (transformers.LlamaConfig, dict(tie_word_embeddings=True, rope_theta=100000.0)),
    # Gemma 3 (text): a window of 3 < T on layers 0 and 2 (layer 1 global), per-kind RoPE bases,
    # q/k norms, four norms a layer, query_pre_attn_scalar != head_dim, logit soft-capping.
    "gemma3": (transformers.Gemma3TextConfig, dict(
        head_dim=16, num_hidden_layers=3, sliding_window=3, sliding_window_pattern=2,
        query_pre_attn_scalar=24, final_logit_softcapping=5.0,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    # Gemma 3 4B's RoPE: linear scaling (factor 8) on the global layers only.
    "gemma3_scaled": (transformers.Gemma3TextConfig, dict(
        head_dim=16, num_hidden_layers=2, sliding_window=2, sliding_window_pattern=2,
        query_pre_attn_scalar=16,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0,
                                            "rope_theta": 1e6}})),
}


def make_hf_model(family, seed=0):
  """A random float32 transformers model; every weight (biases, norms too) is perturbed."""
  config_cls, kwargs = FAMILIES[family]
  config = config_cls(**{**_COMMON, **kwargs})
  config._attn_implementation = "eager"  # pylint: disable=protected-access
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.1 * torch.randn_like(p))
  return model.eval()


def padded_batch():
  """Left-padded tokens [3, T] and mask (rows of length 7, 4 and 1)."""
  rng = np.random.default_rng(0)
  lengths = np.array([T, 4, 1])
  mask = np.arange(T)[None, :] >= (T - lengths)[:, None]
  tokens = np.where(mask, rng.integers(1, V, (3, T)), 0)
  return tokens, mask


def hf_logits(model, tokens, mask):
  positions = np.maximum(np.cumsum(mask, axis=-1) - 1, 0)
  with torch.no_grad():
    out = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask.astype(np.int64)),
                position_ids=torch.tensor(positions))
  return out.logits.float().numpy()


def our_logits(cfg, params, tokens, mask):
  return np.asarray(models.forward(cfg, params, jnp.asarray(tokens), jnp.asarray(mask)))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_load_and_save_match_transformers(family, tmp_path):
  model = make_hf_model(family)
  model.save_pretrained(tmp_path / "hf")
  tokens, mask = padded_batch()
  ref = hf_logits(model, tokens, mask)

  cfg, params = models.load_hf(tmp_path / "hf")
  ours = our_logits(cfg, params, tokens, mask)
  assert ours.dtype == np.float32 and ours.shape == (3, T, V)
  np.testing.assert_allclose(ours[mask], ref[mask], atol=1e-4, rtol=0)

  models.save_hf(tmp_path / "ours", cfg, params)
  with open(tmp_path / "ours" / "config.json") as f:
    written = json.load(f)
  assert written["model_type"] == model.config.model_type
  assert written["architectures"] == [type(model).__name__]
  back = transformers.AutoModelForCausalLM.from_pretrained(
      tmp_path / "ours", dtype=torch.float32, attn_implementation="eager").eval()
  assert type(back) is type(model)
  np.testing.assert_allclose(hf_logits(back, tokens, mask)[mask], ref[mask], atol=1e-5, rtol=0)


def test_family_switches_from_config(tmp_path):
  expected = {
      "llama3": dict(rope_scaling="llama3", rope_factor=8.0, rope_original_max_len=64,
                     tie_embeddings=False),
      "qwen2": dict(qkv_bias=True, qk_norm=False, tie_embeddings=False),
      "qwen3": dict(qk_norm=True, head_dim=32, hd=32, tie_embeddings=True),
      "gemma": dict(mlp_activation="gelu_tanh", scale_embeddings=True, norm_plus_one=True,
                    tie_embeddings=True, n_kv_heads=1),
      "smollm2": dict(rope_scaling="none", tie_embeddings=True, rope_theta=100000.0),
      "gemma3": dict(qk_norm=True, post_norms=True, norm_plus_one=True, sliding_window=3,
                     sliding_window_pattern=2, local_layers=(True, False, True),
                     rope_theta=10000.0, rope_local_theta=100.0, query_pre_attn_scalar=24.0,
                     final_logit_softcap=5.0, n_layers=3),
      "gemma3_scaled": dict(rope_scaling="linear", rope_factor=8.0, rope_theta=1e6,
                            rope_local_theta=10000.0, local_layers=(True, False)),
  }
  for family, fields in expected.items():
    cfg = models.from_hf_config(make_hf_model(family).config.to_dict())
    for name, value in fields.items():
      assert getattr(cfg, name) == value, (family, name)


def test_sharded_save_loads_here_and_in_transformers(tmp_path):
  model = make_hf_model("qwen2", seed=1)
  model.save_pretrained(tmp_path / "hf")
  cfg, params = models.load_hf(tmp_path / "hf")
  models.save_hf(tmp_path / "sharded", cfg, params, max_shard_bytes=60_000)
  files = sorted(os.listdir(tmp_path / "sharded"))
  assert "model.safetensors.index.json" in files and "model.safetensors" not in files
  assert sum(f.startswith("model-") for f in files) > 2
  _, again = models.load_hf(tmp_path / "sharded")
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, again)
  tokens, mask = padded_batch()
  back = transformers.AutoModelForCausalLM.from_pretrained(
      tmp_path / "sharded", dtype=torch.float32, attn_implementation="eager").eval()
  np.testing.assert_allclose(hf_logits(back, tokens, mask)[mask],
                             hf_logits(model, tokens, mask)[mask], atol=1e-5, rtol=0)


def test_bfloat16_params_with_float32_logits(tmp_path):
  model = make_hf_model("llama3")
  model.save_pretrained(tmp_path / "hf")
  tokens, mask = padded_batch()
  cfg32, params32 = models.load_hf(tmp_path / "hf")
  cfg, params = models.load_hf(tmp_path / "hf", dtype="bfloat16")
  assert (cfg.dtype, cfg.param_dtype) == ("bfloat16", "bfloat16")
  assert {x.dtype for x in jax.tree_util.tree_leaves(params)} == {jnp.dtype(jnp.bfloat16)}
  ours = our_logits(cfg, params, tokens, mask)
  ref = our_logits(cfg32, params32, tokens, mask)
  assert ours.dtype == np.float32
  assert np.abs(ours[mask] - ref[mask]).max() < 0.05 * np.abs(ref[mask]).max()
  # bfloat16 storage with float32 compute; a bfloat16 checkpoint keeps its dtype on save.
  cfg_mixed, mixed = models.load_hf(tmp_path / "hf", dtype=jnp.float32, param_dtype="bfloat16")
  assert (cfg_mixed.dtype, cfg_mixed.param_dtype) == ("float32", "bfloat16")
  models.save_hf(tmp_path / "bf16", cfg, params)
  _, reloaded = models.load_hf(tmp_path / "bf16", dtype="bfloat16")
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, reloaded)
  np.testing.assert_allclose(our_logits(cfg_mixed, mixed, tokens, mask)[mask], ours[mask],
                             atol=0.05 * np.abs(ref[mask]).max())


def _write_config(tmp_path, **changes):
  model = make_hf_model("qwen2")
  model.save_pretrained(tmp_path)
  with open(tmp_path / "config.json") as f:
    config = json.load(f)
  config.update(changes)
  with open(tmp_path / "config.json", "w") as f:
    json.dump(config, f)
  return tmp_path


@pytest.mark.parametrize("changes, message", [
    (dict(model_type="gpt2"), "model_type='gpt2'"),
    (dict(model_type="gemma2"), "model_type='gemma2'"),
    (dict(rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}),
     "rope_type='yarn'"),
    (dict(rope_parameters=None, rope_scaling={"type": "dynamic", "factor": 2.0}),
     "rope_scaling.rope_type='dynamic'"),
    (dict(use_sliding_window=True, sliding_window=4, max_window_layers=1, layer_types=None),
     "use_sliding_window=True"),
    (dict(hidden_act="relu"), "hidden_act='relu'"),
    (dict(quantization_config={"quant_method": "gptq"}), "quantization_config"),
])
def test_unsupported_configs_raise(tmp_path, changes, message):
  path = _write_config(tmp_path, **changes)
  with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
    models.load_hf(path)


def test_inactive_sliding_window_is_accepted(tmp_path):
  path = _write_config(tmp_path, use_sliding_window=False, sliding_window=4)
  cfg, _ = models.load_hf(path)
  assert cfg.qkv_bias


def test_missing_files_raise_file_not_found(tmp_path):
  with pytest.raises(FileNotFoundError, match="nowhere"):
    models.load_hf(tmp_path / "nowhere")
  with pytest.raises(FileNotFoundError, match="config.json"):
    models.load_hf(tmp_path)
  path = _write_config(tmp_path / "weights")
  os.remove(path / "model.safetensors")
  with pytest.raises(FileNotFoundError, match="safetensors"):
    models.load_hf(path)


def test_wrong_or_unexpected_tensors_raise(tmp_path):
  model = make_hf_model("llama3")
  model.save_pretrained(tmp_path)
  with open(tmp_path / "config.json") as f:
    config = json.load(f)
  with open(tmp_path / "config.json", "w") as f:
    json.dump({**config, "intermediate_size": 80}, f)
  with pytest.raises(ValueError, match="mlp.*shape"):
    models.load_hf(tmp_path)
  with open(tmp_path / "config.json", "w") as f:
    json.dump({**config, "model_type": "qwen3"}, f)  # Expects q_norm / k_norm tensors.
  with pytest.raises(ValueError, match="q_norm"):
    models.load_hf(tmp_path)


def test_save_rejects_configs_without_a_family(tmp_path):
  cfg = models.ModelConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1,
                           d_ff=32, mlp_activation="gelu_tanh")
  params = models.init_params(cfg, jax.random.key(0))
  with pytest.raises(ValueError, match="gelu_tanh"):
    models.save_hf(tmp_path, cfg, params)


def test_llama3_rope_frequencies_match_transformers():
  from transformers import modeling_rope_utils  # pylint: disable=g-import-not-at-top
  cfg = models.get_preset("llama3-1b")
  hf_config = transformers.LlamaConfig(**models.to_hf_config(cfg))
  inv_freq, _ = modeling_rope_utils.ROPE_INIT_FUNCTIONS["llama3"](hf_config, "cpu")
  np.testing.assert_allclose(models.rope_frequencies(cfg), inv_freq.numpy(), rtol=1e-6)


def test_transformers4_config_layout_reads_the_same():
  v5 = make_hf_model("llama3").config.to_dict()
  v4 = {k: v for k, v in v5.items() if k != "rope_parameters"}
  v4.update(rope_theta=500000.0, rope_scaling={
      "type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 64})
  assert models.from_hf_config(v4) == models.from_hf_config(v5)


def test_gemma3_window_matters_and_scanned_layers_match(tmp_path):
  """The window changes the logits (a full-attention model differs), and the scanned layout
  (layer kinds scanned beside the stacked parameters) gives the unrolled one's."""
  model = make_hf_model("gemma3")
  model.save_pretrained(tmp_path / "hf")
  tokens, mask = padded_batch()
  cfg, params = models.load_hf(tmp_path / "hf")
  ours = our_logits(cfg, params, tokens, mask)
  unwindowed = our_logits(dataclasses.replace(cfg, sliding_window=T), params, tokens, mask)
  assert np.abs(ours[0, -1] - unwindowed[0, -1]).max() > 1e-2  # Row 0 is longer than 3.
  np.testing.assert_allclose(ours[2, -1], unwindowed[2, -1], atol=1e-6)  # One token: no effect.
  scfg, sparams = models.load_hf(tmp_path / "hf", scan_layers=True)
  np.testing.assert_allclose(our_logits(scfg, sparams, tokens, mask)[mask], ours[mask],
                             atol=1e-5, rtol=0)


def test_gemma3_transformers4_config_reads_the_same():
  v5 = make_hf_model("gemma3").config.to_dict()
  v4 = {k: v for k, v in v5.items() if k not in ("rope_parameters", "layer_types")}
  v4.update(rope_theta=10000.0, rope_local_base_freq=100.0, sliding_window_pattern=2,
            rope_scaling=None)
  assert models.from_hf_config(v4) == models.from_hf_config(v5)
  with pytest.raises(ValueError, match="layer_types"):
    models.from_hf_config({**v5, "layer_types": ["full_attention", "sliding_attention",
                                                 "sliding_attention"]})
  with pytest.raises(ValueError, match="model_type='gemma3'"):
    models.from_hf_config({**v5, "model_type": "gemma3"})
