"""`V0Prior`: V0 inside an RL run, a prior `p0` (and its error variance) for every prompt.

    prior = V0Prior.from_config(config.value.v0, hidden, seed=config.seed)
    p0, sigma0_sq = prior.predict(policy_params, prompt_ids)   # before sampling step t
    ... sample, score, history.record(t, ...)
    prior.update(history, policy_params, t)                     # after step t's rollouts

* The support set (the in-context evidence of the current policy) is refreshed at every
  `update`: each prompt's newest (prompt, success rate) row of the history, newest first, at
  most `support_size` (`episodes.support_set`).
* Every `train_every` RL steps (`(t + 1) % train_every == 0`), the adapter and head take
  `train_steps` optax steps on episodes from the last `train_window` policy steps of the history
  (the newest step is held out when `estimate_sigma0`), with the policy of step t as the frozen
  backbone; then sigma0^2 is re-estimated on the held-out newest step
  (`v0_train.validation_sigma0_sq`). Until then sigma0^2 = `config.value.v0.sigma0_sq`.
* Before any history exists (step 0), `predict` returns p0 = 0.5 with sigma0^2 = 0.25 (the
  largest variance of a rate: the prior carries no information) and `ready` is False.

Its state (`state()` / `load_state`: V0 params, optimizer state, sigma0^2, support set, RNG
position) is a pytree + JSON that the run checkpoints with its own, so a resumed run continues
exactly as an uninterrupted one. All randomness is a function of (seed, step).
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import numpy as np

from rl_jax import seeds
from rl_jax.value.history import RolloutHistory
from rl_jax.value.v0 import core as v0_lib
from rl_jax.value.v0 import episodes as ep
from rl_jax.value.v0 import io as v0_io
from rl_jax.value.v0 import train as v0_train

NO_INFO_SIGMA0_SQ = 0.25


class V0Prior:
  """See the module docstring. `hidden(params, ids) -> (H, mask)` is a `features` source."""

  def __init__(self, vcfg, hidden: Callable, *, seed: int, d_model: Optional[int] = None):
    self.vcfg = vcfg
    self.cfg = v0_lib.V0Config.from_config(vcfg)
    self.hidden = hidden
    self.seed = int(seed)
    self.tx = v0_train.optimizer(vcfg.optim)
    d = d_model if d_model is not None else hidden.d_model
    params = v0_lib.init_params(self.cfg,
                                jax.random.fold_in(jax.random.key(self.seed), seeds.V0_PRIOR),
                                d_model=d)
    if vcfg.init:  # parameters trained elsewhere (experiments/train_value.py)
      cfg, loaded = v0_io.load(vcfg.init)
      if cfg != self.cfg:
        raise ValueError(f"config.value.v0.init={vcfg.init!r} holds a V0 of sizes {cfg}; "
                         f"config.value.v0 asks for {self.cfg}")
      v0_io.check_same_shapes(loaded, params, vcfg.init)
      params = jax.tree_util.tree_map(lambda a: jax.numpy.asarray(a, jax.numpy.float32), loaded)
    self.params, self.opt_state = params, self.tx.init(params)
    self.sigma0_sq = float(vcfg.sigma0_sq)
    self.support_ids = np.zeros(0, np.int64)
    self.support_y = np.zeros(0, np.float32)
    self.trained_at = -1  # the last RL step after which V0 trained
    self.last_metrics: dict = {}

  @classmethod
  def from_config(cls, vcfg, hidden: Callable, *, seed: int) -> "V0Prior":
    return cls(vcfg, hidden, seed=seed)

  @property
  def ready(self) -> bool:
    return len(self.support_ids) > 0

  def _hidden_of(self, policy_params) -> Callable:
    return lambda ids: self.hidden(policy_params, ids)

  def predict(self, policy_params, prompt_ids) -> tuple[np.ndarray, np.ndarray]:
    """(p0 [B], sigma0_sq [B]) (float64) for `prompt_ids` under the policy `policy_params`."""
    ids = np.asarray(prompt_ids, np.int64).reshape(-1)
    if not self.ready:
      return np.full(len(ids), 0.5), np.full(len(ids), NO_INFO_SIGMA0_SQ)
    p = v0_train.predict_ids(self.cfg, self.params, self._hidden_of(policy_params),
                             self.support_ids, self.support_y, ids)
    return p.astype(np.float64), np.full(len(ids), self.sigma0_sq)

  def update(self, history: RolloutHistory, policy_params, step: int) -> dict:
    """After RL step `step`: refresh the support set; train every `train_every` steps.
    Returns metrics (`v0/loss`, `v0/sigma0_sq`, ... on training steps; else {})."""
    c = self.vcfg
    table = ep.rate_table(history, min_attempts=c.min_attempts, before_step=step + 1)
    self.support_ids, self.support_y = (a.copy() for a in ep.support_set(
        table, upto_step=step, size=c.support_size))
    self.support_y = self.support_y.astype(np.float32)
    if not c.train_every or (step + 1) % c.train_every or not len(table):
      return {}
    steps = np.unique(table.step)
    steps = steps[steps > step - c.train_window]
    hold_out = c.estimate_sigma0 and len(steps) > 1
    query_steps = steps[:-1] if hold_out else steps
    rng = np.random.default_rng([self.seed, seeds.V0_PRIOR, step])
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(self.seed), seeds.V0_PRIOR),
                             step + 1)
    hidden = self._hidden_of(policy_params)
    try:
      self.params, self.opt_state, m = v0_train.fit(
          self.cfg, self.tx, self.params, self.opt_state, table, hidden, rng,
          steps=c.train_steps, query_steps=query_steps, num_episodes=c.episodes_per_step,
          support_size=c.support_size, num_queries=c.episode_queries, alpha=c.alpha, key=key)
    except ValueError:  # No step with both a query and a support row yet.
      return {}
    self.trained_at = step
    if hold_out:
      sigma, vm = v0_train.validation_sigma0_sq(self.cfg, self.params, table, hidden,
                                                step=int(steps[-1]), support_size=c.support_size,
                                                floor=c.sigma0_sq_floor)
      if sigma is not None:
        self.sigma0_sq = sigma
        m.update(vm)
    m["sigma0_sq"] = self.sigma0_sq
    self.last_metrics = {f"v0/{k}": float(v) for k, v in m.items()}
    return self.last_metrics

  # Checkpointing: a pytree of arrays (orbax) and a JSON-ready dict.
  def state(self) -> tuple[dict, dict]:
    arrays = {"params": self.params, "opt_state": self.opt_state}
    meta = {"sigma0_sq": self.sigma0_sq, "support_ids": self.support_ids.tolist(),
            "support_y": self.support_y.tolist(), "trained_at": self.trained_at}
    return arrays, meta

  def abstract_state(self) -> dict:
    return jax.eval_shape(lambda: {"params": self.params, "opt_state": self.opt_state})

  def load_state(self, arrays: dict, meta: dict) -> None:
    self.params, self.opt_state = arrays["params"], arrays["opt_state"]
    self.sigma0_sq = float(meta["sigma0_sq"])
    self.support_ids = np.asarray(meta["support_ids"], np.int64)
    self.support_y = np.asarray(meta["support_y"], np.float32)
    self.trained_at = int(meta["trained_at"])
