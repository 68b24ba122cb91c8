"""`config.rl.process_reward`: step rewards for the RL batch, and the online PRM updates.

    scorer = ProcessScorer.from_config(exp, sft_params)          # None for 'none'
    batch, metrics = scorer.score(batch, rewards, policy_params)  # fills step_of, step_rewards

`score` adds the per-token step ids and step rewards to the batch; the process estimator
(`rl.process_rewards`) turns them and the outcome advantage into token advantages. 'pav' reads a
frozen PRM from `config.rl.process.prm_dir`; 'oracle' the task's step checker
(`value.prm.oracle`); 'prime' and 'oprl' train an implicit PRM online, one step per batch after
its rewards. That PRM (parameters and AdamW state) is checkpointed in WORKDIR/checkpoints/rl_prm
at the RL checkpoints' steps, so a resumed run continues as the uninterrupted one does.
docs/algorithms.md §5 describes each method.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl_jax.data.batching import decode_completions
from rl_jax.rl import advantages, logprobs
from rl_jax.rl import process_rewards as pr
from rl_jax.train_state import TrainState
from rl_jax.value.prm import model as prm_lib
from rl_jax.value.prm import oracle as oracle_lib
from rl_jax.value.prm import pav as pav_lib
from rl_jax.value.prm import segments as steps_lib

_log = logging.getLogger(__name__)

PROCESS_REWARDS = ("none", "pav", "prime", "oprl", "oracle")
NORMS = ("batch", "none")
BASELINES = ("rloo", "mean")


def check_config(config) -> None:
  """Raises ValueError naming the field for bad `config.rl.process_reward` options."""
  rl = config.rl
  kind = rl.process_reward
  if kind not in PROCESS_REWARDS:
    raise ValueError(f"config.rl.process_reward={kind!r}; expected one of {PROCESS_REWARDS}")
  if kind == "none":
    return
  if rl.max_group_size and pr.declares(kind, "online"):
    raise ValueError(f"config.rl.process_reward={kind!r} with max_group_size="
                     f"{rl.max_group_size}; the online PRMs ('prime', 'oprl') need the dense "
                     "B x G batch (max_group_size=0); 'pav' and 'oracle' score each row alone "
                     "and also take ragged batches (allocators)")
  c = rl.process
  if pr.declares(kind, "adds_progress"):
    if not (isinstance(c.alpha, (int, float)) and math.isfinite(c.alpha) and c.alpha >= 0):
      raise ValueError(f"config.rl.process.alpha={c.alpha!r}: process_reward={kind!r} needs "
                       "alpha, a finite number >= 0 (no default: docs/algorithms.md §5.1)")
  if kind == "oracle" and (c.delimiter != "\n" or tuple(c.step_token_ids)):
    raise ValueError(f"config.rl.process.delimiter={c.delimiter!r}, step_token_ids="
                     f"{tuple(c.step_token_ids)!r}: process_reward='oracle' grades the step "
                     "checker's lines; expected delimiter='\\n' and step_token_ids=()")
  if kind == "pav":
    if not c.prm_dir:
      raise ValueError("config.rl.process.prm_dir is empty; process_reward='pav' needs a PRM "
                       "directory written by experiments.train_prm")
  if not c.beta > 0:
    raise ValueError(f"config.rl.process.beta={c.beta!r}: expected a number > 0")
  if not c.prm_lr > 0 or not c.prm_grad_clip >= 0:
    raise ValueError(f"config.rl.process.prm_lr={c.prm_lr!r} / prm_grad_clip="
                     f"{c.prm_grad_clip!r}: expected lr > 0 and clip >= 0")
  if c.norm not in NORMS:
    raise ValueError(f"config.rl.process.norm={c.norm!r}; expected one of {NORMS}")
  if c.oprl_baseline not in BASELINES:
    raise ValueError(f"config.rl.process.oprl_baseline={c.oprl_baseline!r}; expected one of "
                     f"{BASELINES}")
  if c.max_steps < 1:
    raise ValueError(f"config.rl.process.max_steps={c.max_steps}: expected an integer >= 1")
  if pr.declares(kind, "per_row_outcome") and (advantages.declares(rl.advantage, "token_level")
                                            or advantages.declares(rl.advantage, "multi_reward")):
    raise ValueError(f"config.rl.process_reward={kind!r} adds to a per-row outcome advantage; "
                     f"config.rl.advantage={rl.advantage!r} is not one")


def estimator_options(config) -> tuple:
  """The sorted (key, value) options of the registered process estimator (`RLHyper`)."""
  c, kind = config.rl.process, config.rl.process_reward
  opts = {"none": {}, "pav": {"alpha": float(c.alpha)}, "prime": {"norm": c.norm},
          "oprl": {"weight": float(c.oprl_weight), "baseline": c.oprl_baseline},
          "oracle": {"alpha": float(c.alpha)}}[kind]
  return tuple(sorted(opts.items()))


@functools.partial(jax.jit, static_argnames=("cfg",))
def _logp(params, prompt, prompt_mask, tokens, mask, *, cfg):
  return logprobs.completion_logprobs(cfg, params, prompt, prompt_mask, tokens, mask)


def _prime_loss(params, ref_logp, batch, outcome, valid, *, cfg, beta):
  logp = logprobs.completion_logprobs(cfg, params, *batch)
  ratio = jnp.sum(jnp.where(batch[3], logp - ref_logp, 0.0), -1)
  return pr.prime_prm_loss(ratio, outcome, valid, beta)


def _oprl_loss(params, old_logp, batch, step_of, outcome, valid, *, cfg, beta, group, h):
  logp = logprobs.completion_logprobs(cfg, params, *batch)
  mask = batch[3]
  sums = pr.step_sums(logp - old_logp, step_of, mask)[..., :h]
  present = jnp.any(jax.nn.one_hot(step_of, h, dtype=bool) & mask[..., None], axis=-2)
  r = lambda x: x.reshape((-1, group) + x.shape[1:])
  return pr.oprl_prm_loss(r(sums), r(present), r(outcome), r(valid), beta)


@functools.partial(jax.jit, static_argnames=("loss", "cfg", "beta", "group", "h"))
def _update(state: TrainState, *args, loss: str, cfg, beta: float, group: int = 1, h: int = 1):
  fn = (functools.partial(_prime_loss, cfg=cfg, beta=beta) if loss == "prime" else
        functools.partial(_oprl_loss, cfg=cfg, beta=beta, group=group, h=h))
  value, grads = jax.value_and_grad(fn)(state.params, *args)
  return state.apply_gradients(grads), value


class ProcessScorer:
  """Fills a batch's `step_of` / `step_rewards` for `config.rl.process_reward` (see the module
  docstring) and updates the online PRM."""

  def __init__(self, exp, sft_params: Any):
    self.exp, self.config = exp, exp.config
    self.kind = exp.config.rl.process_reward
    self.ckpt = None  # the online PRM's Checkpointer (attach_checkpointer)
    c = exp.config.rl.process
    tok = exp.tokenizer
    self.delims = (tuple(int(i) for i in c.step_token_ids)
                   or steps_lib.delimiter_ids(tok, c.delimiter))
    self.ignore = (tok.eos_id, tok.pad_id)
    self.max_steps = c.max_steps
    if self.kind == "pav":
      self.spec, self.prm_params, _ = prm_lib.load(c.prm_dir)
      self.delims = self.spec.delimiters  # the steps the PAV was trained on
      if self.spec.model.vocab_size != exp.model_cfg.vocab_size:
        raise ValueError(f"config.rl.process.prm_dir={c.prm_dir!r} holds a PRM of vocab_size "
                         f"{self.spec.model.vocab_size}; the policy has "
                         f"{exp.model_cfg.vocab_size}")
    elif self.kind == "oracle":
      if not hasattr(exp.task, "check_steps"):
        raise ValueError(f"config.rl.process_reward='oracle' needs a task with a step checker "
                         f"(task.name='ladder'); config.task.name={exp.config.task.name!r} has "
                         "none")
      self.examples = oracle_lib.Examples(exp.task, exp.train_prompts, exp.train_prompt_mask)
    else:
      tx = optax.chain(optax.clip_by_global_norm(c.prm_grad_clip) if c.prm_grad_clip else
                       optax.identity(), optax.adamw(c.prm_lr, weight_decay=0.0))
      self.ref = sft_params
      self.state = TrainState.create(jax.tree_util.tree_map(jnp.array, sft_params), tx)

  @property
  def online(self) -> bool:
    """Whether the PRM trains during RL ('prime', 'oprl'): then it is checkpointed."""
    return pr.declares(self.kind, "online")

  def attach_checkpointer(self, ckpt, start: int) -> None:
    """Checkpoints the online PRM with `ckpt` (a `rl_jax.checkpoint.Checkpointer`) from now on,
    and restores the one saved at `start` when the RL phase resumes from step `start` > 0.

    A resumed run whose PRM checkpoint at `start` is missing (a run from before the PRM was
    checkpointed, or a deleted directory) logs a warning naming the directory and restarts the
    PRM from the SFT policy.
    """
    self.ckpt = ckpt
    if start <= 0:
      return
    if start not in ckpt.all_steps():
      _log.warning("no online PRM checkpoint for step %d in %s (steps there: %s): the PRM "
                   "restarts from the SFT policy, so this run no longer equals an "
                   "uninterrupted one", start, ckpt.directory, ckpt.all_steps())
      return
    self.state, _ = ckpt.restore(start, self.state)

  def save(self, step: int) -> None:
    """Writes the online PRM's state at `step` (called just before the RL checkpoint)."""
    self.ckpt.maybe_save(step, self.state, {"phase": "rl_prm", "kind": self.kind}, force=True)

  def close(self) -> None:
    if self.ckpt is not None:
      self.ckpt.close()

  @classmethod
  def from_config(cls, exp, sft_params):
    return None if exp.config.rl.process_reward == "none" else cls(exp, sft_params)

  def _segment(self, batch):
    return steps_lib.segment(batch.tokens, batch.mask, self.delims, max_steps=self.max_steps,
                             ignore_ids=self.ignore, eos_id=self.exp.tokenizer.eos_id)

  def _oracle(self, batch, valid: np.ndarray):
    """'oracle': the step checker's progress (`value.prm.oracle`) on each step's end token."""
    segs = self._segment(batch)
    texts = decode_completions(self.exp.tokenizer, batch.tokens, batch.mask)
    examples = self.examples(batch.prompt_tokens, batch.prompt_mask)
    checks = [self.exp.task.check_steps(t, e) for t, e in zip(texts, examples)]
    prog = oracle_lib.progress(checks, np.asarray(segs.num_steps), self.max_steps)
    prog[~valid] = 0.0
    sm = np.asarray(segs.step_mask)
    sr = np.zeros(batch.tokens.shape, np.float32)
    rows = np.broadcast_to(np.arange(len(sr))[:, None], prog.shape)
    sr[rows[sm], np.asarray(segs.end_pos)[sm]] = prog[sm]
    wrong = (prog < 0).any(axis=1)
    return batch.replace(step_of=np.asarray(segs.step_of), step_rewards=sr), {
        "process/progress_abs": float(np.abs(prog[sm]).mean()) if sm.any() else 0.0,
        "process/wrong_step_rows": float(wrong[valid].mean()) if valid.any() else 0.0}

  def score(self, batch, rewards: np.ndarray, policy_params: Any):
    """(batch with step_of / step_rewards, host metrics); updates the online PRM after."""
    if self.kind == "oracle":
      return self._oracle(batch, np.asarray(batch.valid))
    seqs = (batch.prompt_tokens, batch.prompt_mask, batch.tokens, batch.mask)
    cfg = self.exp.model_cfg
    c = self.config.rl.process
    r = np.asarray(rewards, np.float32)
    r = r if r.ndim == 1 else r @ (np.asarray(self.config.rl.reward_weights, np.float32)
                                   if self.config.rl.reward_weights else np.ones(r.shape[1]))
    valid = np.asarray(batch.valid)
    if self.kind == "pav":
      segs = self._segment(batch)
      vals = prm_lib.predict(self.prm_params, *seqs, cfg=self.spec.model)
      v0, q = steps_lib.gather_steps(vals, segs)
      prog = pav_lib.progress(v0, q, segs.step_mask)
      sr = np.zeros(batch.tokens.shape, np.float32)
      rows = np.broadcast_to(np.arange(len(sr))[:, None], prog.shape)
      sm = np.asarray(segs.step_mask)
      sr[rows[sm], np.asarray(segs.end_pos)[sm]] = np.asarray(prog)[sm]
      out = batch.replace(step_of=np.asarray(segs.step_of), step_rewards=sr)
      return out, {"process/progress_abs": float(np.abs(np.asarray(prog)[sm]).mean()),
                   "process/v0_mean": float(np.asarray(v0).mean())}
    logp = _logp(self.state.params, *seqs, cfg=cfg)
    m = np.asarray(batch.mask)
    if self.kind == "prime":
      ref = _logp(self.ref, *seqs, cfg=cfg)
      ratio = np.where(m, np.asarray(logp - ref), 0.0).astype(np.float32)
      step_of = np.broadcast_to(np.arange(m.shape[1], dtype=np.int32), m.shape).copy()
      self.state, loss = _update(self.state, ref, seqs, r, valid, loss="prime", cfg=cfg,
                                 beta=float(c.beta))
    else:
      old = _logp(policy_params, *seqs, cfg=cfg)
      ratio = np.where(m, float(c.beta) * np.asarray(logp - old), 0.0).astype(np.float32)
      step_of = np.asarray(self._segment(batch).step_of)
      self.state, loss = _update(self.state, old, seqs, step_of, r, valid, loss="oprl", cfg=cfg,
                                 beta=float(c.beta), group=self.config.rl.group_size,
                                 h=self.max_steps)
    out = batch.replace(step_of=step_of, step_rewards=ratio)
    return out, {"process/prm_loss": float(loss),
                 "process/reward_abs": float(np.abs(ratio[m]).mean()) if m.any() else 0.0}
