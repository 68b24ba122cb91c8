"""Presets of public checkpoints have their published parameter counts (shapes only, no weights)."""

import jax
import pytest

from rl_jax import models

PUBLISHED = {
    "smollm2-135m": 134_515_008,
    "smollm2-360m": 361_821_120,
    "llama3-1b": 1_235_814_400,  # Llama 3.2 1B
    "llama3-3b": 3_212_749_824,  # Llama 3.2 3B
    "qwen2.5-0.5b": 494_032_768,
    "qwen3-0.6b": 596_049_920,
    "qwen3-1.7b": 1_720_574_976,  # 1.7B; 1.4B without the (tied) embedding
    "qwen3-8b": 8_190_735_360,  # 8.2B; 6.95B without embedding and lm_head
    "gemma-2b": 2_506_172_416,
    "gemma3-1b": 999_885_952,  # Gemma 3 1B (1.0B; 0.70B without the tied embedding)
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_parameter_count(name):
  cfg = models.get_preset(name)
  shapes = jax.eval_shape(lambda: models.init_params(cfg, jax.random.key(0)))
  assert models.num_params(shapes) == PUBLISHED[name]


def test_rope_scaling_config_errors():
  with pytest.raises(ValueError, match="rope_scaling"):
    models.get_preset("tiny", vocab_size=8, rope_scaling="yarn")
  with pytest.raises(ValueError, match="rope_low_freq_factor"):
    models.get_preset("tiny", vocab_size=8, rope_scaling="llama3", rope_low_freq_factor=5.0)
  hash(models.get_preset("llama3-1b"))  # Frozen and hashable: a static jit argument.


# config.json of google/gemma-3-1b-it (transformers 4 layout).
GEMMA3_1B_CONFIG = {
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": [1, 106], "final_logit_softcapping": None, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
    "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
    "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0", "use_cache": True, "vocab_size": 262144}


def test_gemma3_preset_is_the_published_config():
  cfg = models.from_hf_config(GEMMA3_1B_CONFIG)
  assert cfg == models.get_preset("gemma3-1b")
  assert cfg.local_layers == tuple((i + 1) % 6 != 0 for i in range(26))  # 5 local, 1 global
  # And as transformers 5 writes it (layer_types, per-kind rope_parameters).
  import transformers  # pylint: disable=g-import-not-at-top
  v5 = transformers.Gemma3TextConfig(**GEMMA3_1B_CONFIG).to_dict()
  assert "layer_types" in v5 and "full_attention" in v5["rope_parameters"]
  assert models.from_hf_config(v5) == cfg
  assert models.from_hf_config(models.to_hf_config(cfg)) == cfg
