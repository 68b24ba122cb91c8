"""Decoder-only policy models: config, Flax modules, explicit KV cache, functional API."""

from rl_jax.models.cache import KVCache, init_cache
from rl_jax.models.config import ModelConfig, PRESETS, get_preset
from rl_jax.models.model import (decode_step, extend, forward, hidden_states, init_params,
                                 logits_from_hidden, num_params, positions_from_mask, prefill,
                                 unembedding)
