"""APRIL partial rollouts, host side (docs/algorithms.md §7; `config.rl.partial`): the engine
entry 'april', switched on by `rl.partial.enabled` for round 0 of every step.

In: the run's `Carry` (companion 'april') and O = `launch_groups` groups of G rows to launch,
the carried groups first (FIFO), then fresh prompts (`plan`). Out (`april_engine`): the first
B = `prompts_per_step` complete groups in launch order, with every token's `policy_version`
(the RL step whose parameters drew it; -1 off the mask); the other O − B groups replace the
carry in place (with `partial.recycle_finished=False` the surplus complete ones are dropped).
Invariants: the carry holds whole groups; it round-trips exactly through the checkpoint meta
(`Carry.state()`, JSON); `rl.tis_cap` C > 0 weights the off-policy tokens
(`train.rl_inputs.tis_weights`). docs/methods.md describes the method.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rl_jax import parallel
from rl_jax.rl import advantages
from rl_jax.rollout import engines, planner
from rl_jax.rollout.engines import RoundKeys, Served
from rl_jax.rollout.requests import Requests, StepContext
from rl_jax.sampling import partial


def enabled(config) -> bool:
  """APRIL serves round 0: `config.rl.partial.enabled`."""
  return "partial" in config.rl and bool(config.rl.partial.enabled)


def launch_groups(config) -> int:
  """O: groups launched per step (`config.rl.partial.groups`, 0 = 2·B)."""
  return config.rl.partial.groups or 2 * config.rl.prompts_per_step


@dataclasses.dataclass
class Carry:
  """The groups carried into the next step. prompt_ids [C]; per row (C·G rows, groups
  contiguous): tokens, mask, logp, version [C·G, T] and done [C·G] (the row already ended)."""

  prompt_ids: np.ndarray
  tokens: np.ndarray
  mask: np.ndarray
  logp: np.ndarray
  version: np.ndarray
  done: np.ndarray

  @classmethod
  def empty(cls, t: int) -> "Carry":
    z = lambda dtype: np.zeros((0, t), dtype)
    return cls(np.zeros(0, np.int64), z(np.int32), z(bool), z(np.float32), z(np.int32),
               np.zeros(0, bool))

  @property
  def num_groups(self) -> int:
    return len(self.prompt_ids)

  def state(self) -> dict:
    """JSON-ready lists (float32 log-probs survive the round trip through Python floats)."""
    return {"prompt_ids": self.prompt_ids.tolist(), "tokens": self.tokens.tolist(),
            "mask": self.mask.tolist(), "logp": self.logp.astype(np.float64).tolist(),
            "version": self.version.tolist(), "done": self.done.tolist(),
            "t": int(self.tokens.shape[1])}

  @classmethod
  def from_state(cls, s: dict) -> "Carry":
    t = int(s["t"])
    arr = lambda k, dtype: np.asarray(s[k], dtype).reshape(-1, t)
    return cls(np.asarray(s["prompt_ids"], np.int64), arr("tokens", np.int32),
               arr("mask", bool), arr("logp", np.float32), arr("version", np.int32),
               np.asarray(s["done"], bool))

  def assign(self, other: "Carry") -> None:
    """Takes `other`'s contents in place (the RL phase holds this object across steps)."""
    for f in dataclasses.fields(self):
      setattr(self, f.name, getattr(other, f.name))

  def __eq__(self, other) -> bool:
    return all(np.array_equal(getattr(self, f.name), getattr(other, f.name))
               for f in dataclasses.fields(self))


def versions(prefix_version: np.ndarray, new: np.ndarray, mask: np.ndarray,
             step: int) -> np.ndarray:
  """int32 [R, T]: `step` for the tokens drawn this step (`new`), the carried version for the
  prefix, -1 off the mask."""
  v = np.where(new, step, prefix_version)
  return np.where(mask, v, -1).astype(np.int32)


def launch_ids(carried: np.ndarray, fresh: np.ndarray) -> np.ndarray:
  """Prompt ids of the O groups launched this step: the carried groups first (FIFO), then
  fresh prompts."""
  return np.concatenate([carried, fresh]).astype(np.int64)


def split_groups(complete: np.ndarray, target: int, recycle_finished: bool = True):
  """(batch, carried, dropped) group indices: the batch is the first `target` complete groups in
  launch order; the rest are carried in launch order, except that complete ones are dropped
  when `recycle_finished` is False. Raises ValueError when fewer than `target` are complete."""
  complete = np.asarray(complete, bool)
  done = np.flatnonzero(complete)
  if len(done) < target:
    raise ValueError(f"APRIL: only {len(done)} of {len(complete)} groups are complete; the "
                     f"batch needs {target}")
  chosen = done[:target]
  rest = np.setdiff1d(np.arange(len(complete)), chosen)
  if recycle_finished:
    return chosen, rest, rest[:0]
  return chosen, rest[~complete[rest]], rest[complete[rest]]


def launch_requests(carry: Carry, fresh, group_size: int) -> Requests:
  """The O groups launched this step: the carried groups first (FIFO), then `fresh` prompts,
  G rows each."""
  return Requests.of_group_size(launch_ids(carry.prompt_ids, fresh), group_size)


def check_config(config) -> None:
  """ValueError naming the field when `config.rl.partial.enabled` cannot run with the rest of
  the config: it launches >= B groups, needs the TIS correction (tis_cap > 0), dense iid groups
  without extra rounds, and prompts from memory."""
  rl, opts = config.rl, config.rl.partial
  if launch_groups(config) < rl.prompts_per_step:
    raise ValueError(f"config.rl.partial.groups={opts.groups} is below prompts_per_step="
                     f"{rl.prompts_per_step}; expected 0 or >= prompts_per_step")
  if rl.tis_cap <= 0:
    raise ValueError("config.rl.partial.enabled=True with config.rl.tis_cap=0; expected "
                     "tis_cap > 0 (carried tokens are off-policy and are corrected by truncated "
                     "importance sampling, e.g. --config.rl.tis_cap=2.0)")
  clashes = {"rollout": (rl.rollout, "iid"), "max_group_size": (rl.max_group_size, 0),
             "dynamic_sampling": (rl.dynamic_sampling, False),
             "round_rules": (tuple(rl.round_rules), ())}
  for name, (value, want) in clashes.items():
    if value != want:
      raise ValueError(f"config.rl.partial.enabled=True with config.rl.{name}={value!r}; "
                       f"expected {name}={want!r}")
  if advantages.declares(rl.advantage, "extra_rounds"):
    raise ValueError(f"config.rl.partial.enabled=True with config.rl.advantage="
                     f"{rl.advantage!r}; expected an estimator that draws no extra rounds of "
                     "its own")
  if config.data.source != "memory":
    raise ValueError(f"config.rl.partial.enabled=True with config.data.source="
                     f"{config.data.source!r}; expected 'memory'")


def plan(ctx: StepContext, round_idx: int, rng: np.random.Generator) -> Requests:
  """The O groups launched this step: the carried groups, then O − C fresh prompts drawn with
  `rng` (`planner.draw_prompts`), G rows each."""
  del round_idx
  carry = ctx.companion("april", "config.rl.partial.enabled")
  fresh = planner.draw_prompts(ctx.config, len(ctx.exp.train_prompts),
                               launch_groups(ctx.config) - carry.num_groups, rng)
  return launch_requests(carry, fresh, ctx.config.rl.group_size)


def _example(config, batch):
  """Every token's policy version [R, T] int32."""
  return batch.replace(policy_version=np.zeros(np.shape(batch.tokens), np.int32))


@engines.register("april", switch=enabled, plan=plan, example=_example, companion="april",
                  check=check_config)
def april_engine(ctx: StepContext, requests: Requests, keys: RoundKeys) -> Served:
  """One step's APRIL round over the launched groups (`plan`): the first B complete groups,
  with `policy_version`; the run's carry (companion 'april') is replaced in place by the groups
  left over."""
  exp, rl, step = ctx.exp, ctx.config.rl, ctx.step
  carry = ctx.companion("april", "config.rl.partial.enabled")
  b, g, t = rl.prompts_per_step, rl.group_size, exp.max_new_tokens
  o = launch_groups(ctx.config)
  c = carry.num_groups
  if c > o or carry.tokens.shape[1] != t:
    raise ValueError(f"APRIL carry holds {c} groups of length {carry.tokens.shape[1]}; this "
                     f"config launches {o} groups of {t} tokens (config.rl.partial.groups, "
                     "sampling.max_new_tokens changed on resume?)")
  ids = requests.prompt_ids
  rows = requests.row_prompts
  pad = (o - c) * g
  ext = lambda x, v: np.concatenate([x, np.full((pad,) + x.shape[1:], v, x.dtype)])
  out = parallel.to_host(partial.partial_generate(
      ctx.params, exp.train_prompts[rows], exp.train_prompt_mask[rows], ext(carry.tokens, 0),
      ext(carry.mask, False), ext(carry.logp, 0.0), ext(carry.done, False), keys.key,
      group_size=g, target_groups=b, **exp.sampler_kwargs()))
  tokens, mask, logp, new, done = (np.asarray(x) for x in (out.tokens, out.mask, out.logp,
                                                           out.new, out.done))
  version = versions(ext(carry.version, -1), new, mask, step)
  chosen, left, dropped = split_groups(partial.complete_groups(done, g), b,
                                       rl.partial.recycle_finished)
  by_group = lambda x, gs: x.reshape(o, g, *x.shape[1:])[gs].reshape(len(gs) * g, *x.shape[1:])
  carry.assign(Carry(ids[left], *(by_group(x, left) for x in (tokens, mask, logp, version,
                                                                done))))
  sel_tokens, sel_mask, sel_logp, sel_version = (by_group(x, chosen)
                                                 for x in (tokens, mask, logp, version))
  n_tok = max(int(sel_mask.sum()), 1)
  stale = sel_mask & (sel_version < step)
  return Served(sel_tokens, sel_mask, sel_logp, Requests.of_group_size(ids[chosen], g),
                policy_version=sel_version, metrics={
                    "rollout_tokens": int(new.sum()), "april/resumed_groups": c,
                    "april/carried_groups": len(left), "april/dropped_groups": len(dropped),
                    "april/decode_steps": int(out.steps),
                    "april/offpolicy_token_frac": float(stale.sum() / n_tok),
                    "april/max_staleness": int((step - sel_version)[sel_mask].max(initial=0))})
