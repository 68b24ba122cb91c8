"""V0's frozen backbone: final hidden states H [N, L, D] of prompts, by prompt id.

Two sources (`config.value.v0.backbone`):

* '' (default): the policy itself. `PolicyFeatures(model_cfg, prompts, mask)(params, ids)` runs
  `models.hidden_states` (the final-normed states of a full forward pass; the same model code
  as the sampler, default outputs unchanged) on the left-padded prompts of `ids` with the
  policy parameters passed in: V0 sees the current policy through its own representation.
* a Hugging Face checkpoint directory (`models.load_hf`): `CheckpointFeatures(path, texts)`
  encodes the prompt texts with the checkpoint's own tokenizer and ignores the policy params.

No gradient flows into the backbone (`stop_gradient`; V0 trains its adapter and head only).
Rows run in fixed-size chunks (`chunk` rows, the last one padded) so one compile serves all calls.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rl_jax import models


@functools.partial(jax.jit, static_argnames=("cfg",))
def _hidden(cfg, params, tokens, mask):
  return jax.lax.stop_gradient(models.hidden_states(cfg, params, tokens, mask)).astype(jnp.float32)


class PolicyFeatures:
  """Hidden states of the task's train prompts (`prompts` [N, P], left-padded) under the
  parameters passed at call time."""

  def __init__(self, model_cfg: models.ModelConfig, prompts: np.ndarray, prompt_mask: np.ndarray,
               chunk: int = 128):
    self.cfg, self.prompts, self.mask, self.chunk = model_cfg, prompts, prompt_mask, chunk
    self.d_model = model_cfg.d_model

  def __call__(self, params, ids) -> tuple[np.ndarray, np.ndarray]:
    """-> (H [len(ids), P, D] float32, mask [len(ids), P]) (P fixed: one compile)."""
    ids = np.asarray(ids, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= len(self.prompts)):
      raise ValueError(f"prompt ids must be in [0, {len(self.prompts)}) (the task's train "
                       f"problems); got values in [{ids.min()}, {ids.max()}]")
    return run_chunks(self.cfg, params, self.prompts[ids], self.mask[ids], self.chunk)


class CheckpointFeatures:
  """Hidden states of a Hugging Face checkpoint (`config.value.v0.backbone=PATH`) for prompt
  texts; `__call__(params, ids)` ignores `params` (the backbone is its own, frozen)."""

  def __init__(self, path: str, texts, max_length: int = 512, chunk: int = 64):
    from rl_jax.data.batching import encode_prompts  # pylint: disable=import-outside-toplevel
    from rl_jax.tokenizers import HFTokenizer  # pylint: disable=import-outside-toplevel
    path = models.resolve_model_dir(path)  # a directory, or a hub id fetched into the cache
    self.cfg, self.params = models.load_hf(path)
    self.prompts, self.mask = encode_prompts(HFTokenizer(path), list(texts),
                                             max_length=max_length)
    self.d_model, self.chunk = self.cfg.d_model, chunk
    self._policy = PolicyFeatures(self.cfg, self.prompts, self.mask, chunk)

  def __call__(self, params, ids):
    del params
    return self._policy(self.params, ids)


def run_chunks(cfg, params, tokens: np.ndarray, mask: np.ndarray,
               chunk: int) -> tuple[np.ndarray, np.ndarray]:
  n = len(tokens)
  out = []
  for start in range(0, n, chunk):
    t, m = tokens[start:start + chunk], mask[start:start + chunk]
    pad = chunk - len(t)
    if pad:
      t = np.concatenate([t, np.repeat(t[:1], pad, 0)])
      m = np.concatenate([m, np.repeat(m[:1], pad, 0)])
    out.append(np.asarray(_hidden(cfg, params, jnp.asarray(t), jnp.asarray(m)))[:chunk - pad])
  d = cfg.d_model
  h = np.concatenate(out) if out else np.zeros((0, tokens.shape[1], d), np.float32)
  return h, mask.astype(bool)
