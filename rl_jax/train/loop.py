"""The default experiment: SFT warm start -> RL -> held-out evaluation, plus the controls.

    summary = run(config, workdir)

writes `workdir/summary.json`, `metrics.jsonl`, TensorBoard events (`tb/`), `curves.png` and
orbax checkpoints (`checkpoints/<phase>/`). Every phase resumes from its latest checkpoint, and
finished evaluations are kept in `evals.json`, so re-running the same command after a crash
continues where it stopped.

With `config.init_from=OTHER_WORKDIR` the SFT phase is not run: its final checkpoint, tokenizer
and SFT evaluations are taken from that run (which must have the same task, tokenizer and
model settings), so a sweep of RL variants can share one SFT.
"""

from __future__ import annotations

import json
import os
import time

import jax
import ml_collections
import numpy as np

from rl_jax import data, sampling
from rl_jax.data import ladder
from rl_jax.metrics import MetricsWriter, plot_curves
from rl_jax.train import evaluate, experiment, init_from, phases

SUMMARY_FILE = "summary.json"
EVALS_FILE = "evals.json"


class _Store:
  """A JSON dict on disk, rewritten atomically on every `set`."""

  def __init__(self, path: str):
    self.path = path
    self.values = {}
    if os.path.exists(path):
      with open(path) as f:
        self.values = json.load(f)

  def get(self, key, compute):
    if key not in self.values:
      self.set(key, compute())
    return self.values[key]

  def set(self, key, value):
    self.values[key] = value
    tmp = f"{self.path}.tmp"
    with open(tmp, "w") as f:
      json.dump(self.values, f, indent=1, sort_keys=True)
    os.replace(tmp, self.path)


def _evaluator(exp: experiment.Experiment):
  """Returns eval(params, temperature, num_samples) -> dict of results on the held-out set.

  Every task gets `accuracy` (mean of `task.score`) and `success_rate_histogram` (per-prompt
  success rates over the samples; meaningful with several samples). chain_sum adds the accuracy
  on and off its carry class; a task with a step checker (`check_steps`, the ladder) adds
  `accuracy_by_stratum`, `step_error_rate` and `first_error_step_mean` (`data.ladder.grade`).
  """
  ev = exp.config.eval
  heldout = exp.task.heldout
  carry = (np.array([data.carry_class(e) for e in heldout])
           if exp.config.task.name == "chain_sum" else None)
  steps = hasattr(exp.task, "check_steps")
  key = jax.random.fold_in(exp.root_key(), phases.PHASE_TAGS["eval"])

  def run_eval(params, temperature: float, num_samples: int) -> dict:
    strategy = sampling.Sampling(temperature=temperature)
    texts = evaluate.completions(params, exp.heldout_prompts, exp.heldout_prompt_mask,
                                 exp.tokenizer, key, cfg=exp.model_cfg, strategy=strategy,
                                 max_new_tokens=exp.max_new_tokens, num_samples=num_samples,
                                 batch_size=ev.batch_size)
    examples = [heldout[i // num_samples] for i in range(len(texts))]
    if steps:
      out = ladder.grade(exp.task, texts, examples)
      ok = np.array([exp.task.score(t, e) for t, e in zip(texts, examples)], np.float32)
    else:
      ok = np.array([exp.task.score(t, e) for t, e in zip(texts, examples)], np.float32)
      out = {"accuracy": float(ok.mean())}
    ok = ok.reshape(len(heldout), num_samples).mean(axis=1)
    out["success_rate_histogram"] = evaluate.success_rate_histogram(ok)
    if carry is not None:
      out["carry_accuracy"] = float(ok[carry].mean()) if carry.any() else 0.0
      out["no_carry_accuracy"] = float(ok[~carry].mean()) if (~carry).any() else 0.0
    return out

  return run_eval


def _periodic(run_eval):
  """The metrics of a periodic (greedy) evaluation: accuracy, and the step error rate if any."""

  def periodic(params, step):
    del step
    out = run_eval(params, 0.0, 1)
    metrics = {"heldout_accuracy": out["accuracy"]}
    if "step_error_rate" in out:
      metrics["heldout_step_error_rate"] = out["step_error_rate"]
    return metrics

  return periodic


def _full_eval(exp, run_eval, params, sweep_temperatures: bool) -> dict:
  out = {"greedy": run_eval(params, 0.0, 1),
         "sampled": run_eval(params, exp.config.sampling.temperature, exp.config.eval.num_samples)}
  if sweep_temperatures and exp.config.eval.temperatures:
    out["by_temperature"] = {str(t): run_eval(params, t, exp.config.eval.num_samples)
                             for t in exp.config.eval.temperatures}
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


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs (or resumes) the experiment described by `config` in `workdir`; returns the summary."""
  t_start = time.time()
  os.makedirs(workdir, exist_ok=True)
  if config.init_from:
    init_from.prepare(config.init_from, workdir)
  exp = experiment.build(config, workdir)
  store = _Store(os.path.join(workdir, EVALS_FILE))
  if config.init_from:
    init_from.check_same_data(config.init_from, workdir)
    source_evals = _Store(os.path.join(config.init_from, EVALS_FILE)).values
    for key in ("sft", "sft_seconds"):  # Its SFT evaluations are this run's too.
      if key in source_evals and key not in store.values:
        store.set(key, source_evals[key])
  run_eval = _evaluator(exp)
  periodic = _periodic(run_eval)
  # The context mesh lets jitted code constrain the buffers it creates (`parallel.shard_batch`).
  with MetricsWriter(workdir) as writer, jax.set_mesh(exp.mesh):
    if config.init_from:
      sft = init_from.load_sft(exp, config.init_from)
    else:
      sft = phases.sft(exp, "sft", phases.init_params(exp), config.sft.steps, writer,
                       eval_fn=periodic)
    sft_eval = store.get("sft", lambda: _full_eval(exp, run_eval, sft.params, True))
    store.get("sft_seconds", lambda: sft.train_seconds)
    rl = phases.rl(exp, sft.params, writer, eval_fn=periodic)
    rl_eval = store.get("rl", lambda: _full_eval(exp, run_eval, rl.params, False))
    store.get("rl_seconds", lambda: rl.train_seconds)
    summary = {}
    if config.control.enabled:
      # More SFT for as long as RL trained: steps = RL seconds / SFT seconds per step.
      more_steps = store.get("sft_more_steps", lambda: max(1, round(
          store.values["rl_seconds"] / max(store.values["sft_seconds"] / max(sft.steps - 1, 1),
                                           1e-9))))
      more = phases.sft(exp, "sft_more", sft.params, more_steps, writer)
      more_eval = store.get("sft_more", lambda: _full_eval(exp, run_eval, more.params, False))
      summary.update(sft_more_accuracy=more_eval["greedy"]["accuracy"],
                     sft_more_sampled_accuracy=more_eval["sampled"]["accuracy"],
                     sft_more_steps=more_steps)
  by_t = sft_eval.get("by_temperature")
  if by_t:
    best_t = max(by_t, key=lambda t: by_t[t]["accuracy"])
    summary.update(sft_best_temperature_accuracy=by_t[best_t]["accuracy"],
                   sft_best_temperature=float(best_t))
  summary.update(_step_summary(sft_eval, rl_eval))
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
      heldout_size=len(exp.task.heldout), seed=config.seed, init_from=config.init_from,
      evals={k: store.values[k] for k in ("sft", "rl", "sft_more") if k in store.values},
  )
  summary["wall_seconds"] = time.time() - t_start + store.values.get("previous_wall_seconds", 0.0)
  store.set("previous_wall_seconds", summary["wall_seconds"])
  plot_curves(workdir)
  tmp = os.path.join(workdir, SUMMARY_FILE + ".tmp")
  with open(tmp, "w") as f:
    json.dump(summary, f, indent=1, sort_keys=True)
  os.replace(tmp, os.path.join(workdir, SUMMARY_FILE))
  return summary
