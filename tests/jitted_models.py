"""The model calls sampler tests make themselves, jitted once (tests/sampling/test_tree_samplers.py,
test_sliding_window.py): eagerly, every primitive would compile on its own, again for every new
shape."""

from __future__ import annotations

import jax

from rl_jax import models
from rl_jax.rl import logprobs

init_params = jax.jit(models.init_params, static_argnums=0)
prefill = jax.jit(models.prefill, static_argnums=0)
decode_step = jax.jit(models.decode_step, static_argnums=0)
forward = jax.jit(models.forward, static_argnums=0)
completion_logprobs = jax.jit(logprobs.completion_logprobs, static_argnums=0,
                              static_argnames=("temperature", "group_size", "with_entropy"))
