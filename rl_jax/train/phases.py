"""Training phases (SFT and RL) with checkpoints every N steps and automatic resume.

A phase's data and randomness depend only on (seed, phase, step), and its state (params, optimizer,
step) is checkpointed, so a run stopped after step k and resumed reproduces the uninterrupted run.
With `config.data.source='grain'` the phase's problems come from a grain loader
(`data.grain_source.ProblemStream`, seeded by (seed, phase)) whose state is checkpointed with it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Any, Callable, Optional

import jax
import numpy as np

from rl_jax import experiment, models, parallel, seeds
from rl_jax import workdir as workdir_lib
from rl_jax.checkpoint import Checkpointer
from rl_jax.data.batching import LengthBuckets
from rl_jax.experiment import Experiment
from rl_jax.metrics import MetricsWriter, ProgressBar
from rl_jax.rewards import contained
from rl_jax.rollout import collect
from rl_jax.rollout.requests import StepContext
from rl_jax.train import companions as companions_lib
from rl_jax.train import hyper as hyper_lib
from rl_jax.train import signals
from rl_jax.train import steps as steps_lib
from rl_jax.train_state import TrainState, make_optimizer
from rl_jax.types import SFTBatch

_log = logging.getLogger(__name__)


class Interrupted(Exception):
  """Raised when `config.interrupt_at` asks the run to stop (a simulated preemption)."""


class NonFiniteError(RuntimeError):
  """`config.max_nonfinite_in_a_row` steps in a row had a non-finite loss or gradient norm."""


@dataclasses.dataclass
class PhaseResult:
  params: Any
  train_seconds: float  # Wall time of the steps (compilation of the first step excluded).
  steps: int


def init_params(exp: Experiment) -> Any:
  """The initial policy parameters (master weights, in `config.train.master_dtype`), placed with
  their shardings.

  With `config.model.path` these are the checkpoint's weights (`models.load_hf`): the SFT phase
  starts from them, and with `sft.steps=0` the RL phase and its frozen KL reference do too.
  Otherwise a random initialization created directly with its shardings (eval_shape -> rules ->
  jit).

  Raises:
    ValueError: the checkpoint's config no longer matches `exp.model_cfg` (changed since build).
  """
  if exp.config.model.path:
    return _load_params(exp)
  init = functools.partial(models.init_params, exp.master_cfg)
  key = jax.random.fold_in(exp.root_key("sft"), 0)
  shardings = parallel.tree_shardings(jax.eval_shape(init, key), exp.mesh)
  return jax.jit(init, out_shardings=shardings)(key)


def _load_params(exp: Experiment) -> Any:
  path = exp.config.model.path
  # Host arrays in the master dtype, then each placed with its sharding (no device holds the
  # whole model first).
  cfg, params = models.load_hf(path, dtype=exp.model_cfg.dtype,
                               param_dtype=exp.master_cfg.param_dtype,
                               scan_layers=exp.model_cfg.scan_layers, on_host=True)
  if dataclasses.replace(cfg, remat=exp.model_cfg.remat) != exp.master_cfg:
    raise ValueError(f"config.model.path={path!r} now holds {cfg}; the run was built for "
                     f"{exp.master_cfg}")
  return jax.device_put(params, parallel.tree_shardings(params, exp.mesh))


def _state(exp: Experiment, params, tx):
  create = functools.partial(TrainState.create, tx=tx)
  abstract = jax.eval_shape(create, params)
  shardings = parallel.tree_shardings(abstract, exp.mesh)
  return jax.jit(create, out_shardings=shardings)(params), abstract, shardings


def _batch_shardings(exp: Experiment, tree):
  return jax.tree_util.tree_map(
      lambda x: parallel.batch_sharding(exp.mesh, x.ndim, x.shape[0] if x.ndim else None), tree)


def _donate(exp: Experiment) -> tuple[int, ...]:
  """The step's donated arguments: the train state (argument 0) unless `config.train.donate` is
  off."""
  return (0,) if exp.config.train.donate else ()


def _compute_params(exp: Experiment, params):
  """The `model.param_dtype` copy of master weights that the sampler runs on (the arrays
  themselves where the dtypes agree)."""
  return models.cast_params(exp.model_cfg, params)


def _maybe_interrupt(exp: Experiment, phase: str, step: int):
  if exp.config.interrupt_at == f"{phase}:{step}":
    raise Interrupted(f"stopped after {phase} step {step} (config.interrupt_at)")


def _run_steps(exp: Experiment, phase: str, state_and_meta, num_steps: int, step_fn: Callable,
               writer: MetricsWriter, ckpt: Checkpointer, *, eval_fn=None, eval_every=0,
               extra_meta: Callable[[], dict] = dict,
               before_save: Optional[Callable[[int], None]] = None):
  """The shared loop: step_fn(state, step) -> (state, metrics dict of device scalars).

  `extra_meta()` is saved into every checkpoint's meta (JSON; e.g. the RL rollout history).
  `before_save(step)` runs just before each checkpoint is written (e.g. it saves the online PRM
  at the same step), so a checkpoint on disk always has its companion.

  A step with `nonfinite` > 0 (not applied, `steps.finite_or_skip`) is logged;
  `config.max_nonfinite_in_a_row` of them in a row raise `NonFiniteError` before that step is
  checkpointed; so do `config.rl.reward_max_failed_steps` steps in a row whose every reward call
  failed (`contained.RewardsFailedError`). A SIGTERM / SIGINT (`signals.catch`) saves the step
  just finished and raises `signals.Preempted`.
  """
  state, start, meta = state_and_meta
  seconds = float(meta.get("train_seconds", 0.0))
  in_a_row = int(meta.get("nonfinite_in_a_row", 0))
  limit = exp.config.max_nonfinite_in_a_row
  reward_failures = contained.FailureStreak.from_config(exp.config)
  writer.truncate(phase, start)
  bar = ProgressBar(num_steps, desc=phase, initial=start,
                    disable=not exp.config.progress or not parallel.is_primary())
  for step in range(start, num_steps):
    t0 = time.perf_counter()
    state, metrics = step_fn(state, step)
    metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
    dt = time.perf_counter() - t0
    if step > start:  # The first step of a process includes compilation.
      seconds += dt
    metrics["step_seconds"] = dt
    if metrics.get("nonfinite", 0.0) > 0:
      in_a_row += 1
      _log.warning("%s step %d: loss %s, grad_norm %s; the step was not applied (%d in a row, "
                   "config.max_nonfinite_in_a_row=%d)", phase, step + 1, metrics.get("loss"),
                   metrics.get("grad_norm"), in_a_row, limit)
    else:
      in_a_row = 0
    if eval_fn is not None and eval_every and (step + 1) % eval_every == 0:
      metrics.update(eval_fn(state.params, step + 1))
    writer.write(step + 1, metrics, phase)
    bar.update(1, **{k: metrics[k] for k in ("loss", "reward_mean") if k in metrics})
    reward_failures.update(phase, step + 1, metrics)
    if in_a_row >= limit:
      raise NonFiniteError(
          f"{phase} steps {step + 2 - in_a_row}-{step + 1}: {in_a_row} steps in a row had a "
          f"non-finite loss or gradient norm (config.max_nonfinite_in_a_row={limit}); none was "
          f"applied. The last checkpoint (step {ckpt.latest_step()} in {ckpt.directory}) holds "
          "the last good state.")
    stop = signals.requested()
    force = (step + 1 == num_steps or stop is not None
             or exp.config.interrupt_at == f"{phase}:{step + 1}")
    if before_save is not None and ckpt.will_save(step + 1, force):
      before_save(step + 1)
    ckpt.maybe_save(step + 1, state, {"phase": phase, "train_seconds": seconds,
                                      "nonfinite_in_a_row": in_a_row, **extra_meta()},
                    force=force)
    _maybe_interrupt(exp, phase, step + 1)
    if stop is not None:
      signals.check(f"{phase} step {step + 1} (checkpoint written)")
  bar.close()
  return state, seconds


def _restore_or_init(exp: Experiment, ckpt: Checkpointer, params, tx):
  """-> (state, first step, checkpoint meta, state shardings).

  Starts from the newest checkpoint that restores; a corrupted one is reported by name and
  skipped for the previous one (`Checkpointer.restore_latest`).
  """
  state, abstract, shardings = _state(exp, params, tx)
  if ckpt.latest_step() is None:
    return state, 0, {}, shardings
  target = jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
  found = ckpt.restore_latest(target)
  if found is None:
    _log.warning("no readable checkpoint in %s; the phase starts from step 0", ckpt.directory)
    return state, 0, {}, shardings
  step, restored, meta = found
  return restored, step, meta, shardings


def _ckpt(exp: Experiment, phase: str, stream=None) -> Checkpointer:
  c = exp.config.checkpoint
  return Checkpointer(workdir_lib.checkpoint_dir(exp.workdir, phase), save_every=c.every,
                      max_to_keep=c.max_to_keep,
                      data_iterator=None if stream is None else stream.iterator)


def problem_stream(exp: Experiment, phase: str, batch_size: int):
  """The phase's grain `ProblemStream` over the TFDS train split, or None (data.source='memory')."""
  if exp.train_source is None:
    return None
  from rl_jax.data import grain_source  # pylint: disable=import-outside-toplevel
  return grain_source.ProblemStream(
      exp.train_source, batch_size, seed=grain_source.sampler_seed(
          experiment.phase_seed(exp.config, phase), seeds.PHASE_TAGS[phase]),
      worker_count=exp.config.data.worker_count, read_threads=exp.config.data.read_threads)


def sft(exp: Experiment, phase: str, params, num_steps: int, writer: MetricsWriter,
        eval_fn=None) -> PhaseResult:
  """Cross-entropy on the demonstrations for `num_steps` steps, starting from `params`.

  With `sft.length_buckets` K > 1 the batches come from K length buckets (`LengthBuckets`):
  the same example distribution, padded to the bucket's longest instead of the data's.
  """
  cfg = exp.config.sft
  tx = make_optimizer(cfg.optim, num_steps)
  stream = problem_stream(exp, phase, cfg.batch_size)
  ckpt = _ckpt(exp, phase, stream)
  state, start, meta, state_sh = _restore_or_init(exp, ckpt, params, tx)
  n = len(exp.train_prompts)
  tag = seeds.PHASE_TAGS[phase]
  example = SFTBatch(exp.train_prompts[:cfg.batch_size], exp.train_prompt_mask[:cfg.batch_size],
                     exp.demo_tokens[:cfg.batch_size], exp.demo_mask[:cfg.batch_size])
  step_jit = jax.jit(functools.partial(steps_lib.sft_step, model_cfg=exp.model_cfg),
                     in_shardings=(state_sh, _batch_shardings(exp, example)),
                     out_shardings=(state_sh, parallel.replicated(exp.mesh)),
                     donate_argnums=_donate(exp))

  buckets = (LengthBuckets(exp.train_prompt_mask, exp.demo_mask, cfg.length_buckets,
                           cfg.batch_size) if cfg.length_buckets > 1 else None)

  def step_fn(state, step):
    rng = exp.host_rng(tag, step, phase=phase)
    if buckets is None:
      idx = (rng.choice(n, cfg.batch_size, replace=False) if stream is None
             else stream.next_indices())
      batch = SFTBatch(exp.train_prompts[idx], exp.train_prompt_mask[idx], exp.demo_tokens[idx],
                       exp.demo_mask[idx])
    else:  # Left-padded prompts keep their last P_b columns, completions their first T_b.
      idx, p, t = buckets.sample(rng)
      batch = SFTBatch(exp.train_prompts[idx, -p:], exp.train_prompt_mask[idx, -p:],
                       exp.demo_tokens[idx, :t], exp.demo_mask[idx, :t])
    # Multi-host: each process places only its own rows.
    return step_jit(state, parallel.put_global(batch, _batch_shardings(exp, batch)))

  state, seconds = _run_steps(exp, phase, (state, start, meta), num_steps, step_fn, writer,
                              ckpt, eval_fn=eval_fn, eval_every=cfg.eval_every)
  ckpt.close()
  return PhaseResult(state.params, seconds, num_steps)


def _injected_nan_step(exp: Experiment) -> int:
  """The RL step `config.inject_nan_at='rl:K'` poisons (K >= 1), or 0 for none."""
  spec = exp.config.inject_nan_at
  if not spec:
    return 0
  phase, _, k = spec.partition(":")
  if phase != "rl" or not k.isdigit() or int(k) < 1:
    raise ValueError(f"config.inject_nan_at={spec!r}: expected 'rl:STEP' with STEP >= 1, or ''")
  return int(k)


def _shares_buffers(tree, other) -> bool:
  """Whether an array of `tree` is an array of `other` itself (a jit output may be its input)."""
  ids = {id(a) for a in jax.tree_util.tree_leaves(other)}
  return any(id(a) in ids for a in jax.tree_util.tree_leaves(tree))


def rl(exp: Experiment, sft_params, writer: MetricsWriter, eval_fn=None, *,
       release_sft_params: bool = False) -> PhaseResult:
  """GRPO-family RL from the SFT policy, with the SFT policy as the frozen reference.

  With `release_sft_params` (the caller will not read `sft_params` again) and nothing in the
  phase reading the reference (`rl.kl_coef` = 0 and no companion keeps it), the SFT parameters'
  buffers are freed once the train state holds its own copy: a model's worth of memory less.

  The run companions (`train.companions`: the rollout history, APRIL's carry, V0, ARRoL's head,
  the process-reward scorer) keep their state in the checkpoints' meta, so a resumed run has the
  state of an uninterrupted one; each step is `rollout.collect.rollout` -> companions'
  `after_rollout` -> `steps.rl_step` -> companions' `after_step`.
  """
  cfg = exp.config.rl
  # Every iteration on a rollout is an optimizer update: the schedule counts all of them.
  tx = make_optimizer(cfg.optim, cfg.steps * cfg.num_iterations)
  stream = problem_stream(exp, "rl", cfg.prompts_per_step)
  ckpt = _ckpt(exp, "rl", stream)
  state, start, meta, state_sh = _restore_or_init(exp, ckpt, sft_params, tx)
  companions = companions_lib.build(exp, sft_params, start, meta)
  for c in companions.values():
    eval_fn = c.wrap_eval(eval_fn)
  hyper = hyper_lib.hyper_from_config(exp.config)
  params_sh = parallel.tree_shardings(sft_params, exp.mesh)
  if release_sft_params and not hyper.kl_coef and not any(
      c.keeps_sft_params for c in companions.values()) and not _shares_buffers(sft_params, state):
    jax.tree_util.tree_map(lambda a: a.delete(), sft_params)
    sft_params = params_sh = None  # rl_step reads its reference only when kl_coef > 0.
  example = collect.example_batch(exp)
  for c in companions.values():
    example = c.example(example)
  batch_sh = _batch_shardings(exp, example)
  r = example.tokens.shape[0]
  rewards_sh = _batch_shardings(exp, np.zeros((r, len(cfg.rewards)), np.float32))
  step_jit = jax.jit(
      functools.partial(steps_lib.rl_step, model_cfg=exp.model_cfg, hyper=hyper),
      in_shardings=(state_sh, params_sh, batch_sh, rewards_sh),
      out_shardings=(state_sh, parallel.replicated(exp.mesh)), donate_argnums=_donate(exp))

  nan_step = _injected_nan_step(exp)

  def step_fn(state, step):
    ctx = StepContext(exp, _compute_params(exp, state.params), step, stream,
                      companions=companions_lib.rollout_state(companions),
                      on_round=companions_lib.round_hooks(companions))
    batch, rewards, host_metrics = collect.rollout(ctx)
    for c in companions.values():
      batch, more = c.after_rollout(batch, rewards, state.params)
      host_metrics = dict(host_metrics, **more)
    if step + 1 == nan_step:  # config.inject_nan_at: a fault test of the non-finite guard.
      rewards = np.full_like(rewards, np.nan)
    # The sampler's outputs are device arrays committed to its own sharding, and jit does not
    # reshard committed arguments: move them to the step's batch sharding (multi-host: host
    # arrays, of which each process places its own rows).
    batch = parallel.put_global(batch, batch_sh)
    state, metrics = step_jit(state, sft_params, batch, parallel.put_global(rewards, rewards_sh))
    for c in companions.values():
      host_metrics = dict(host_metrics, **c.after_step(state.params, step))
    return state, dict(metrics, **host_metrics)

  def extra_meta():
    out = {}
    for c in companions.values():
      out.update(c.meta())
    return out

  def before_save(step):
    for c in companions.values():
      c.before_save(step)

  state, seconds = _run_steps(exp, "rl", (state, start, meta), cfg.steps, step_fn, writer, ckpt,
                              eval_fn=eval_fn, eval_every=cfg.eval_every, extra_meta=extra_meta,
                              before_save=before_save)
  ckpt.close()
  for c in companions.values():
    c.close()
  return PhaseResult(state.params, seconds, cfg.steps)
