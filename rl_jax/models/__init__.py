"""Decoder-only policy models: config, Flax modules, explicit KV cache, functional API.

Hugging Face checkpoints: `cfg, params = load_hf(path, dtype=...)` (a directory or a hub id),
`save_hf(path, cfg, params)`.
Layer layouts (`ModelConfig.scan_layers`): `stack_layers(params)` / `unstack_layers(params)`.
"""

from rl_jax.models.cache import KVCache, init_cache
from rl_jax.models.config import REMAT_POLICIES, ModelConfig, PRESETS, get_preset
from rl_jax.models import hub
from rl_jax.models.hf import load_hf, read_hf_config, save_hf
from rl_jax.models.hub import is_hub_id, resolve_model_dir
from rl_jax.models.layout import is_stacked, stack_layers, to_layout, unstack_layers
from rl_jax.models.hf_config import from_hf_config, to_hf_config
from rl_jax.models.model import (cast_params, decode_step, extend, forward, hidden_states,
                                 hidden_states_after, hidden_states_and_kv, init_params,
                                 logits_from_hidden, num_params, positions_from_mask, prefill,
                                 softcap_logits, unembedding)
from rl_jax.models.rope import rope_frequencies
