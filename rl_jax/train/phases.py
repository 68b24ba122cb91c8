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
import os
import time
from typing import Any, Callable, Optional

import jax
import numpy as np

from rl_jax import models, parallel
from rl_jax.checkpoint import Checkpointer
from rl_jax.data.batching import LengthBuckets
from rl_jax.metrics import MetricsWriter, ProgressBar
from rl_jax.train import april, experiment, planner, rollouts, signals
from rl_jax.train import steps as steps_lib
from rl_jax.train.experiment import Experiment
from rl_jax.train.state import TrainState, make_optimizer
from rl_jax.types import Rollout, SFTBatch, Tree
from rl_jax.value import run_v0
from rl_jax.value.history import RolloutHistory

_log = logging.getLogger(__name__)

# Integer tags that separate the random streams of different phases.
PHASE_TAGS = {"sft": 1, "rl": rollouts.RL_TAG, "sft_more": 3, "eval": 4,
              "rl_round": rollouts.EXTRA_ROUND_TAG, "rl_extend": rollouts.EXTEND_TAG,
              "rl_alloc": rollouts.allocate.ALLOC_TAG}


# The RL phase's rollout history, exported when the phase ends (`value.history` JSON lines).
HISTORY_FILE = "history.jsonl"


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
  cfg, params = models.load_hf(path, dtype=exp.model_cfg.dtype,
                               param_dtype=exp.master_cfg.param_dtype,
                               scan_layers=exp.model_cfg.scan_layers)
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
  checkpointed. A SIGTERM / SIGINT (`signals.catch`) saves the step just finished and raises
  `signals.Preempted`.
  """
  state, start, meta = state_and_meta
  seconds = float(meta.get("train_seconds", 0.0))
  in_a_row = int(meta.get("nonfinite_in_a_row", 0))
  limit = exp.config.max_nonfinite_in_a_row
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


def checkpoint_dir(workdir: str, phase: str) -> str:
  """Where a run keeps the checkpoints of `phase` (`config.init_from` reads the 'sft' ones)."""
  return os.path.join(workdir, "checkpoints", phase)


def _ckpt(exp: Experiment, phase: str, stream=None) -> Checkpointer:
  c = exp.config.checkpoint
  return Checkpointer(checkpoint_dir(exp.workdir, phase), save_every=c.every,
                      max_to_keep=c.max_to_keep,
                      data_iterator=None if stream is None else stream.iterator)


def problem_stream(exp: Experiment, phase: str, batch_size: int):
  """The phase's grain `ProblemStream` over the TFDS train split, or None (data.source='memory')."""
  if exp.train_source is None:
    return None
  from rl_jax.data import grain_source  # pylint: disable=import-outside-toplevel
  return grain_source.ProblemStream(
      exp.train_source, batch_size, seed=grain_source.sampler_seed(
          experiment.phase_seed(exp.config, phase), PHASE_TAGS[phase]),
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
  tag = PHASE_TAGS[phase]
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


def rl_hyper(exp: Experiment) -> steps_lib.RLHyper:
  return hyper_from_config(exp.config)


def _advantage_options(config) -> dict:
  """`config.rl.advantage_options`, plus `v05.scale_by_std` / `v05.std_eps` for 'v05'."""
  opts = config.rl.advantage_options.to_dict()
  if config.rl.advantage == "v05":
    opts.setdefault("scale_by_std", bool(config.rl.v05.scale_by_std))
    opts.setdefault("eps", float(config.rl.v05.std_eps))
  return opts


def hyper_from_config(config) -> steps_lib.RLHyper:
  """`config.rl` (and the rollout temperature) -> the static RLHyper of `steps.rl_step`."""
  rl = config.rl
  return steps_lib.RLHyper(
      group_size=rl.group_size, advantage=rl.advantage,
      advantage_options=tuple(sorted(_advantage_options(config).items())),
      loss=rl.loss, clip_low=rl.clip_low, clip_high=rl.clip_high, clip_ratio_c=rl.clip_ratio_c,
      kl_coef=rl.kl_coef, kl_kind=rl.kl_kind, kl_in_reward=rl.kl_in_reward,
      aggregation=rl.aggregation, temperature=config.sampling.temperature,
      sft_coef=rl.sft_coef, reward_weights=tuple(float(w) for w in rl.reward_weights),
      num_minibatches=rl.num_minibatches, num_iterations=rl.num_iterations, tis_cap=rl.tis_cap,
      shared_prompts=rl.shared_prompts,
      num_groups=rl.prompts_per_step if planner.is_ragged(config) else 0,
      max_group_size=rl.max_group_size, **_process_hyper(config))


def _process_hyper(config) -> dict:
  """RLHyper's process-reward fields (none for configs without `rl.process_reward`)."""
  if "process_reward" not in config.rl or config.rl.process_reward == "none":
    return {}
  from rl_jax.value import process  # pylint: disable=import-outside-toplevel
  return {"process_reward": config.rl.process_reward,
          "process_options": process.estimator_options(config)}


def rl(exp: Experiment, sft_params, writer: MetricsWriter, eval_fn=None) -> PhaseResult:
  """GRPO-family RL from the SFT policy, with the SFT policy as the frozen reference.

  The phase keeps the rollout history (`value.history.RolloutHistory`: every round's attempts
  and successes per prompt and step) in its checkpoints' meta, so a resumed run has the history
  of an uninterrupted one, and writes it to WORKDIR/history.jsonl when the phase ends. With
  V0 (`value.run_v0`), V0's state rides in the same meta and its calibration joins every
  evaluation's metrics; so does ARRoL's quality head (`value.quality_head`, rollout='arrol').
  """
  cfg = exp.config.rl
  rollouts.check_config(exp.config)
  # Every iteration on a rollout is an optimizer update: the schedule counts all of them.
  tx = make_optimizer(cfg.optim, cfg.steps * cfg.num_iterations)
  stream = problem_stream(exp, "rl", cfg.prompts_per_step)
  ckpt = _ckpt(exp, "rl", stream)
  state, start, meta, state_sh = _restore_or_init(exp, ckpt, sft_params, tx)
  history = (RolloutHistory.from_state(meta["history"]) if "history" in meta
             else RolloutHistory())
  carry = None  # APRIL's carried groups (config.rl.partial), checkpointed in the same meta
  if april.enabled(exp.config):
    carry = (april.Carry.from_state(meta["april"]) if "april" in meta
             else april.Carry.empty(exp.max_new_tokens))
  v0 = run_v0.RunV0.build(exp)  # V0 (config.value.v0), its state in the same meta
  if v0 is not None:
    v0.load_meta(meta)
    eval_fn = v0.wrap_eval(eval_fn)
  from rl_jax.value import quality_head  # pylint: disable=import-outside-toplevel
  arrol_run = quality_head.ArrolRun.build(exp)  # ARRoL's online head (rollout='arrol')
  if arrol_run is not None:
    arrol_run.load_meta(meta)
  hyper = rl_hyper(exp)
  params_sh = parallel.tree_shardings(sft_params, exp.mesh)
  r = planner.batch_rows(exp.config)
  p, t = exp.train_prompts.shape[1], exp.max_new_tokens
  example = Rollout(prompt_tokens=np.zeros((r, p), np.int32), prompt_mask=np.zeros((r, p), bool),
                    tokens=np.zeros((r, t), np.int32), mask=np.zeros((r, t), bool),
                    logp=np.zeros((r, t), np.float32), group=np.zeros(r, np.int32),
                    valid=np.zeros(r, bool))
  if cfg.advantage == "v05":  # the rollout carries (p0, w) per row (round_rules.V05Extra)
    example = example.replace(prior=np.zeros((r, 2), np.float32))
  if cfg.rollout == "eptree":  # the rollout carries its tree (for the tree advantages)
    n = rollouts.eptree_options(exp.config).max_nodes
    b = cfg.prompts_per_step
    example = example.replace(tree=Tree(
        parent=np.zeros((b, n), np.int32), depth=np.zeros((b, n), np.int32),
        leaf_node=np.zeros((r, n), bool), node_of=np.zeros((r, t), np.int32)))
  if carry is not None:  # the rollout carries every token's policy version
    example = example.replace(policy_version=np.zeros((r, t), np.int32))
  scorer = None
  if "process_reward" in cfg and cfg.process_reward != "none":  # step rewards in the batch
    from rl_jax.value import process  # pylint: disable=import-outside-toplevel
    scorer = process.ProcessScorer(exp, sft_params)
    if scorer.online:  # the online PRM (prime, oprl) is checkpointed beside the policy
      c = exp.config.checkpoint
      scorer.attach_checkpointer(Checkpointer(checkpoint_dir(exp.workdir, "rl_prm"),
                                              save_every=c.every, max_to_keep=c.max_to_keep),
                                 start)
    example = example.replace(step_of=np.zeros((r, t), np.int32),
                              step_rewards=np.zeros((r, t), np.float32))
  batch_sh = _batch_shardings(exp, example)
  rewards_sh = _batch_shardings(exp, np.zeros((r, len(cfg.rewards)), np.float32))
  step_jit = jax.jit(
      functools.partial(steps_lib.rl_step, model_cfg=exp.model_cfg, hyper=hyper),
      in_shardings=(state_sh, params_sh, batch_sh, rewards_sh),
      out_shardings=(state_sh, parallel.replicated(exp.mesh)), donate_argnums=_donate(exp))

  nan_step = _injected_nan_step(exp)

  def step_fn(state, step):
    batch, rewards, host_metrics = rollouts.rollout(exp, _compute_params(exp, state.params), step,
                                                    stream, history, carry)
    if scorer is not None:
      batch, process_metrics = scorer.score(batch, rewards, state.params)
      host_metrics = dict(host_metrics, **process_metrics)
    if step + 1 == nan_step:  # config.inject_nan_at: a fault test of the non-finite guard.
      rewards = np.full_like(rewards, np.nan)
    # The sampler's outputs are device arrays committed to its own sharding, and jit does not
    # reshard committed arguments: move them to the step's batch sharding (multi-host: host
    # arrays, of which each process places its own rows).
    batch = parallel.put_global(batch, batch_sh)
    state, metrics = step_jit(state, sft_params, batch, parallel.put_global(rewards, rewards_sh))
    if v0 is not None:  # support refresh; training every config.value.v0.train_every steps
      host_metrics = dict(host_metrics, **v0.after_step(history, state.params, step))
    return state, dict(metrics, **host_metrics)

  state, seconds = _run_steps(exp, "rl", (state, start, meta), cfg.steps, step_fn, writer, ckpt,
                              eval_fn=eval_fn, eval_every=cfg.eval_every,
                              extra_meta=lambda: {"history": history.state(),
                                                  **(v0.meta() if v0 is not None else {}),
                                                  **({} if carry is None
                                                     else {"april": carry.state()}),
                                                  **(arrol_run.meta() if arrol_run else {})},
                              before_save=(scorer.save if scorer is not None and scorer.online
                                           else None))
  ckpt.close()
  if scorer is not None:
    scorer.close()
  if parallel.is_primary():
    history.to_jsonl(os.path.join(exp.workdir, HISTORY_FILE))
  return PhaseResult(state.params, seconds, cfg.steps)
