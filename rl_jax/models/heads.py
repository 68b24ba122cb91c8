"""A scalar head on the policy architecture: one logit per position (value models, PRMs).

Parameters are a plain dict `{'body': <policy params>, 'head': {'kernel': [D], 'bias': []}}`:
the body is exactly a policy's parameter tree (so a PRM starts from a policy checkpoint or a
`models.load_hf` directory, and its body still has the language-model head that PRIME's
implicit PRM reads), and the head reads the final-normed hidden state.

    params = init_value_params(cfg, policy_params, bias=0.0)
    logits = token_values(cfg, params, prompt, prompt_mask, completion, completion_mask)
    # [B, T + 1]: index 0 after the prompt, index t + 1 after completion token t

`sigmoid(logit)` is the model's probability of success from that prefix (a PAV's `Q^μ`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rl_jax.models import model as model_lib
from rl_jax.models.config import ModelConfig


def init_value_params(cfg: ModelConfig, body: Any, *, bias: float = 0.0) -> dict:
  """A value model whose body is `body` (a policy's params) and whose head is zero with logit
  `bias` everywhere (e.g. the log-odds of the base success rate)."""
  dtype = jax.tree_util.tree_leaves(body)[0].dtype
  return {"body": body, "head": {"kernel": jnp.zeros((cfg.d_model,), dtype),
                                 "bias": jnp.asarray(bias, dtype)}}


def head_logits(params: dict, hidden: jax.Array) -> jax.Array:
  """hidden [..., D] -> float32 logits [...]."""
  h = params["head"]
  return (jnp.einsum("...d,d->...", hidden.astype(jnp.float32),
                     h["kernel"].astype(jnp.float32)) + h["bias"].astype(jnp.float32))


def token_values(cfg: ModelConfig, params: dict, prompt: jax.Array, prompt_mask: jax.Array,
                 completion: jax.Array, completion_mask: jax.Array) -> jax.Array:
  """Logits [B, T + 1] of the prefixes ending at the last prompt token (index 0) and at each
  completion token t (index t + 1); 0 where the completion token is not counted.

  Args:
    prompt: [B, P] left-padded prompt tokens; prompt_mask [B, P].
    completion: [B, T] right-padded completion tokens; completion_mask [B, T].
  """
  p = prompt.shape[1]
  tokens = jnp.concatenate([prompt, completion], axis=1)
  mask = jnp.concatenate([prompt_mask, completion_mask], axis=1).astype(bool)
  hidden = model_lib.hidden_states(cfg, params["body"], tokens, mask)[:, p - 1:]
  logits = head_logits(params, hidden)
  keep = jnp.concatenate([jnp.ones((tokens.shape[0], 1), bool), completion_mask.astype(bool)], 1)
  return jnp.where(keep, logits, 0.0)
