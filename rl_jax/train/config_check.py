"""The one check of an experiment config (`check`), run by `train.loop.run` before any compute.

In: a ConfigDict (types already enforced by ml_collections, unknown fields by experiments/run.py;
fields missing from an older config are skipped). Out: None, or `ConfigError` (a ValueError) on
the first problem, one line naming the field, the value and what was expected. Order: registry
names (`check_names`, with the closest name), model shapes and one-row groups (`check_model`),
the task (`check_task`), single-field ranges (`RULES`; each field in one place: a method's own
section is checked by its options dataclass instead), then the cross-field checks of the rollout
side (`rollout.checks`: every registry entry the config turns on runs its declared `check`) and
of process rewards. No method is named here. `check_workdir` checks the work dir.
"""

from __future__ import annotations

import difflib
import math
import os
from typing import Any, Callable

import ml_collections

from rl_jax import experiment
from rl_jax import rewards as rewards_lib
from rl_jax.data import math_tasks
from rl_jax.rewards import contained
from rl_jax.rl import advantages, allocation, losses
from rl_jax.rl.advantages import v05
from rl_jax.rollout import checks as rollout_checks
from rl_jax.rollout import engines as rollout_engines
from rl_jax.rollout import rules
from rl_jax.sampling import engines
from rl_jax.value import priors
from rl_jax.value.prm import process
from rl_jax.value.v0 import model as v0_model


class ConfigError(ValueError):
  """A config field holds a value out of its range (the message names it)."""


def unknown_name(field: str, value: Any, names) -> str:
  """`field='value': expected one of [...]; did you mean 'x'?` (the closest names, if any)."""
  names = list(names)
  msg = f"{field}={value!r}: expected one of {names}"
  close = difflib.get_close_matches(str(value), [str(n) for n in names], n=1)
  return f"{msg}; did you mean {close[0]!r}?" if close else msg


def _registry_names() -> dict[str, tuple]:
  """Field path -> the names it may hold, from each registry."""
  priors_ = tuple(priors.PRIORS.names())
  return {
      "rl.advantage": tuple(advantages.ADVANTAGES.names()),
      "rl.loss": tuple(losses.LOSSES.names()),
      "rl.aggregation": tuple(losses.AGG_MODES),
      "rl.kl_kind": ("k1", "k2", "k3", "abs", "kl", "mse", "low_var_kl"),
      "rl.rollout": rollout_engines.rollout_modes(),
      "sampling.engine": tuple(engines.DECODE_LOOPS.names()),
      "rl.allocator": tuple(allocation.ALLOCATORS.names()),
      "rl.allocator_prior": ("",) + priors_,
      "rl.v05.prior": priors_,
      "rl.process_reward": tuple(process.PROCESS_REWARDS),
      "rl.rewards": tuple(rewards_lib.REWARDS.names()),
      "rl.round_rules": tuple(rules.ROUND_RULES.names()),
      "value.v0.head": tuple(v0_model.HEADS.names()),
      "rl.optim.schedule": ("constant", "cosine", "linear"),
      "sft.optim.schedule": ("constant", "cosine", "linear"),
      "tokenizer.kind": experiment.TOKENIZER_KINDS,
      "data.source": experiment.DATA_SOURCES,
  }


def check_names(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError for a registry name no registry holds (`rl.advantage='grpoo'`), naming
  the field, the names it may hold and the closest one."""
  for path, names in _registry_names().items():
    value = _get(config, path)
    if value is _MISSING:
      continue
    if isinstance(value, (tuple, list)):
      for i, v in enumerate(value):
        if v not in names:
          raise ConfigError(unknown_name(f"config.{path}[{i}]", v, names))
    elif value not in names:
      raise ConfigError(unknown_name(f"config.{path}", value, names))


def check_model(config: ml_collections.ConfigDict) -> None:
  """Model shapes (a random-init model; a checkpoint's own config.json decides otherwise) and a
  group-relative advantage (its entry declares `group_relative`) over groups of one row."""
  m = _get(config, "model")
  if m is not _MISSING and not m.get("path") and "d_model" in m:
    if m.d_model % m.n_heads:
      raise ConfigError(f"config.model.d_model={m.d_model}, config.model.n_heads={m.n_heads}: "
                        "expected d_model to be a multiple of n_heads")
    if m.n_heads % m.n_kv_heads:
      raise ConfigError(f"config.model.n_heads={m.n_heads}, config.model.n_kv_heads="
                        f"{m.n_kv_heads}: expected n_heads to be a multiple of n_kv_heads")
  rl = _get(config, "rl")
  if (rl is not _MISSING and "group_size" in rl and rl.group_size == 1
      and advantages.declares(rl.get("advantage"), "group_relative")
      and not rl.get("max_group_size")):
    raise ConfigError(f"config.rl.group_size=1 with config.rl.advantage={rl.advantage!r}: a "
                      "group-relative advantage is 0 for every row of a one-row group; expected "
                      "group_size >= 2")


def check_task(config: ml_collections.ConfigDict) -> None:
  """The `math` task's options (`math_tasks.check_options`: names, source, answer format, a
  JSONL file that exists and holds the named fields; no demo_noise) and the chat-template
  settings (`tokenizer.system_prompt`, `tokenizer.template_kwargs` need `task.chat_template`)."""
  task = _get(config, "task")
  if task is not _MISSING and task.get("name") == "math":
    try:
      math_tasks.check_options(task.get("options"))
    except (ValueError, FileNotFoundError) as e:
      raise ConfigError(str(e)) from e
    if task.get("demo_noise"):
      raise ConfigError(f"config.task.demo_noise={task.demo_noise!r}: the 'math' task has no "
                        "noisy demonstrations; expected 0.0")
  tok = _get(config, "tokenizer")
  if tok is _MISSING or task is _MISSING:
    return
  system, kwargs = tok.get("system_prompt", ""), tok.get("template_kwargs", None)
  if not isinstance(system, str):
    raise ConfigError(f"config.tokenizer.system_prompt={system!r}: expected a string")
  if kwargs is not None and not isinstance(kwargs, (ml_collections.ConfigDict, dict)):
    raise ConfigError(f"config.tokenizer.template_kwargs={kwargs!r}: expected a dict of chat "
                      "template arguments, e.g. {'enable_thinking': False}")
  if (system or kwargs) and not task.get("chat_template"):
    raise ConfigError("config.tokenizer.system_prompt / template_kwargs apply to prompts "
                      "rendered with the chat template; set config.task.chat_template=True")


def check_workdir(workdir: str) -> None:
  """Raises ConfigError for a work dir that is a file, or that cannot be created or written."""
  path = os.path.abspath(workdir)
  if os.path.exists(path) and not os.path.isdir(path):
    raise ConfigError(f"--workdir={workdir} is a file; expected a directory (or a new path)")
  parent = path
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise ConfigError(f"--workdir={workdir}: {parent} is a file; expected a directory")
  if not os.access(parent, os.W_OK | os.X_OK):
    what = "is not writable" if parent == path else f"cannot be created ({parent} is read-only)"
    raise ConfigError(f"--workdir={workdir} {what}")


def _num(x: Any) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int(lo: int) -> tuple[Callable[[Any], bool], str]:
  return (lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= lo,
          f"an integer >= {lo}")


def _real(lo: float, hi: float = math.inf, *, lo_open=False, hi_open=False):
  def ok(x):
    if not _num(x):
      return False
    return (x > lo if lo_open else x >= lo) and (x < hi if hi_open else x <= hi)
  left, right = "(" if lo_open else "[", ")" if hi_open or hi == math.inf else "]"
  return ok, f"a finite number in {left}{lo:g}, {hi:g}{right}"


def _one_of(options) -> tuple[Callable[[Any], bool], str]:
  return (lambda x: x in options), f"one of {list(options)}"


def _optim(prefix: str) -> dict:
  return {
      f"{prefix}.lr": _real(0.0),
      f"{prefix}.warmup_steps": _int(0),
      f"{prefix}.end_lr_frac": _real(0.0),
      f"{prefix}.weight_decay": _real(0.0),
      f"{prefix}.b1": _real(0.0, 1.0, hi_open=True),
      f"{prefix}.b2": _real(0.0, 1.0, hi_open=True),
      f"{prefix}.eps": _real(0.0, lo_open=True),
      f"{prefix}.grad_clip": _real(0.0),
  }


# Field path (from the config root) -> (predicate, what is expected). Fields missing from a
# config (e.g. a config built by hand from an older base) are not checked.
RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "seed": _int(0),
    "compile_cache_min_seconds": _real(0.0),
    "compile_cache_max_gb": _real(0.0, lo_open=True),
    "max_nonfinite_in_a_row": _int(1),
    "task.train_size": _int(1),
    "task.eval_size": _int(1),
    "task.test_size": _int(0),
    "task.demo_noise": _real(0.0, 1.0),
    "tokenizer.vocab_size": _int(1),
    "model.d_model": _int(1),
    "model.n_layers": _int(1),
    "model.n_heads": _int(1),
    "model.n_kv_heads": _int(1),
    "model.d_ff": _int(1),
    "model.max_seq_len": _int(2),
    "sampling.max_new_tokens": _int(1),
    "sampling.temperature": _real(0.0),
    "sampling.top_k": _int(0),
    "sampling.top_p": _real(0.0, 1.0, lo_open=True),
    "sampling.engine": _one_of(tuple(engines.DECODE_LOOPS.names())),
    "sampling.exit_every": _int(1),
    "sampling.num_slots": _int(0),
    "sft.steps": _int(0),
    "sft.seed": _int(-1),
    "sft.batch_size": _int(1),
    "sft.eval_every": _int(0),
    "sft.length_buckets": _int(0),
    **_optim("sft.optim"),
    "rl.steps": _int(0),
    "rl.prompts_per_step": _int(1),
    "rl.group_size": _int(1),
    "rl.clip_low": _real(0.0),
    "rl.clip_high": _real(0.0),
    "rl.clip_ratio_c": _real(1.0, lo_open=True),
    "rl.kl_coef": _real(0.0),
    "rl.sft_coef": _real(0.0),
    "rl.eval_every": _int(0),
    "rl.eval_subset": _int(0),
    "rl.num_minibatches": _int(1),
    "rl.num_iterations": _int(1),
    "rl.tis_cap": _real(0.0),
    "rl.partial.groups": _int(0),
    "rl.minpro.inclusive": _one_of((True, False)),
    "rl.minpro.cap": _one_of((True, False)),
    "rl.minpro.behav_logp": _one_of(losses.MINPRO_BEHAV_LOGP),
    "rl.max_gen_rounds": _int(1),
    "rl.overlong_buffer": _int(0),
    "rl.overlong_penalty_factor": _real(0.0),
    "rl.reward_timeout": _real(0.0, lo_open=True),
    "rl.reward_isolation": _one_of(contained.ISOLATIONS),
    "rl.reward_max_logged": _int(0),
    "rl.reward_max_failed_steps": _int(0),
    "rl.rows": _int(0),
    "rl.max_group_size": _int(0),
    **{f"rl.allocation.{f}": _int(0) for f in (
        "min_n", "probe", "history_steps", "history_rollouts", "candidates")},
    "rl.success_threshold": _real(0.0, 1.0, hi_open=True),
    "rl.v05.n_max": _int(1),
    "rl.v05.alpha": _real(0.0, 1.0, lo_open=True, hi_open=True),
    "rl.v05.test": _one_of(v05.TESTS),
    "rl.v05.fusion": _one_of(v05.FUSIONS),
    "rl.v05.sigma0_sq": _real(0.0),
    "rl.v05.std_eps": _real(0.0),
    "rl.v05.prior_window": _int(0),
    "rl.v05.prior_pseudo_count": _real(0.0, lo_open=True),
    **_optim("rl.optim"),
    "control.steps": _int(0),
    "eval.num_samples": _int(1),
    "eval.batch_size": _int(1),
    "checkpoint.every": _int(1),
    "checkpoint.max_to_keep": _int(1),
    # V0 (rl_jax/value/v0/online.py).
    "value.v0.num_queries": _int(1),
    "value.v0.query_dim": _int(1),
    "value.v0.num_heads": _int(1),
    "value.v0.mlp_hidden": _int(1),
    "value.v0.dropout": _real(0.0, 1.0, hi_open=True),
    "value.v0.head": _one_of(v0_model.HEADS.names()),
    "value.v0.head_dim": _int(1),
    "value.v0.support_size": _int(1),
    "value.v0.episode_queries": _int(1),
    "value.v0.episodes_per_step": _int(1),
    "value.v0.alpha": _real(0.0, 1.0),
    "value.v0.train_every": _int(0),
    "value.v0.train_steps": _int(0),
    "value.v0.train_window": _int(1),
    "value.v0.min_attempts": _int(1),
    "value.v0.sigma0_sq": _real(0.0, 0.25, lo_open=True),
    "value.v0.sigma0_sq_floor": _real(0.0, 0.25, lo_open=True),
    **_optim("value.v0.optim"),
    "value.v0.calib_prompts": _int(1),
    "value.v0.calib_samples": _int(0),
    "value.oracle.mc_samples": _int(1),
}


def _get(config, path: str):
  node = config
  for part in path.split("."):
    if not isinstance(node, (ml_collections.ConfigDict, dict)) or part not in node:
      return _MISSING
    node = node[part]
  return node


_MISSING = object()


def check(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError for the first field out of its range (`RULES`), naming it as
  `config.<path>`; also every entry of `eval.temperatures` must be a finite number >= 0.
  Registry names (`check_names`), model shapes (`check_model`) and the task's options
  (`check_task`) are checked first."""
  check_names(config)
  check_model(config)
  check_task(config)
  for path, (ok, expected) in RULES.items():
    value = _get(config, path)
    if value is _MISSING:
      continue
    if not ok(value):
      raise ConfigError(f"config.{path}={value!r}: expected {expected}")
  temps = _get(config, "eval.temperatures")
  if temps is not _MISSING:
    for t in temps:
      if not (_num(t) and t >= 0):
        raise ConfigError(f"config.eval.temperatures={tuple(temps)!r}: expected finite "
                          f"numbers >= 0, got {t!r}")
  subset, dev = _get(config, "rl.eval_subset"), _get(config, "task.eval_size")
  if subset is not _MISSING and dev is not _MISSING and subset > dev:
    raise ConfigError(f"config.rl.eval_subset={subset}: expected at most the dev set's "
                      f"config.task.eval_size={dev} problems (0 = all of them)")
  v0 = _get(config, "value.v0")
  if v0 is not _MISSING and v0.query_dim % v0.num_heads:
    raise ConfigError(f"config.value.v0.query_dim={v0.query_dim}, config.value.v0.num_heads="
                      f"{v0.num_heads}: expected query_dim to be a multiple of num_heads")
  rl = _get(config, "rl")
  if rl is not _MISSING and "rewards" in rl:
    try:
      rollout_checks.check_config(config)
    except ValueError as e:
      raise ConfigError(str(e)) from e
  if rl is not _MISSING and "process_reward" in rl:
    try:
      process.check_config(config)
    except ValueError as e:
      raise ConfigError(str(e)) from e
