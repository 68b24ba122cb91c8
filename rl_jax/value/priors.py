"""Priors of a prompt's success rate before its rollouts: p0 and its error variance sigma0^2.

A prior is any object with `predict(params, prompt_ids) -> (p0 [B], sigma0_sq [B])` (float64
numpy, p0 in [0, 1]), built by a factory registered in `PRIORS`:
`make(exp, history, companions) -> prior`. `history` is the run's live
`value.history.RolloutHistory`, read at `predict` time so the prior follows the policy;
`companions` maps the run companions' names to their state (`v0`: the run's V0; `oracle`: its
`OracleMC`). V0.5 (`config.rl.v05.prior`) and the allocators (`config.rl.allocator_prior`) read
one. The rules of `global_mean`, `history` and `oracle`: docs/algorithms.md §4.2.
"""

from __future__ import annotations

from typing import Mapping, Optional

import jax
import numpy as np

from rl_jax import parallel, sampling, seeds
from rl_jax.data.batching import decode_completions
from rl_jax.registry import Registry
from rl_jax.value.history import RolloutHistory

PRIORS = Registry("prior")


def make(name: str, exp, history: RolloutHistory, companions: Optional[Mapping] = None):
  """The prior registered as `name` for this run (ValueError naming config.rl.v05.prior).

  `companions`: the run companions' state by name (`train.companions.rollout_state`); the 'v0'
  prior reads the run's V0 there, the 'oracle' prior its `OracleMC`."""
  if name not in PRIORS:
    raise ValueError(f"unknown prior {name!r} (config.rl.v05.prior / config.rl.allocator_prior); "
                     f"expected one of {list(PRIORS.names())}")
  return PRIORS.get(name)(exp, history, dict(companions or {}))


def _since(history: RolloutHistory, window: int) -> int:
  rec = history.records()
  if not window or not len(rec):
    return 0
  return int(rec["step"].max()) + 1 - window


def global_stats(history: RolloutHistory, since_step: int = 0,
                 min_var: float = 1e-3) -> tuple[float, float]:
  """(m, v): Beta(1,1)-smoothed mean success rate of the history's records with
  step >= since_step, and the between-prompt variance of true rates (≥ min_var; m(1-m) when
  fewer than two prompts were sampled)."""
  rec = history.records()
  rec = rec[rec["step"] >= since_step]
  att, suc = int(rec["attempts"].sum()), int(rec["successes"].sum())
  m = (suc + 1.0) / (att + 2.0)
  ids = np.unique(rec["prompt_id"])
  if len(ids) < 2:
    return m, m * (1.0 - m)
  a, s = history.stats(ids, since_step=since_step)
  a, s = a[a > 0].astype(np.float64), s[a > 0].astype(np.float64)
  rates = s / a
  noise = np.mean(rates * (1.0 - rates) / np.maximum(a - 1.0, 1.0))
  return m, float(np.clip(np.var(rates) - noise, min_var, m * (1.0 - m)))


class GlobalMean:
  """p0 = the history's mean success rate for every prompt (docs/algorithms.md §4.2)."""

  def __init__(self, history: RolloutHistory, window: int = 0):
    self.history, self.window = history, window

  def predict(self, params, prompt_ids):
    del params
    n = len(np.asarray(prompt_ids).reshape(-1))
    m, v = global_stats(self.history, _since(self.history, self.window))
    return np.full(n, m), np.full(n, v)


class PromptHistory:
  """p0 = the prompt's own past rate shrunk to the global mean (docs/algorithms.md §4.2)."""

  def __init__(self, history: RolloutHistory, window: int = 0, pseudo_count: float = 2.0):
    if pseudo_count <= 0:
      raise ValueError(f"config.rl.v05.prior_pseudo_count must be > 0, got {pseudo_count}")
    self.history, self.window, self.kappa = history, window, float(pseudo_count)

  def predict(self, params, prompt_ids):
    del params
    since = _since(self.history, self.window)
    m, v = global_stats(self.history, since)
    a, s = (x.astype(np.float64) for x in self.history.stats(prompt_ids, since_step=since))
    k = self.kappa
    p0 = (s + k * m) / (a + k)
    shrink = k / (a + k)
    var = p0 * (1.0 - p0) / (a + k + 1.0) + shrink ** 2 * v
    return p0, np.where(a > 0, var, v)


@PRIORS.register("global_mean")
def _global_mean(exp, history, companions):
  del companions
  return GlobalMean(history, exp.config.rl.v05.prior_window)


@PRIORS.register("history")
def _history(exp, history, companions):
  del companions
  v = exp.config.rl.v05
  return PromptHistory(history, v.prior_window, v.prior_pseudo_count)


@PRIORS.register("v0")
def _v0(exp, history, companions):
  """The run's V0 (the companion 'v0', a `value.v0.run.RunV0`): its support set follows
  `history` through the RL phase's `after_step` calls, so `history` is not read here."""
  del exp, history
  if "v0" not in companions:
    raise ValueError("the 'v0' prior needs V0 in the run: set config.value.v0.enabled=True or "
                     "name 'v0' in config.rl.v05.prior / config.rl.allocator_prior")
  return companions["v0"].prior


def uses(config, name: str) -> bool:
  """Whether the config names the prior `name` (`rl.allocator_prior` or `rl.v05.prior`)."""
  return name in (config.rl.allocator_prior, config.rl.v05.prior)


class OracleMC:
  """The `oracle` prior: Monte Carlo success rates of the current policy (docs/algorithms.md §4.2).

  `predict(params, prompt_ids)` samples M completions of each train prompt with `params`, in
  chunks of `config.rl.prompts_per_step` prompts (the last chunk padded with its first prompt;
  one compiled shape), and scores them with the run's rewards: a sample succeeds when its first
  reward component exceeds `config.rl.success_threshold` (as in the history). Chunk c of the
  k-th call of step `step` is drawn with fold_in(key(seed), ORACLE_MC, step, k, c), so a resumed
  run draws what the uninterrupted one does. `tokens` / `rows` count what was sampled since the
  last `take_counts()`.
  """

  def __init__(self, exp, step: int = 0):
    self.exp, self.step = exp, step
    self.samples = exp.config.value.oracle.mc_samples
    self.chunk = exp.config.rl.prompts_per_step
    self.calls = self.tokens = self.rows = 0

  def start_step(self, step: int) -> None:
    """The RL step whose rollouts the next predictions are for (resets the call count)."""
    self.step, self.calls = step, 0

  def take_counts(self) -> dict:
    """{'oracle/mc_tokens', 'oracle/mc_rows'} since the last call, then zero."""
    out = {"oracle/mc_tokens": self.tokens, "oracle/mc_rows": self.rows}
    self.tokens = self.rows = 0
    return out

  def successes(self, params, prompt_ids) -> np.ndarray:
    """[B, M] 0/1 successes of M fresh samples of each prompt."""
    exp, m = self.exp, self.samples
    ids = np.asarray(prompt_ids, np.int64).reshape(-1)
    key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(
        exp.root_key(), seeds.ORACLE_MC), self.step), self.calls)
    self.calls += 1
    out = np.zeros((len(ids), m), np.float32)
    for c, start in enumerate(range(0, len(ids), self.chunk)):
      part = ids[start:start + self.chunk]
      take = np.concatenate([part, np.full(self.chunk - len(part), part[0])])
      res = parallel.to_host(sampling.generate(
          params, exp.train_prompts[take], exp.train_prompt_mask[take],
          jax.random.fold_in(key, c), num_samples=m, **exp.sampler_kwargs()))
      n = len(part) * m
      tokens, mask = np.asarray(res.tokens)[:n], np.asarray(res.mask)[:n]
      texts = decode_completions(exp.tokenizer, tokens, mask)
      examples = [exp.task.train[i] for i in np.repeat(part, m)]
      r, _ = exp.reward_scorer.score_components(texts, examples, tuple(exp.config.rl.rewards))
      out[start:start + len(part)] = (r[:, 0] > exp.config.rl.success_threshold).reshape(-1, m)
      self.tokens += int(mask.sum())
      self.rows += n
    return out

  def predict(self, params, prompt_ids):
    s = self.successes(params, prompt_ids).sum(axis=1).astype(np.float64)
    m = float(self.samples)
    smooth = (s + 1.0) / (m + 2.0)
    return s / m, smooth * (1.0 - smooth) / m


@PRIORS.register("oracle")
def _oracle(exp, history, companions):
  """The run's `OracleMC` (the companion 'oracle'); `history` is not read."""
  del exp, history
  if "oracle" not in companions:
    raise ValueError("the 'oracle' prior needs its run companion 'oracle' (built when "
                     "config.rl.allocator_prior or config.rl.v05.prior is 'oracle')")
  return companions["oracle"]
