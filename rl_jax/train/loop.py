"""The default experiment: SFT warm start -> RL -> held-out evaluation, plus the controls.

The held-out set is the dev set (`summary.json`'s `rl_accuracy`, `sft_accuracy`, ...): every
choice of settings is made on it. With `config.task.test_size` > 0 the SFT and RL policies are
also evaluated (greedy) on a disjoint test set, for the result tables only: `sft_test_accuracy`,
`rl_test_accuracy` (`_test_summary`).

    summary = run(config, workdir)

writes `workdir/summary.json`, `run_config.json` (the config), `config_fingerprint.json` (the
first run's results-affecting fields: a re-run with others is refused, `rl_jax.fingerprint`),
`metrics.jsonl`, TensorBoard events (`tb/`), `curves.png` and
orbax checkpoints (`checkpoints/<phase>/`). Every phase resumes from its latest checkpoint, and
finished evaluations are kept in `evals.json`, so re-running the same command after a crash
continues where it stopped.

Multi-host (`python -m experiments.run ... --coordinator_address=...`, see `experiments/run.py`):
every process runs this function on the global mesh; only process 0 writes metrics, plots and the
JSON files, orbax writes the checkpoints collectively, and `workdir` must be a directory all
processes share (as orbax requires).

With `config.init_from=OTHER_WORKDIR` the SFT phase is not run: its final checkpoint, tokenizer
and SFT evaluations are taken from that run (which must have the same task, tokenizer and
model settings), so a sweep of RL variants can share one SFT.
"""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Optional

import jax
import ml_collections
import numpy as np

from rl_jax import compile_cache, data, experiment, fingerprint, models, parallel, sampling, seeds
from rl_jax import workdir as workdir_lib
from rl_jax.data import ladder
from rl_jax.metrics import MetricsWriter, plot_curves, read_metrics
from rl_jax.rollout import requests as requests_lib
from rl_jax.train import config_check, evaluate, init_from, phases, signals
from rl_jax.train import store as store_lib


def _evaluator(exp: experiment.Experiment):
  """Returns eval(params, temperature, num_samples, phase='', split='dev', limit=0) -> dict of
  results on the dev (held-out) set, or on the test set with split='test'; `limit` N > 0: on N
  of its problems only, evenly spaced through it (`evaluate.spread`: on the ladder, whose dev
  set is ordered by stratum, N/strata per stratum).

  Every task gets `accuracy` (mean of `task.score`) and `success_rate_histogram` (per-prompt
  success rates over the samples; meaningful with several samples). chain_sum adds the accuracy
  on and off its carry class; a task with a step checker (`check_steps`, the ladder) adds
  `accuracy_by_stratum`, `step_error_rate` and `first_error_step_mean` (`data.ladder.grade`).
  """
  ev = exp.config.eval
  splits = {"dev": (exp.task.heldout, exp.heldout_prompts, exp.heldout_prompt_mask),
            "test": (getattr(exp.task, "test", []), exp.test_prompts, exp.test_prompt_mask)}
  chain_sum = exp.config.task.name == "chain_sum"
  steps = hasattr(exp.task, "check_steps")
  keys = {phase: jax.random.fold_in(exp.root_key(phase), seeds.PHASE_TAGS["eval"])
          for phase in ("sft", "")}

  def run_eval(params, temperature: float, num_samples: int, phase: str = "",
               split: str = "dev", limit: int = 0) -> dict:
    """`phase="sft"` samples with the SFT seed's key (`experiment.phase_seed`), so the SFT
    policy's evaluation is the same in every run that shares it."""
    heldout, prompts, prompt_mask = splits[split]
    batch_size = ev.batch_size
    if limit:  # A fixed subset; batches no larger than it (padding rows decode too).
      idx = evaluate.spread(len(heldout), limit)
      heldout, prompts, prompt_mask = [heldout[i] for i in idx], prompts[idx], prompt_mask[idx]
      batch_size = min(batch_size, len(heldout) * num_samples)
    key = keys["sft" if phase == "sft" else ""]
    params = models.cast_params(exp.model_cfg, params)  # master weights -> model.param_dtype
    strategy = sampling.Sampling(temperature=temperature)
    texts = evaluate.completions(params, prompts, prompt_mask, exp.tokenizer, key,
                                 cfg=exp.model_cfg, strategy=strategy,
                                 max_new_tokens=exp.max_new_tokens, num_samples=num_samples,
                                 batch_size=batch_size)
    examples = [heldout[i // num_samples] for i in range(len(texts))]
    if steps:
      out = ladder.grade(exp.task, texts, examples)
      ok = np.array([exp.task.score(t, e) for t, e in zip(texts, examples)], np.float32)
    else:
      ok = np.array([exp.task.score(t, e) for t, e in zip(texts, examples)], np.float32)
      out = {"accuracy": float(ok.mean())}
    ok = ok.reshape(len(heldout), num_samples).mean(axis=1)
    out["success_rate_histogram"] = evaluate.success_rate_histogram(ok)
    if chain_sum:
      carry = np.array([data.carry_class(e) for e in heldout])
      out["carry_accuracy"] = float(ok[carry].mean()) if carry.any() else 0.0
      out["no_carry_accuracy"] = float(ok[~carry].mean()) if (~carry).any() else 0.0
    return out

  return run_eval


def _periodic(run_eval, limit: int = 0):
  """The metrics of a periodic (greedy) dev evaluation: accuracy, and the step error rate if
  any; on `limit` dev problems when > 0 (`config.rl.eval_subset`, `_evaluator`)."""

  def periodic(params, step, phase: str = ""):
    del step
    out = run_eval(params, 0.0, 1, phase, limit=limit)
    metrics = {"heldout_accuracy": out["accuracy"]}
    if "step_error_rate" in out:
      metrics["heldout_step_error_rate"] = out["step_error_rate"]
    return metrics

  return periodic


def _full_eval(exp, run_eval, params, sweep_temperatures: bool, phase: str = "") -> dict:
  out = {"greedy": run_eval(params, 0.0, 1, phase),
         "sampled": run_eval(params, exp.config.sampling.temperature, exp.config.eval.num_samples,
                             phase)}
  if sweep_temperatures and exp.config.eval.temperatures:
    out["by_temperature"] = {str(t): run_eval(params, t, exp.config.eval.num_samples, phase)
                             for t in exp.config.eval.temperatures}
  return out


def _test_eval(exp, store: store_lib.Store, run_eval, key: str, params, phase: str = "") -> None:
  """The greedy test-set evaluation of `params`, kept in `store` under `key` ({'greedy': ...},
  as the dev evaluations); nothing without a test set (`config.task.test_size` = 0)."""
  if exp.test_prompts is not None:
    store.get(key, lambda: {"greedy": run_eval(params, 0.0, 1, phase, split="test")})


def _test_summary(exp, values: dict) -> dict:
  """The summary's test-set fields (greedy; the dev figures keep their names): test_size,
  sft_test_accuracy, rl_test_accuracy (and per stratum on the ladder); {} without a test set."""
  if "rl_test" not in values:
    return {}
  out = {"test_size": len(exp.task.test)}
  for phase in ("sft", "rl"):
    greedy = values[f"{phase}_test"]["greedy"]
    out[f"{phase}_test_accuracy"] = greedy["accuracy"]
    if "accuracy_by_stratum" in greedy:
      out[f"{phase}_test_accuracy_by_stratum"] = greedy["accuracy_by_stratum"]
  return out


def _step_summary(sft_eval: dict, rl_eval: dict) -> dict:
  """The ladder's summary fields (present when the task has a step checker)."""
  if "step_error_rate" not in sft_eval["greedy"]:
    return {}
  return {
      "sft_accuracy_by_stratum": sft_eval["greedy"]["accuracy_by_stratum"],
      "rl_accuracy_by_stratum": rl_eval["greedy"]["accuracy_by_stratum"],
      "sft_step_error_rate": sft_eval["greedy"]["step_error_rate"],
      "rl_step_error_rate": rl_eval["greedy"]["step_error_rate"],
      "sft_sampled_step_error_rate": sft_eval["sampled"]["step_error_rate"],
      "rl_sampled_step_error_rate": rl_eval["sampled"]["step_error_rate"],
  }


def control_steps(config: ml_collections.ConfigDict, prompt_len: int, demo_len: int) -> int:
  """Steps of the more-SFT control: `config.control.steps`, or (0) RL's training compute in
  SFT steps.

  Compute is counted in token passes of the padded shapes (a forward pass over a token = 1, a
  backward = 2), so the count follows from the config alone and every run of a command trains the
  same control. One RL step: generation (each prompt prefilled once, R = B·G rows decoding T
  tokens), the frozen reference pass when `kl_coef` > 0 and the TIS pass when `tis_cap` > 0
  (forward only), and `num_iterations` forward + backward passes; with `shared_prompts` a
  group's prompt is processed once, else once per row. One SFT step: forward + backward over
  `batch_size` rows of `prompt_len + demo_len` tokens. Not counted: held-out evaluations, the
  extra generation rounds of dynamic sampling, attention's quadratic term.
  """
  if config.control.steps:
    return int(config.control.steps)
  rl = config.rl
  b, t = rl.prompts_per_step, config.sampling.max_new_tokens
  r = requests_lib.batch_rows(config)  # B·G, or R_max for ragged groups (prompts not shared)
  shared = rl.shared_prompts and not requests_lib.is_ragged(config)
  rows = (b * prompt_len + r * t) if shared else r * (prompt_len + t)
  forward_only = int(bool(rl.kl_coef)) + int(bool(rl.tis_cap))
  rl_step = (b * prompt_len + r * t) + (forward_only + 3 * rl.num_iterations) * rows
  sft_step = 3 * config.sft.batch_size * (prompt_len + demo_len)
  return max(1, round(rl.steps * rl_step / sft_step))


def _train_and_evaluate(exp, store: store_lib.Store, run_eval, periodic, writer) -> dict:
  """SFT (or init_from), RL and the control with their evaluations (kept in `store`); returns
  the control's summary fields. Checks for a stop signal after every phase and evaluation.

  The RL phase's periodic evaluations use `config.rl.eval_subset` dev problems (0 = all); the
  final ones the whole dev set, and the test set when there is one."""
  config = exp.config
  if config.init_from:
    sft = init_from.load_sft(exp, config.init_from)
  else:
    sft = phases.sft(exp, "sft", phases.init_params(exp), config.sft.steps, writer,
                     eval_fn=functools.partial(periodic, phase="sft"))
  signals.check("the SFT phase")
  store.get("sft", lambda: _full_eval(exp, run_eval, sft.params, True, "sft"))
  store.get("sft_seconds", lambda: sft.train_seconds)
  _test_eval(exp, store, run_eval, "sft_test", sft.params, "sft")
  signals.check("the SFT evaluation")
  # The SFT parameters are read after RL only by the more-SFT control.
  rl = phases.rl(exp, sft.params, writer, eval_fn=_periodic(run_eval, config.rl.eval_subset),
                 release_sft_params=not config.control.enabled)
  signals.check("the RL phase")
  store.get("rl", lambda: _full_eval(exp, run_eval, rl.params, False))
  store.get("rl_seconds", lambda: rl.train_seconds)
  _test_eval(exp, store, run_eval, "rl_test", rl.params)
  signals.check("the RL evaluation")
  summary = {}
  if config.control.enabled:
    # As many SFT steps as RL's training compute buys (or control.steps): fixed by the config,
    # stored so a resumed run keeps the count it started with. Wall time is only reported.
    more_steps = store.get("sft_more_steps", lambda: control_steps(
        config, exp.train_prompts.shape[1], exp.demo_tokens.shape[1]))
    more = phases.sft(exp, "sft_more", sft.params, more_steps, writer)
    signals.check("the more-SFT control")
    more_eval = store.get("sft_more", lambda: _full_eval(exp, run_eval, more.params, False))
    store.get("sft_more_seconds", lambda: more.train_seconds)
    _test_eval(exp, store, run_eval, "sft_more_test", more.params)
    if "sft_more_test" in store.values:
      summary["sft_more_test_accuracy"] = store.values["sft_more_test"]["greedy"]["accuracy"]
    summary.update(sft_more_accuracy=more_eval["greedy"]["accuracy"],
                   sft_more_sampled_accuracy=more_eval["sampled"]["accuracy"],
                   sft_more_steps=more_steps,
                   sft_more_train_seconds=store.values["sft_more_seconds"])
  return summary


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs (or resumes) the experiment described by `config` in `workdir`; returns the summary.

  Turns on the persistent compilation cache at `config.compile_cache_dir` ('' = off) first.
  SIGTERM and SIGINT stop it at the next step boundary with a checkpoint of that step
  (`signals.Preempted`); re-running resumes. Raises `config_check.ConfigError` for an
  out-of-range config field or a bad work dir before anything runs, and
  `fingerprint.ConfigMismatch` when `workdir` holds a run of another configuration.

  A work dir's run continues to more RL steps when only `rl.steps` was raised and the steps taken
  do not depend on it (`fingerprint.continuation`: a constant learning rate after warmup): RL
  goes on from the last checkpoint and the final evaluations are made again at the new last step.
  The result is the run the longer config makes from scratch (tests/train/test_resume.py).
  """
  config_check.check(config)
  config_check.check_workdir(workdir)
  continued = fingerprint.check(workdir, config, _stored_config(workdir), continuable=True)
  compile_cache.configure(config.compile_cache_dir, config.compile_cache_min_seconds,
                          config.compile_cache_max_gb)
  with signals.catch():
    return _run(config, workdir, continued)


def _reward_faults(workdir: str) -> dict:
  """`reward_errors` / `reward_timeouts`: reward calls of the RL phase that raised / ran past
  their limit and scored 0 (from metrics.jsonl, whose records a resumed run does not repeat)."""
  out = {"reward_errors": 0, "reward_timeouts": 0}
  if not os.path.exists(os.path.join(workdir, workdir_lib.METRICS_FILE)):
    return out
  for record in read_metrics(workdir):
    out["reward_errors"] += int(record.get("reward/errors", 0))
    out["reward_timeouts"] += int(record.get("reward/timeouts", 0))
  return out


def _stored_config(workdir: str):
  """The run_config.json of a run made before config fingerprints existed (None if absent)."""
  path = os.path.join(workdir, workdir_lib.RUN_CONFIG_FILE)
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    try:
      return json.load(f)
    except ValueError as e:
      raise ValueError(f"{path} is not valid JSON ({e})") from None


def _run(config: ml_collections.ConfigDict, workdir: str,
         continued: Optional[tuple[int, int]] = None) -> dict:
  t_start = time.time()
  primary = parallel.is_primary()
  os.makedirs(workdir, exist_ok=True)
  if primary:
    fingerprint.record(workdir, config)  # The work dir's configuration (checked by `run`).
    workdir_lib.save_config(config, workdir)  # experiments.eval / export rebuild the run from it
  if config.init_from and primary:
    init_from.prepare(config.init_from, workdir)
  parallel.sync("loop.prepare")
  exp = experiment.build(config, workdir)
  store = store_lib.Store(os.path.join(workdir, workdir_lib.EVALS_FILE))
  clock = workdir_lib.WallClock(workdir, store.values.get("previous_wall_seconds", 0.0),
                                primary=primary, start=t_start)
  store.on_set = clock.tick
  parallel.sync("loop.store")  # Every process has read the files before process 0 rewrites them.
  if continued is not None:
    store_lib.continue_run(config, workdir, store, continued)
  if config.init_from:
    init_from.check_same_data(config.init_from, workdir)
    source_evals = store_lib.Store(os.path.join(config.init_from, workdir_lib.EVALS_FILE)).values
    for key in ("sft", "sft_seconds"):  # Its SFT evaluations are this run's too.
      if key in source_evals and key not in store.values:
        store.set(key, source_evals[key])
  run_eval = _evaluator(exp)
  periodic = _periodic(run_eval)
  try:
    # The context mesh lets jitted code constrain the buffers it creates (`parallel.shard_batch`).
    with MetricsWriter(workdir, enabled=primary, on_write=clock.tick) as writer, \
        jax.set_mesh(exp.mesh):
      summary = _train_and_evaluate(exp, store, run_eval, periodic, writer)
  finally:
    if "reward_scorer" in exp.__dict__:  # Built by the RL phase.
      exp.reward_scorer.close()
  sft_eval, rl_eval = store.values["sft"], store.values["rl"]
  signals.check("the evaluations")
  by_t = sft_eval.get("by_temperature")
  if by_t:
    best_t = max(by_t, key=lambda t: by_t[t]["accuracy"])
    summary.update(sft_best_temperature_accuracy=by_t[best_t]["accuracy"],
                   sft_best_temperature=float(best_t))
  summary.update(_step_summary(sft_eval, rl_eval))
  summary.update(_test_summary(exp, store.values))
  summary.update(
      sft_accuracy=sft_eval["greedy"]["accuracy"],
      rl_accuracy=rl_eval["greedy"]["accuracy"],
      sft_sampled_accuracy=sft_eval["sampled"]["accuracy"],
      rl_sampled_accuracy=rl_eval["sampled"]["accuracy"],
      sft_success_rate_histogram=sft_eval["sampled"]["success_rate_histogram"]["counts"],
      sft_success_rate_shares={k: v for k, v in
                               sft_eval["sampled"]["success_rate_histogram"].items()
                               if k.startswith("share")},
      rl_success_rate_histogram=rl_eval["sampled"]["success_rate_histogram"]["counts"],
      success_rate_samples=config.eval.num_samples,
      rl_steps=config.rl.steps, sft_steps=config.sft.steps,
      sft_train_seconds=store.values["sft_seconds"], rl_train_seconds=store.values["rl_seconds"],
      heldout_size=len(exp.task.heldout), seed=config.seed,
      sft_seed=experiment.sft_seed(config), init_from=config.init_from,
      evals={k: store.values[k] for k in ("sft", "rl", "sft_more", "sft_test", "rl_test",
                                          "sft_more_test") if k in store.values},
      **_reward_faults(workdir),
  )
  summary["wall_seconds"] = clock.total()
  if primary:
    # RL starts from the SFT policy: its greedy held-out accuracy is the RL curve's step 0.
    start = {"heldout_accuracy": sft_eval["greedy"]["accuracy"]}
    if "step_error_rate" in sft_eval["greedy"]:
      start["heldout_step_error_rate"] = sft_eval["greedy"]["step_error_rate"]
    plot_curves(workdir, starts={"rl": start})
    tmp = os.path.join(workdir, workdir_lib.SUMMARY_FILE + ".tmp")
    with open(tmp, "w") as f:
      json.dump(summary, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(workdir, workdir_lib.SUMMARY_FILE))
  parallel.sync("loop.done")
  return summary
