"""V0 in an RL run (`config.value.v0.enabled`): the prior, its checkpoints, its calibration.

    hook = RunV0.build(exp)                      # None when config.value.v0.enabled is False
    hook.restore(start_step)                     # a resumed RL phase: V0 as it was at that step
    p0, sigma0_sq = hook.prior.predict(params, prompt_ids)    # prior for V0.5 / allocators
    hook.after_step(history, params, step)       # support refresh + periodic training; metrics
    hook.maybe_save(step + 1, force=...)         # with the RL checkpoint (before it)
    metrics = hook.calibrate(params, step + 1)   # at every RL evaluation

Prompt ids: 0 .. N-1 are the task's train problems (as in the rollout history); the held-out
problem j is id N + j, so V0 can be asked about held-out prompts with a support set of train
prompts (the backbone sees both through one `PolicyFeatures`).

Calibration (at each RL evaluation): the first `calib_prompts` held-out problems are sampled
`calib_samples` times at the rollout temperature (cost: `v0/calib_seconds`, `v0/calib_tokens`),
and V0's prediction is scored against the measured rates (`calibration.metrics`) next to the
three baselines (`calibration.baselines`; the past rate is the rate measured at the previous
evaluation, checkpointed with V0).
"""

from __future__ import annotations

import os
import time
from typing import Optional

import jax
import numpy as np

from rl_jax import models, parallel, sampling
from rl_jax.checkpoint import Checkpointer
from rl_jax.value import calibration, features
from rl_jax.value import v0 as v0_lib
from rl_jax.value.prior import V0Prior

CALIB_TAG = 16  # random stream of the calibration samples


def hidden_source(exp, vcfg):
  """The backbone (`config.value.v0.backbone`): the policy's hidden states ('') or a
  checkpoint's, over train ++ held-out prompts."""
  if vcfg.backbone:
    texts = [e.prompt for e in exp.task.train] + [e.prompt for e in exp.task.heldout]
    return features.CheckpointFeatures(vcfg.backbone, texts)
  return features.PolicyFeatures(
      exp.model_cfg, np.concatenate([exp.train_prompts, exp.heldout_prompts]),
      np.concatenate([exp.train_prompt_mask, exp.heldout_prompt_mask]))


class RunV0:
  """The V0 prior of one RL run, with its checkpoint directory and calibration state."""

  def __init__(self, exp, prior: V0Prior):
    self.exp, self.prior = exp, prior
    self.vcfg = exp.config.value.v0
    self.num_train = len(exp.train_prompts)
    self.past_rates: dict = {}  # held-out id -> rate at the previous calibration
    c = exp.config.checkpoint
    self.ckpt = Checkpointer(os.path.join(exp.workdir, "checkpoints", "v0"), save_every=c.every,
                             max_to_keep=c.max_to_keep)

  @classmethod
  def build(cls, exp) -> Optional["RunV0"]:
    vcfg = exp.config.value.v0
    if not vcfg.enabled:
      return None
    return cls(exp, V0Prior(vcfg, hidden_source(exp, vcfg), seed=exp.config.seed))

  def heldout_ids(self, j) -> np.ndarray:
    return self.num_train + np.asarray(j, np.int64)

  def after_step(self, history, params, step: int) -> dict:
    return self.prior.update(history, models.cast_params(self.exp.model_cfg, params), step)

  # --- checkpoints (saved before the RL state's, so V0 at the RL phase's resume step exists) --
  def maybe_save(self, step: int, force: bool = False) -> None:
    arrays, meta = self.prior.state()
    meta = dict(meta, past_rates={str(k): v for k, v in self.past_rates.items()})
    self.ckpt.maybe_save(step, arrays, meta, force=force)

  def restore(self, step: int) -> None:
    """V0's state at RL step `step` (the step the RL phase resumed from; 0: nothing to do)."""
    if step == 0:
      return
    target = self.prior.abstract_state()
    arrays, meta = self.ckpt.restore(step, target)
    self.prior.load_state(arrays, meta)
    self.past_rates = {int(k): float(v) for k, v in meta.get("past_rates", {}).items()}

  def close(self) -> None:
    self.ckpt.close()

  # --- calibration ------------------------------------------------------------------------------
  def measure_heldout(self, params, step: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """(held-out indices, success rates [n] over calib_samples samples, cost metrics)."""
    exp, c = self.exp, self.vcfg
    n = min(c.calib_prompts, len(exp.heldout_prompts))
    j = np.arange(n)
    t0 = time.perf_counter()
    key = jax.random.fold_in(jax.random.fold_in(exp.root_key(), CALIB_TAG), step)
    res = sampling.generate(
        models.cast_params(exp.model_cfg, params), exp.heldout_prompts[j],
        exp.heldout_prompt_mask[j], key, cfg=exp.model_cfg, strategy=exp.rollout_strategy,
        max_new_tokens=exp.max_new_tokens, eos_id=exp.tokenizer.eos_id,
        pad_id=exp.tokenizer.pad_id, num_samples=c.calib_samples)
    res = parallel.to_host(res)
    from rl_jax.data.batching import decode_completions  # pylint: disable=import-outside-toplevel
    texts = decode_completions(exp.tokenizer, res.tokens, res.mask)
    examples = np.repeat(j, c.calib_samples)
    ok = np.asarray([exp.task.score(t, exp.task.heldout[e]) for t, e in zip(texts, examples)],
                    np.float64).reshape(n, c.calib_samples)
    cost = {"v0/calib_seconds": time.perf_counter() - t0,
            "v0/calib_tokens": float(np.asarray(res.mask).sum())}
    return j, ok.mean(1), cost

  def calibrate(self, params, step: int) -> dict:
    """V0's Brier / AUROC / ECE on held-out prompts and the three baselines' (module doc)."""
    if not self.vcfg.calib_samples or not self.prior.ready:
      return {}
    j, rates, out = self.measure_heldout(params, step)
    ids = self.heldout_ids(j)
    compute = models.cast_params(self.exp.model_cfg, params)
    p, _ = self.prior.predict(compute, ids)
    out.update(calibration.metrics(p, rates, "v0"))
    past = np.asarray([self.past_rates.get(int(i), np.nan) for i in ids])
    h, mask = self.prior.hidden(compute, np.concatenate([self.prior.support_ids, ids]))
    x = np.asarray(v0_lib.features(self.prior.cfg, self.prior.params, h, mask))
    s = len(self.prior.support_ids)
    out.update(calibration.baselines(rates, support_y=self.prior.support_y, past_rates=past,
                                     support_x=x[:s], query_x=x[s:]))
    out["v0/calib_prompts"] = float(len(ids))
    self.past_rates = {int(i): float(r) for i, r in zip(ids, rates)}
    return out
