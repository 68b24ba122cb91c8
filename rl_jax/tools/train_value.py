"""Training V0 offline on a saved rollout history (`experiments/train_value.py` calls `train`).

    summary = train(config, run_dir, history, out_dir, steps=300, val_steps=10)

1. Rebuilds the run (task, tokenizer, model) from `run_dir` and lists its policy checkpoints:
   the final SFT one (policy step 0) and every RL one kept (`checkpoints/rl/<k>`: the policy
   after k updates, which sampled the rollouts of history step k).
2. The history rows of step s get their features from the newest checkpoint at or before s
   (the policy that sampled them, when the run kept it), the frozen backbone of §4.1.
3. The last `val_steps` policy steps are held out. V0 (config.value.v0 sizes and optimizer)
   takes `steps` optax steps on episodes of the other steps, each batch drawn from one
   checkpoint's steps (checkpoints in turn).
4. Validation, per held-out step s: the rows of s are predicted with the support set of the
   steps before s (how the prior is used in a run), and scored (Brier, AUROC at rate >= 0.5,
   ECE) next to the three baselines: global mean of the support, the prompt's own earlier rate
   in the history, and a logistic regression on V0's features of the support set. Also reported
   for the untrained V0 (`v0_init/...`).
5. Writes `out_dir/v0.safetensors` + `v0_config.json` (`v0_io`, atomic) and
   `out_dir/calibration.json` (pooled metrics, per-step metrics, sigma0^2 from the residuals).
"""

from __future__ import annotations

import functools
import json
import os
import time

import jax
import numpy as np

from rl_jax import experiment, models, seeds
from rl_jax import workdir as workdir_lib
from rl_jax.evals import runner
from rl_jax.value import calibration
from rl_jax.value.history import RolloutHistory
from rl_jax.value.v0 import core as v0_lib
from rl_jax.value.v0 import episodes as ep, run as run_v0, io as v0_io, train as v0_train


def _restore(exp, phase: str, step: int):
  return models.cast_params(exp.model_cfg, runner.restore_params(exp, phase, step))


def policy_checkpoints(exp) -> dict:
  """{policy step: loader()} of the run's SFT (step 0; the init_from run's when RL started from
  one) and kept RL checkpoints."""
  out = {}
  sft_src = exp.config.init_from or exp.workdir
  sft_dir = workdir_lib.checkpoint_dir(sft_src, "sft")
  if os.path.isdir(sft_dir):
    sft_exp = exp if sft_src == exp.workdir else _with_workdir(exp, sft_src)
    out[0] = lambda: _restore(sft_exp, "sft", exp.config.sft.steps)
  rl_dir = workdir_lib.checkpoint_dir(exp.workdir, "rl")
  if os.path.isdir(rl_dir):
    for name in sorted(os.listdir(rl_dir)):
      if name.isdigit():
        out[int(name)] = functools.partial(_restore, exp, "rl", int(name))
  if not out:
    raise FileNotFoundError(f"{exp.workdir} has no policy checkpoint (checkpoints/sft or "
                            "checkpoints/rl, or its config.init_from's checkpoints/sft)")
  return out


def checkpoint_for(step: int, ckpt_steps) -> int:
  """The newest checkpoint step <= `step` (the policy that sampled it, when kept), else the
  oldest one."""
  ckpt_steps = np.sort(np.asarray(ckpt_steps))
  return int(ckpt_steps[max(np.searchsorted(ckpt_steps, step, "right") - 1, 0)])


def _with_workdir(exp, workdir):
  import dataclasses  # pylint: disable=import-outside-toplevel
  return dataclasses.replace(exp, workdir=workdir)


def _cached_hidden(source, params, ids):
  h, mask = source(params, ids)
  rows = {int(i): r for r, i in enumerate(ids)}
  return lambda q: (h[[rows[int(i)] for i in q]], mask[[rows[int(i)] for i in q]])


def _validate(cfg, params, table, hidden_of_step, val_steps, support_size, prefix):
  preds, rates, per_step, base_in = [], [], {}, []
  for s in val_steps:
    rows = table.take(table.step == s)
    s_ids, s_y = ep.support_set(table, upto_step=s - 1, size=support_size)
    if not len(rows) or not len(s_ids):
      continue
    hidden = hidden_of_step(s)
    p = v0_train.predict_ids(cfg, params, hidden, s_ids, s_y, rows.prompt_id)
    preds.append(p)
    rates.append(rows.rate)
    per_step[int(s)] = calibration.metrics(p, rows.rate, prefix)
    base_in.append((s, rows, s_ids, s_y, hidden))
  if not preds:
    raise ValueError(f"no validation step among {list(val_steps)} has rows and an earlier "
                     "support set")
  p, r = np.concatenate(preds), np.concatenate(rates)
  return calibration.metrics(p, r, prefix), per_step, base_in, (p, r)


def _baselines(cfg, params, history, base_in):
  """The three baselines pooled over the validation steps."""
  parts = []
  for s, rows, s_ids, s_y, hidden in base_in:
    att, suc = history.stats(rows.prompt_id, before_step=s)
    past = np.where(att > 0, suc / np.maximum(att, 1), np.nan)
    h, mask, rows_of = v0_train.hidden_rows(hidden, np.concatenate([s_ids, rows.prompt_id]))
    x = np.asarray(v0_lib.features(cfg, params, h, mask))
    sx = x[[rows_of[int(i)] for i in s_ids]]
    qx = x[[rows_of[int(i)] for i in rows.prompt_id]]
    w, b = calibration.logistic_regression(sx, s_y)
    parts.append((rows.rate, np.full(len(rows), np.mean(s_y)), past,
                  1 / (1 + np.exp(-(qx @ w + b)))))
  r, gm, past, lr = (np.concatenate([p[i] for p in parts]) for i in range(4))
  have = ~np.isnan(past)
  out = calibration.metrics(gm, r, "baseline_global_mean")
  out.update(calibration.metrics(np.where(have, past, gm), r, "baseline_past_rate"))
  out["baseline_past_rate/coverage"] = float(have.mean())
  out.update(calibration.metrics(lr, r, "baseline_logreg"))
  return out


def train(config, run_dir: str, history: RolloutHistory, out_dir: str, *, steps: int,
          val_steps: int) -> dict:
  """The module docstring's steps 1-5; returns the summary written to calibration.json."""
  t0 = time.time()
  vcfg = config.value.v0
  exp = experiment.build(config, run_dir)
  source = run_v0.hidden_source(exp, vcfg)
  table = ep.rate_table(history, min_attempts=vcfg.min_attempts)
  all_steps = np.unique(table.step)
  if len(all_steps) < 2:
    raise ValueError(f"the history has rows of {len(all_steps)} policy step(s); offline training "
                     "needs at least two (one to train on, one to validate)")
  n_val = min(max(val_steps, 1), len(all_steps) - 1)
  train_steps_, held = all_steps[:-n_val], all_steps[-n_val:]
  ckpts = policy_checkpoints(exp)
  ckpt_steps = np.array(sorted(ckpts))
  of_step = lambda s: checkpoint_for(s, ckpt_steps)
  ids = np.unique(table.prompt_id)
  cache = {}

  def hidden_of_step(s):
    c = of_step(s)
    if c not in cache:
      cache[c] = _cached_hidden(source, ckpts[c](), ids)
    return cache[c]

  cfg = v0_lib.V0Config.from_config(vcfg)
  d = source.d_model
  params = v0_lib.init_params(cfg, jax.random.key(config.seed), d_model=d)
  if vcfg.init:
    _, params = v0_io.load(vcfg.init)
  tx = v0_train.optimizer(vcfg.optim)
  opt_state = tx.init(params)
  init_m, _, _, _ = _validate(cfg, params, table, hidden_of_step, held, vcfg.support_size,
                              "v0_init")
  groups = {}
  for s in train_steps_:
    groups.setdefault(of_step(s), []).append(int(s))
  rng = np.random.default_rng([config.seed, seeds.V0_OFFLINE])
  key = jax.random.key(config.seed + 1)
  losses, chunk = [], 10
  order = sorted(groups)
  for i in range(0, steps, chunk):
    c = order[(i // chunk) % len(order)]
    params, opt_state, m = v0_train.fit(
        cfg, tx, params, opt_state, table, hidden_of_step(groups[c][0]), rng,
        steps=min(chunk, steps - i), query_steps=groups[c], num_episodes=vcfg.episodes_per_step,
        support_size=vcfg.support_size, num_queries=vcfg.episode_queries, alpha=vcfg.alpha,
        key=jax.random.fold_in(key, i))
    losses.append(m.get("loss", float("nan")))
  pooled, per_step, base_in, (p, r) = _validate(cfg, params, table, hidden_of_step, held,
                                                vcfg.support_size, "v0")
  pooled.update(init_m)
  pooled.update(_baselines(cfg, params, history, base_in))
  att = np.concatenate([b[1].attempts for b in base_in])
  noise = float(np.mean(np.where(att > 1, r * (1 - r) / np.maximum(att - 1, 1), 0.0)))
  sigma0 = max(float(np.mean((p - r) ** 2)) - noise, vcfg.sigma0_sq_floor)
  summary = {"metrics": pooled, "per_step": per_step, "sigma0_sq": sigma0,
             "train_steps": [int(s) for s in train_steps_], "val_steps": [int(s) for s in held],
             "checkpoints": [int(s) for s in ckpt_steps],
             "loss_first": losses[0] if losses else None,
             "loss_last": losses[-1] if losses else None, "optimizer_steps": steps,
             "val_rows": int(len(r)), "seconds": time.time() - t0}
  v0_io.save(out_dir, cfg, params, extra={"sigma0_sq": sigma0})
  path = os.path.join(out_dir, "calibration.json")
  with open(path + ".tmp", "w") as f:
    json.dump(summary, f, indent=1, sort_keys=True)
  os.replace(path + ".tmp", path)
  return summary


def apply_overrides(config, overrides) -> None:
  """`FIELD=VALUE` strings (experiments.train_value's --v0) -> config.value.v0 fields, each
  converted to the type of the existing field; a ValueError names an unknown or malformed one."""
  v0 = config.value.v0
  for item in overrides:
    field, sep, value = item.partition("=")
    if not sep or field not in v0:
      raise ValueError(f"--v0={item!r}: expected FIELD=VALUE with FIELD one of "
                       f"{sorted(v0.keys())}")
    old = v0[field]
    v0[field] = (value.lower() in ("1", "true")) if isinstance(old, bool) else type(old)(value)
