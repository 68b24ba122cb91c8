"""Run companions: per-method state that outlives an RL step, behind one small interface.

A companion is what a method keeps across steps and checkpoints: the rollout history, APRIL's
carried groups, V0's online prior, the oracle prior's Monte Carlo estimator, ARRoL's quality
head, the process-reward scorer (and its online PRM). In: `build(exp, sft_params, start_step,
meta)` makes every companion the config turns on (a factory registered in `COMPANIONS`,
`make(setup) -> Companion | None`; an engine's companion is made when a config's engine entry
declares it, `Engine.companion`). The RL phase (`train.phases.rl`) then calls the same hooks on
each, never naming a method:

* `load_meta(meta)` / `meta()`: state in the RL checkpoint's JSON meta (atomic with the policy);
  invariant: a resumed run continues exactly;
* `rollout_state()`: what the rollout boxes read by the companion's name (None = nothing);
* `after_round(ctx, round)` -> host metrics: after each generation round is scored
  (`rollout.engines.serve`; e.g. ARRoL's head trains on the survivors);
* `example(batch)`: fields the companion adds to every RL batch (the jitted step's shapes);
* `after_rollout(batch, rewards, params)` -> (batch, host metrics): e.g. per-step rewards;
* `after_step(params, step)` -> host metrics: e.g. V0's support refresh and training;
* `wrap_eval(eval_fn)`, `before_save(step)`, `close()`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Optional

import numpy as np

from rl_jax import parallel, workdir
from rl_jax.checkpoint import Checkpointer
from rl_jax.registry import Registry
from rl_jax.rollout import april, engines
from rl_jax.value import priors, quality_head
from rl_jax.value.history import RolloutHistory
from rl_jax.value.prm import process
from rl_jax.value.v0 import run as run_v0

COMPANIONS = Registry("run companion")


@dataclasses.dataclass(frozen=True)
class Setup:
  """What a companion factory may read: the run's `exp` (`experiment.Experiment`), the SFT
  policy's parameters `sft_params`, the RL phase's first step `start_step` (0 for a fresh phase)
  and `built`, the companions made before it (registration order)."""

  exp: Any
  sft_params: Any
  start_step: int
  built: dict


class Companion:
  """The interface; every hook's default does nothing. `keeps_sft_params`: the companion holds
  `Setup.sft_params` for the whole phase (the phase then keeps them alive)."""

  keeps_sft_params = False

  def load_meta(self, meta: dict) -> None:
    del meta

  def meta(self) -> dict:
    return {}

  def rollout_state(self) -> Any:
    return None

  def after_round(self, ctx, rnd) -> dict:
    """Host metrics after round `rnd` (`rollout.engines.Round`) of step `ctx.step` is scored."""
    del ctx, rnd
    return {}

  def example(self, batch):
    return batch

  def after_rollout(self, batch, rewards: np.ndarray, params) -> tuple[Any, dict]:
    del rewards, params
    return batch, {}

  def after_step(self, params, step: int) -> dict:
    del params, step
    return {}

  def wrap_eval(self, eval_fn: Optional[Callable]) -> Optional[Callable]:
    return eval_fn

  def before_save(self, step: int) -> None:
    del step

  def close(self) -> None:
    pass


def build(exp, sft_params, start_step: int, meta: dict) -> dict[str, Companion]:
  """The config's companions by name, in registration order, each with its state restored from
  the checkpoint `meta` ({} for a fresh phase)."""
  built: dict[str, Companion] = {}
  for name, make in COMPANIONS.entries():
    companion = make(Setup(exp, sft_params, start_step, dict(built)))
    if companion is not None:
      companion.load_meta(meta)
      built[name] = companion
  return built


def round_hooks(companions: dict[str, Companion]) -> tuple[Callable, ...]:
  """The `after_round` hooks of the companions that define one (`StepContext.on_round`)."""
  return tuple(c.after_round for c in companions.values()
               if type(c).after_round is not Companion.after_round)


def rollout_state(companions: dict[str, Companion]) -> dict[str, Any]:
  """{name: state} of the companions the rollout boxes read."""
  out = {name: c.rollout_state() for name, c in companions.items()}
  return {name: s for name, s in out.items() if s is not None}


class History(Companion):
  """Every round's attempts and successes per prompt and step (`value.history`): read by the
  allocators, the round rules and V0; checkpointed; written to WORKDIR/history.jsonl at the end."""

  def __init__(self, path: str):
    self.path = path
    self.history = RolloutHistory()

  def load_meta(self, meta):
    if "history" in meta:
      self.history = RolloutHistory.from_state(meta["history"])

  def meta(self):
    return {"history": self.history.state()}

  def rollout_state(self):
    return self.history

  def close(self):
    if parallel.is_primary():
      self.history.to_jsonl(self.path)


class _Holding(Companion):
  """A companion whose state is one object `run` with its own `meta()` / `load_meta()`, which
  the rollout boxes read by the companion's name."""

  def __init__(self, run):
    self.run = run

  def load_meta(self, meta):
    self.run.load_meta(meta)

  def meta(self):
    return self.run.meta()

  def rollout_state(self):
    return self.run


class V0(_Holding):
  """V0 in the run (`value.v0.run.RunV0`; config.value.v0, or 'v0' named as a prior): refreshed
  from the history after every step, checkpointed, calibrated at every evaluation; the prior
  registry's 'v0' entry reads it by name."""

  def __init__(self, run, history: History):
    super().__init__(run)
    self.history = history

  def after_step(self, params, step):
    return self.run.after_step(self.history.history, params, step)

  def wrap_eval(self, eval_fn):
    return self.run.wrap_eval(eval_fn)


class April(Companion):
  """APRIL's carried groups (`rollout.april.Carry`, config.rl.partial), served by the 'april'
  engine, which replaces them in place."""

  def __init__(self, max_new_tokens: int):
    self.carry = april.Carry.empty(max_new_tokens)

  def load_meta(self, meta):
    if "april" in meta:
      self.carry = april.Carry.from_state(meta["april"])

  def meta(self):
    return {"april": self.carry.state()}

  def rollout_state(self):
    return self.carry


class Arrol(_Holding):
  """ARRoL's online quality head and engine options (`value.quality_head.ArrolRun`), read by the
  'arrol' engine; after every round that engine served (one with `features`), the head trains
  on the survivors' raw rewards."""

  def after_round(self, ctx, rnd):
    del ctx
    return {} if rnd.features is None else self.run.observe(rnd.features, rnd.rewards)


class Oracle(Companion):
  """The 'oracle' prior's Monte Carlo estimator (`value.priors.OracleMC`), read by the prior
  registry's 'oracle' entry; its samples are reported per step (`oracle/mc_tokens`,
  `oracle/mc_rows`), never as rollout tokens. It keeps no state across steps but the step,
  which the phase's start step and `after_step` give."""

  def __init__(self, mc):
    self.mc = mc

  def rollout_state(self):
    return self.mc

  def after_rollout(self, batch, rewards, params):
    del rewards, params
    return batch, self.mc.take_counts()

  def after_step(self, params, step):
    del params
    self.mc.start_step(step + 1)
    return {}


class Process(Companion):
  """Per-step rewards in the RL batch (`value.prm.process.ProcessScorer`, config.rl.
  process_reward); an online PRM (prime, oprl) is checkpointed beside the policy."""

  keeps_sft_params = True  # The scorer's policy-side model starts from them.

  def __init__(self, scorer, ckpt: Optional[Checkpointer], start_step: int):
    self.scorer = scorer
    if scorer.online:
      scorer.attach_checkpointer(ckpt, start_step)

  def example(self, batch):
    r, t = np.asarray(batch.tokens).shape
    return batch.replace(step_of=np.zeros((r, t), np.int32),
                         step_rewards=np.zeros((r, t), np.float32))

  def after_rollout(self, batch, rewards, params):
    return self.scorer.score(batch, rewards, params)

  def before_save(self, step):
    if self.scorer.online:
      self.scorer.save(step)

  def close(self):
    self.scorer.close()


# ------------------------------------------------------------------------------ the registry
# make(setup: Setup) -> Companion | None, in this order.


@COMPANIONS.register("history")
def _history(setup: Setup):
  return History(os.path.join(setup.exp.workdir, workdir.HISTORY_FILE))


@COMPANIONS.register("v0")
def _v0(setup: Setup):
  exp = setup.exp
  return (V0(run_v0.RunV0.create(exp), setup.built["history"]) if run_v0.wanted(exp.config)
          else None)


@COMPANIONS.register("oracle")
def _oracle(setup: Setup):
  exp = setup.exp
  return (Oracle(priors.OracleMC(exp, setup.start_step)) if priors.uses(exp.config, "oracle")
          else None)


def _declared(setup: Setup, name: str) -> bool:
  """Whether one of the config's engine entries declares the companion `name`."""
  return any(e.companion == name for e in engines.engines_of(setup.exp.config))


@COMPANIONS.register("april")
def _april(setup: Setup):
  return April(setup.exp.max_new_tokens) if _declared(setup, "april") else None


@COMPANIONS.register("arrol")
def _arrol(setup: Setup):
  return Arrol(quality_head.ArrolRun(setup.exp)) if _declared(setup, "arrol") else None


@COMPANIONS.register("process")
def _process(setup: Setup):
  exp, rl = setup.exp, setup.exp.config.rl
  if "process_reward" not in rl or rl.process_reward == "none":
    return None
  scorer = process.ProcessScorer(exp, setup.sft_params)
  c = exp.config.checkpoint
  ckpt = (Checkpointer(workdir.checkpoint_dir(exp.workdir, "rl_prm"), save_every=c.every,
                       max_to_keep=c.max_to_keep) if scorer.online else None)
  return Process(scorer, ckpt, setup.start_step)
