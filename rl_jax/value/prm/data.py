"""Data for PRMs from a run's policy: sampled completions, their labels, and a fitting loop.

    comps = sample(exp, params, prompt_ids, num_samples, key)          # the policy's completions
    labels, weights = mc_labels(exp, params, comps, steps, n_mc, key)   # PAV: Monte Carlo Q^π
    labels, weights = outcome_labels(comps, steps)                      # ORM: outcome at each end
    labels, weights = truth_labels(exp, comps, steps)                   # the step checker's labels
    params, log = fit(spec, params, comps, labels, weights, ...)        # optax, weighted BCE

`Completions` holds host arrays only; the prompts are the rows of `exp.train_prompts` or
`exp.heldout_prompts` named by `ids` (`split`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import jax
import ml_collections
import numpy as np

from rl_jax import sampling
from rl_jax.data.batching import decode_completions
from rl_jax.train_state import TrainState, make_optimizer
from rl_jax.value.prm import model as prm_lib
from rl_jax.value.prm import judge, pav
from rl_jax.value.prm import segments as steps_lib


@dataclasses.dataclass
class Completions:
  """R = len(ids) * G sampled completions; row r answers problem `ids[r // G]` of `split`."""

  split: str  # 'train' or 'heldout'
  ids: np.ndarray  # [N] problem indices
  group: int  # G samples per problem
  prompt: np.ndarray  # [R, P]
  prompt_mask: np.ndarray
  tokens: np.ndarray  # [R, T]
  mask: np.ndarray
  texts: list
  rewards: np.ndarray  # [R]

  def examples(self, exp) -> list:
    data = exp.task.train if self.split == "train" else exp.task.heldout
    return [data[i] for i in np.repeat(self.ids, self.group)]


def _prompts(exp, split: str):
  if split == "train":
    return exp.train_prompts, exp.train_prompt_mask
  if split == "heldout":
    return exp.heldout_prompts, exp.heldout_prompt_mask
  raise ValueError(f"split={split!r}; expected 'train' or 'heldout'")


def sample(exp, params, split: str, ids: Sequence[int], num_samples: int, key: jax.Array, *,
           temperature: float | None = None, batch_size: int = 128) -> Completions:
  """`num_samples` completions of each problem `ids` of `split` from `params`, scored by the task
  (`task.score`, the run's reward)."""
  ids = np.asarray(ids, np.int64)
  prompts, pmask = _prompts(exp, split)
  s = exp.config.sampling
  strategy = sampling.Sampling(temperature=s.temperature if temperature is None else temperature,
                               top_k=s.top_k, top_p=s.top_p)
  toks, masks = [], []
  for j, start in enumerate(range(0, len(ids), batch_size)):
    chunk = ids[start:start + batch_size]
    k = len(chunk)
    if k < batch_size and len(ids) > batch_size:
      chunk = np.concatenate([chunk, np.repeat(chunk[-1:], batch_size - k)])
    out = sampling.generate(params, prompts[chunk], pmask[chunk], jax.random.fold_in(key, j),
                            num_samples=num_samples, **exp.sampler_kwargs(strategy))
    toks.append(np.asarray(out.tokens)[:k * num_samples])
    masks.append(np.asarray(out.mask)[:k * num_samples])
  tokens, mask = np.concatenate(toks), np.concatenate(masks)
  texts = decode_completions(exp.tokenizer, tokens, mask)
  rows = np.repeat(ids, num_samples)
  data = exp.task.train if split == "train" else exp.task.heldout
  rewards = np.array([exp.task.score(t, data[i]) for t, i in zip(texts, rows)], np.float32)
  return Completions(split=split, ids=ids, group=num_samples, prompt=prompts[rows],
                     prompt_mask=pmask[rows], tokens=tokens, mask=mask, texts=texts,
                     rewards=rewards)


def sample_tree(exp, params, ids: Sequence[int], key: jax.Array, *, batch_size: int = 64):
  """EPTree rollouts (`config.rl.eptree` options) of train problems `ids`: every leaf as a
  completion (group = leaves per prompt) and the per-token Monte Carlo prefix values of the tree
  (`pav.tree_prefix_labels`, [R, T + 1], with the leaf counts as weights)."""
  from rl_jax.sampling import eptree  # pylint: disable=import-outside-toplevel
  opts = eptree.EPTreeOptions.from_config(exp.config)
  ids = np.asarray(ids, np.int64)
  parts, values, counts, decoded = [], [], [], 0
  for j, start in enumerate(range(0, len(ids), batch_size)):
    chunk = ids[start:start + batch_size]
    out = eptree.eptree_rollout(params, exp.train_prompts[chunk], exp.train_prompt_mask[chunk],
                                jax.random.fold_in(key, j), options=opts,
                                **exp.sampler_kwargs())
    tokens, mask = np.asarray(out.tokens), np.asarray(out.mask)
    texts = decode_completions(exp.tokenizer, tokens, mask)
    rows = np.repeat(chunk, opts.leaves)
    r = np.array([exp.task.score(t, exp.task.train[i]) for t, i in zip(texts, rows)], np.float32)
    v, c = pav.tree_prefix_labels(out.tree, r, mask, opts.leaves)
    parts.append((rows, tokens, mask, texts, r))
    values.append(np.asarray(v))
    counts.append(np.asarray(c))
    decoded += int(out.decode_tokens)
  rows = np.concatenate([p[0] for p in parts])
  comps = Completions(split="train", ids=ids, group=opts.leaves, prompt=exp.train_prompts[rows],
                      prompt_mask=exp.train_prompt_mask[rows],
                      tokens=np.concatenate([p[1] for p in parts]),
                      mask=np.concatenate([p[2] for p in parts]),
                      texts=sum((p[3] for p in parts), []),
                      rewards=np.concatenate([p[4] for p in parts]))
  return comps, np.concatenate(values), np.concatenate(counts), decoded


def tree_labels(values: np.ndarray, steps: steps_lib.Steps) -> tuple[np.ndarray, np.ndarray]:
  """Tree prefix values kept at the prompt and at step ends (weight 1 per row: a prefix shared
  by c leaves is counted c times, once per leaf row)."""
  r, t1 = values.shape
  w = np.zeros((r, t1), np.float32)
  w[:, 0] = 1.0
  sm = np.asarray(steps.step_mask)
  rows = np.broadcast_to(np.arange(r)[:, None], sm.shape)
  w[rows[sm], np.asarray(steps.end_pos)[sm] + 1] = 1.0
  return np.where(w > 0, values, 0.0).astype(np.float32), w


def segment(exp, comps: Completions, delimiters: Sequence[int], max_steps: int
            ) -> steps_lib.Steps:
  """`steps_lib.segment` of the completions (EOS is not content), as host arrays."""
  s = steps_lib.segment(comps.tokens, comps.mask, tuple(delimiters), max_steps=max_steps,
                        ignore_ids=(exp.tokenizer.eos_id, exp.tokenizer.pad_id),
                        eos_id=exp.tokenizer.eos_id)
  return jax.tree_util.tree_map(np.asarray, s)


def group_mean(comps: Completions) -> np.ndarray:
  """[R] mean reward of each row's group (the bare prompt's Monte Carlo value)."""
  return np.repeat(comps.rewards.reshape(-1, comps.group).mean(1), comps.group)


def outcome_labels(comps: Completions, steps: steps_lib.Steps) -> tuple[np.ndarray, np.ndarray]:
  """ORM labels: the completion's outcome at the prompt and at every step end."""
  h = steps.end_pos.shape[1]
  labels, weights = steps_lib.step_labels_to_tokens(
      np.repeat(comps.rewards[:, None], h, 1), steps, comps.tokens.shape[1])
  labels[:, 0], weights[:, 0] = comps.rewards, 1.0
  return labels, weights


def truth_labels(exp, comps: Completions, steps: steps_lib.Steps
                 ) -> tuple[np.ndarray, np.ndarray]:
  """The step checker's labels (`task.check_steps`): after segment h, 1 while every item so far
  (the task's steps, then the answer line) is right and 0 from the first wrong one on; the last
  segment is also 0 when the completion did not end with the right answer (it stopped early).
  At the bare prompt 1: the perfect prover's value (`prm.oracle`). Rows whose segments do not
  match their non-empty lines (`judge.true_labels`) get weight 0. A PRM fitted on these is the
  learnable ceiling of a PRM on the task."""
  if not hasattr(exp.task, "check_steps"):
    raise ValueError(f"PRM kind 'truth' needs a task with a step checker (the ladder); the run's "
                     f"task {exp.config.task.name!r} has none")
  h = steps.end_pos.shape[1]
  checks = [exp.task.check_steps(t, e) for t, e in zip(comps.texts, comps.examples(exp))]
  right, lmask, kept = judge.true_labels(checks, comps.texts, steps.num_steps, h)
  prefix = judge.prefix_right(right, lmask)
  last = np.maximum(lmask.sum(1) - 1, 0)
  rows = np.arange(len(prefix))
  prefix[rows, last] &= comps.rewards > 0
  labels, weights = steps_lib.step_labels_to_tokens(
      prefix.astype(np.float32), steps.replace(step_mask=np.asarray(steps.step_mask) & lmask),
      comps.tokens.shape[1])
  labels[:, 0], weights[:, 0] = 1.0, 1.0
  weights[~kept] = 0.0
  return labels, weights


def mc_labels(exp, params, comps: Completions, steps: steps_lib.Steps, n_mc: int,
              key: jax.Array, *, prover_k: int = 1, batch_size: int = 256
              ) -> tuple[np.ndarray, np.ndarray]:
  """PAV labels: Monte Carlo Q̂^π of every step prefix (`pav.mc_prefix_labels`, continuations
  scored by the task), transformed to the best-of-`prover_k` prover."""
  examples = comps.examples(exp)
  tok = exp.tokenizer

  def score(rows, joined):
    texts = [tok.decode([int(x) for x in row if x != tok.pad_id]) for row in joined]
    return [exp.task.score(t, examples[r]) for t, r in zip(texts, rows)]

  labels, weights = pav.mc_prefix_labels(
      params, cfg=exp.model_cfg, strategy=exp.rollout_strategy, prompt=comps.prompt,
      prompt_mask=comps.prompt_mask, tokens=comps.tokens, mask=comps.mask, steps=steps,
      outcomes=comps.rewards, prompt_value=group_mean(comps), score=score, n_mc=n_mc, rng=key,
      eos_id=tok.eos_id, pad_id=tok.pad_id, batch_size=batch_size)
  return np.asarray(pav.best_of_k(labels, prover_k)) * (weights > 0), weights


def fit(spec: prm_lib.PRMSpec, params: Any, comps: Completions, labels: np.ndarray,
        weights: np.ndarray, *, steps: int, batch_size: int, optim: ml_collections.ConfigDict,
        seed: int = 0, log_every: int = 50) -> tuple[Any, list]:
  """`steps` optax updates of the PRM on random mini-batches of the labelled completions.

  Returns the parameters and a log of {'step', 'loss', 'mae'} every `log_every` steps.
  """
  state = TrainState.create(params, make_optimizer(optim, steps))
  step_fn = jax.jit(functools.partial(prm_lib.train_step, cfg=spec.model), donate_argnums=0)
  rng = np.random.default_rng(seed)
  n = len(comps.tokens)
  log, acc = [], []
  for i in range(steps):
    idx = rng.choice(n, min(batch_size, n), replace=False)
    batch = prm_lib.PRMBatch(comps.prompt[idx], comps.prompt_mask[idx], comps.tokens[idx],
                             comps.mask[idx], labels[idx], weights[idx])
    state, m = step_fn(state, batch)
    acc.append({k: float(v) for k, v in jax.device_get(m).items()})
    if (i + 1) % log_every == 0 or i + 1 == steps:
      log.append({"step": i + 1, **{k: float(np.mean([a[k] for a in acc])) for k in acc[0]}})
      acc = []
  return state.params, log
