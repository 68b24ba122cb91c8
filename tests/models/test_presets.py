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
