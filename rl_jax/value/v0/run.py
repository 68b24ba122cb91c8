"""V0 in an RL run (`config.value.v0.enabled`): the prior, its checkpoints, its calibration.

    hook = RunV0.create(exp)                     # when V0 is used (`wanted`)
    hook.load_meta(checkpoint_meta)              # a resumed RL phase: V0 as it was at that step
    p0, sigma0_sq = hook.prior.predict(params, prompt_ids)    # the `v0` prior (value.priors)
    hook.after_step(history, params, step)       # support refresh + periodic training; metrics
    {**hook.meta()}                              # into every RL checkpoint's meta
    metrics = hook.calibrate(params, step + 1)   # at every RL evaluation

V0 is built when `config.value.v0.enabled` is set or a prior setting names 'v0'
(`config.rl.v05.prior`, `config.rl.allocator_prior`). The run's instance is the run companion
'v0' (`train.companions`), where the `v0` entry of the prior registry finds it.

Prompt ids: 0 .. N-1 are the task's train problems (as in the rollout history); the held-out
problem j is id N + j, so V0 can be asked about held-out prompts with a support set of train
prompts (the backbone sees both through one `PolicyFeatures`).

Calibration (at each RL evaluation): `calib_prompts` evenly spaced held-out problems are sampled
`calib_samples` times at the rollout temperature (cost: `v0/calib_seconds`, `v0/calib_tokens`),
and V0's prediction is scored against the measured rates (`calibration.metrics`) next to the
three baselines (`calibration.baselines`; the past rate is the rate measured at the previous
evaluation, checkpointed with V0).
"""

from __future__ import annotations

import base64
import time

import jax
import numpy as np

from rl_jax import models, parallel, sampling, seeds
from rl_jax.value import calibration
from rl_jax.value.v0 import core as v0_lib
from rl_jax.value.v0 import features
from rl_jax.value.v0.online import V0Prior

def wanted(config) -> bool:
  """V0 runs when enabled or named as a prior (`rl.v05.prior`, `rl.allocator_prior`)."""
  rl = config.rl
  named = [rl.get("allocator_prior", ""), rl.v05.get("prior", "") if "v05" in rl else ""]
  return bool(config.value.v0.enabled) or "v0" in named


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

  @classmethod
  def create(cls, exp) -> "RunV0":
    """A fresh V0 for the run `exp` (its backbone from `config.value.v0.backbone`)."""
    vcfg = exp.config.value.v0
    return cls(exp, V0Prior(vcfg, hidden_source(exp, vcfg), seed=exp.config.seed))

  def heldout_ids(self, j) -> np.ndarray:
    return self.num_train + np.asarray(j, np.int64)

  def after_step(self, history, params, step: int) -> dict:
    return self.prior.update(history, models.cast_params(self.exp.model_cfg, params), step)

  # --- checkpoints: V0's state rides in the RL checkpoint's JSON meta (atomic with it) ---------
  def meta(self) -> dict:
    """{'v0': ...}: V0's arrays (params, optimizer state) as base64 float32/int bytes, sigma0^2,
    support set and the calibration's past rates; exact on `load_meta`."""
    arrays, meta = self.prior.state()
    leaves = jax.tree_util.tree_leaves(arrays)
    packed = [{"dtype": str(np.asarray(x).dtype), "shape": list(np.shape(x)),
               "data": base64.b64encode(np.ascontiguousarray(np.asarray(x)).tobytes()).decode()}
              for x in leaves]
    return {"v0": dict(meta, arrays=packed,
                       past_rates={str(k): v for k, v in self.past_rates.items()})}

  def load_meta(self, meta: dict) -> None:
    """Restores `meta()`'s state (a resumed RL phase); nothing when the meta has no 'v0'."""
    if "v0" not in meta:
      return
    m = meta["v0"]
    treedef = jax.tree_util.tree_structure(self.prior.abstract_state())
    if treedef.num_leaves != len(m["arrays"]):
      raise ValueError(f"the checkpoint's V0 state has {len(m['arrays'])} arrays, "
                       f"config.value.v0 builds {treedef.num_leaves}; was the V0 config changed?")
    leaves = [np.frombuffer(base64.b64decode(a["data"]), np.dtype(a["dtype"])).reshape(a["shape"])
              for a in m["arrays"]]
    self.prior.load_state(jax.tree_util.tree_unflatten(treedef, leaves), m)
    self.past_rates = {int(k): float(v) for k, v in m.get("past_rates", {}).items()}

  def wrap_eval(self, eval_fn):
    """`eval_fn(params, step)` with the calibration metrics added (or calibration alone)."""

    def with_calibration(params, step):
      out = dict(eval_fn(params, step)) if eval_fn is not None else {}
      out.update(self.calibrate(params, step))
      return out

    return with_calibration

  # --- calibration ------------------------------------------------------------------------------
  def measure_heldout(self, params, step: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """(held-out indices, success rates [n] over calib_samples samples, cost metrics)."""
    exp, c = self.exp, self.vcfg
    m = len(exp.heldout_prompts)
    n = min(c.calib_prompts, m)
    j = (np.arange(n) * m) // n  # evenly spaced: held-out sets may be ordered by stratum
    t0 = time.perf_counter()
    key = jax.random.fold_in(jax.random.fold_in(exp.root_key(), seeds.V0_CALIB), step)
    res = sampling.generate(
        models.cast_params(exp.model_cfg, params), exp.heldout_prompts[j],
        exp.heldout_prompt_mask[j], key, num_samples=c.calib_samples, **exp.sampler_kwargs())
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
