"""Process reward models in Flax: the policy architecture with a scalar head, trained with optax
on soft labels at step ends, saved atomically like a policy.

A PRM is `models.heads` params (`{'body', 'head'}`) plus a `PRMSpec` (its model config and how
it segments steps). Training data is a `PRMBatch`: completions and, per position of the
`[R, T + 1]` layout of `heads.token_values` (0 = after the prompt, t + 1 = after completion token
t), a soft label in [0, 1] and a weight (0 where there is no label). The loss is the weighted
binary cross-entropy `-w [y log σ(z) + (1 - y) log(1 - σ(z))] / Σ w` (docs/algorithms.md §5.1: "BCE
on the soft label at step-boundary tokens").

Initialisation: `init_from_policy(cfg, policy_params)` (a run's SFT checkpoint,
`init_from.load_sft` / `evals.runner.load_params`) or `init_from_hf(path)` (`models.load_hf`).

Saving: `save(directory, spec, params)` writes `prm.json` (the spec, atomically: temporary file
+ rename) and the params through `checkpoint.Checkpointer` (orbax's temporary-directory rename
and a SHA-256 digest, as for policies); `load(directory)` reads both back.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rl_jax import models
from rl_jax.checkpoint import Checkpointer
from rl_jax.models import heads
from rl_jax.train_state import TrainState

SPEC_FILE = "prm.json"


@dataclasses.dataclass(frozen=True)
class PRMSpec:
  """What a saved PRM needs besides its weights.

  Attributes:
    model: the body's ModelConfig.
    delimiters: token ids that end a step (`value.prm.segments.delimiter_ids`).
    ignore_ids: token ids that are not step content (EOS).
    kind: what its labels were ('pav' Monte Carlo prefix values, 'orm' outcome labels at every
      step end, 'truth' the step checker's prefix labels, ...); informative only.
    prover_k: K of the best-of-K prover its labels were transformed to (1 = the policy).
  """

  model: models.ModelConfig
  delimiters: tuple
  ignore_ids: tuple = ()
  kind: str = "pav"
  prover_k: int = 1

  def to_json(self) -> dict:
    d = dataclasses.asdict(self)
    d["delimiters"], d["ignore_ids"] = list(self.delimiters), list(self.ignore_ids)
    return d

  @classmethod
  def from_json(cls, d: dict) -> "PRMSpec":
    d = dict(d)
    d["model"] = models.ModelConfig(**d["model"])
    d["delimiters"], d["ignore_ids"] = tuple(d["delimiters"]), tuple(d["ignore_ids"])
    return cls(**d)


@flax.struct.dataclass
class PRMBatch:
  """Completions and their per-position labels ([R, T + 1], see the module docstring)."""

  prompt_tokens: jax.Array
  prompt_mask: jax.Array
  tokens: jax.Array
  mask: jax.Array
  labels: jax.Array
  weights: jax.Array


def init_from_policy(cfg: models.ModelConfig, policy_params: Any, *, base_rate: float = 0.5
                     ) -> dict:
  """A PRM whose body is a copy of the policy's params; its head starts at logit(base_rate)."""
  p = float(np.clip(base_rate, 1e-3, 1 - 1e-3))
  body = jax.tree_util.tree_map(jnp.array, policy_params)
  return heads.init_value_params(cfg, body, bias=float(np.log(p / (1 - p))))


def init_from_hf(path: str, *, base_rate: float = 0.5, dtype: str = "float32"
                 ) -> tuple[models.ModelConfig, dict]:
  """A PRM whose body is the Hugging Face checkpoint in `path` (`models.load_hf`)."""
  cfg, params = models.load_hf(path, dtype=dtype, param_dtype=dtype)
  return cfg, init_from_policy(cfg, params, base_rate=base_rate)


def bce_with_logits(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Elementwise `-[y log σ(z) + (1 - y) log(1 - σ(z))]`, stable for any z; y may be soft.

  softplus(z) - z·y: the same value as max(z, 0) - z·y + log1p(e^{-|z|}), whose gradient at
  exactly z = 0 is -y instead of σ(0) - y (the kinks of max and |.|), which left a zero-initialised
  head (ARRoL's) with zero gradient on all-negative labels."""
  return jax.nn.softplus(logits) - logits * labels


def loss_fn(params: dict, batch: PRMBatch, *, cfg: models.ModelConfig) -> tuple[jax.Array, dict]:
  """Weighted BCE of the PRM's logits against the soft labels (see the module docstring)."""
  logits = heads.token_values(cfg, params, batch.prompt_tokens, batch.prompt_mask, batch.tokens,
                              batch.mask)
  w = batch.weights.astype(jnp.float32)
  n = jnp.maximum(jnp.sum(w), 1e-6)
  loss = jnp.sum(w * bce_with_logits(logits, batch.labels)) / n
  err = jnp.sum(w * jnp.abs(jax.nn.sigmoid(logits) - batch.labels)) / n
  return loss, {"mae": err}


def train_step(state: TrainState, batch: PRMBatch, *, cfg: models.ModelConfig
               ) -> tuple[TrainState, dict]:
  """One optax update of the PRM on `batch` (jit with `cfg` static)."""
  (loss, aux), grads = jax.value_and_grad(functools.partial(loss_fn, cfg=cfg), has_aux=True)(
      state.params, batch)
  gnorm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree_util.tree_leaves(grads)))
  return state.apply_gradients(grads), dict(aux, loss=loss, grad_norm=gnorm)


@functools.partial(jax.jit, static_argnames=("cfg",))
def predict(params: dict, prompt, prompt_mask, tokens, mask, *, cfg: models.ModelConfig
            ) -> jax.Array:
  """σ(logits) [R, T + 1]: the PRM's success probability after the prompt and each token."""
  return jax.nn.sigmoid(heads.token_values(cfg, params, prompt, prompt_mask, tokens, mask))


def predict_batched(spec: PRMSpec, params: dict, prompt, prompt_mask, tokens, mask,
                    batch_size: int = 256) -> np.ndarray:
  """`predict` over host arrays in chunks of `batch_size` rows (the last chunk padded)."""
  n = len(tokens)
  out = []
  for i in range(0, n, batch_size):
    sl = slice(i, i + batch_size)
    parts = [np.asarray(x[sl]) for x in (prompt, prompt_mask, tokens, mask)]
    k = len(parts[0])
    if k < batch_size and n > batch_size:  # one compiled shape
      parts = [np.concatenate([x, np.repeat(x[-1:], batch_size - k, 0)]) for x in parts]
    out.append(np.asarray(predict(params, *parts, cfg=spec.model))[:k])
  return np.concatenate(out)


def _write_json_atomic(path: str, obj: Any) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=1, sort_keys=True)
  os.replace(tmp, path)


def save(directory: str, spec: PRMSpec, params: dict, *, meta: dict | None = None) -> int:
  """Writes `spec` (prm.json) and `params` (an orbax checkpoint one step after the newest one
  there, which orbax then drops) under `directory`; returns the checkpoint's step."""
  os.makedirs(directory, exist_ok=True)
  _write_json_atomic(os.path.join(directory, SPEC_FILE), spec.to_json())
  with Checkpointer(os.path.join(directory, "checkpoints"), save_every=1, max_to_keep=1) as ck:
    step = (ck.latest_step() or 0) + 1
    ck.maybe_save(step, {"params": params}, dict(meta or {}), force=True)
  return step


def load(directory: str) -> tuple[PRMSpec, dict, dict]:
  """(spec, params, meta) of the newest checkpoint under `directory`.

  Raises:
    FileNotFoundError: naming the missing prm.json or checkpoint directory.
  """
  spec_path = os.path.join(directory, SPEC_FILE)
  if not os.path.isfile(spec_path):
    raise FileNotFoundError(f"{spec_path} does not exist; expected a PRM directory written by "
                            "rl_jax.value.prm.model.save (prm.json + checkpoints/)")
  with open(spec_path) as f:
    spec = PRMSpec.from_json(json.load(f))
  abstract = jax.eval_shape(lambda k: {"params": heads.init_value_params(
      spec.model, models.init_params(spec.model, k))}, jax.random.key(0))
  with Checkpointer(os.path.join(directory, "checkpoints"), save_every=1) as ck:
    step = ck.latest_step()
    if step is None:
      raise FileNotFoundError(f"{directory}/checkpoints holds no complete PRM checkpoint")
    state, meta = ck.restore(step, abstract)
  return spec, state["params"], meta
