"""Everything a run builds from its config before training: task, tokenizer, model, arrays, mesh."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import jax
import ml_collections
import numpy as np

from rl_jax import data, models, parallel, sampling
from rl_jax.data.batching import encode_completions, encode_prompts
from rl_jax.tokenizers import Tokenizer, train_sentencepiece


@dataclasses.dataclass
class Experiment:
  """A run's fixed inputs. Arrays are host numpy; `mesh` places device work."""

  config: ml_collections.ConfigDict
  workdir: str
  task: Any
  tokenizer: Tokenizer
  model_cfg: models.ModelConfig
  mesh: jax.sharding.Mesh
  train_prompts: np.ndarray  # [N, P]
  train_prompt_mask: np.ndarray
  demo_tokens: np.ndarray  # [N, T] SFT targets
  demo_mask: np.ndarray
  heldout_prompts: np.ndarray  # [M, P]
  heldout_prompt_mask: np.ndarray

  @property
  def max_new_tokens(self) -> int:
    return self.config.sampling.max_new_tokens

  @functools.cached_property
  def rollout_strategy(self) -> sampling.Sampling:
    s = self.config.sampling
    return sampling.Sampling(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)

  def root_key(self) -> jax.Array:
    return jax.random.key(self.config.seed)

  def host_rng(self, *purpose: int) -> np.random.Generator:
    """A numpy generator that depends only on (seed, purpose...): stateless, so resumable."""
    return np.random.default_rng([self.config.seed, *purpose])


def model_config(config: ml_collections.ConfigDict, vocab_size: int) -> models.ModelConfig:
  """`config.model` (all ModelConfig fields; vocab_size 0 = the tokenizer's) -> ModelConfig."""
  fields = {f.name for f in dataclasses.fields(models.ModelConfig)}
  values = {k: v for k, v in config.model.items() if k in fields}
  if not values.get("vocab_size"):
    values["vocab_size"] = vocab_size
  elif values["vocab_size"] < vocab_size:
    raise ValueError(f"config.model.vocab_size={values['vocab_size']} is smaller than the "
                     f"tokenizer's vocabulary ({vocab_size})")
  return models.ModelConfig(**values)


def build(config: ml_collections.ConfigDict, workdir: str) -> Experiment:
  """Builds the task, trains (or loads) the tokenizer, encodes the data and makes the mesh."""
  tc = config.task
  task = data.make_task(tc.name, tc.options.to_dict(), config.seed, tc.train_size, tc.eval_size)
  demos = data.demonstrations(task.train, noise=tc.demo_noise,
                              rng=np.random.default_rng([config.seed, 7]))
  texts = [e.prompt for e in task.train] + [e.answer for e in demos]
  tokenizer = train_sentencepiece(texts, os.path.join(workdir, "tokenizer"),
                                  vocab_size=config.tokenizer.vocab_size,
                                  **config.tokenizer.options.to_dict())
  model_cfg = model_config(config, tokenizer.vocab_size)
  t = config.sampling.max_new_tokens
  max_prompt = model_cfg.max_seq_len - t
  all_prompts = [e.prompt for e in task.train] + [e.prompt for e in task.heldout]
  prompts, prompt_mask = encode_prompts(tokenizer, all_prompts, max_length=max_prompt)
  demo_tokens, demo_mask = encode_completions(tokenizer, [e.answer for e in demos], t)
  n = len(task.train)
  return Experiment(
      config=config, workdir=workdir, task=task, tokenizer=tokenizer, model_cfg=model_cfg,
      mesh=parallel.make_mesh(tuple(config.mesh.shape)),
      train_prompts=prompts[:n], train_prompt_mask=prompt_mask[:n],
      demo_tokens=demo_tokens, demo_mask=demo_mask,
      heldout_prompts=prompts[n:], heldout_prompt_mask=prompt_mask[n:])
