"""PRMs from a finished run: train them on the run's policy's rollouts, judge them on held-out
completions against the task's step checker (`experiments/train_prm.py`, `experiments/eval_prm.py`
are thin flags over these two functions).
"""

from __future__ import annotations

import json
import os
import time
from typing import Sequence

import jax
import numpy as np

from experiments.configs import common
from rl_jax import experiment, seeds
from rl_jax import workdir as workdir_lib
from rl_jax.evals import runner
from rl_jax.value.prm import data as prm_data, judge as prm_eval
from rl_jax.value.prm import model as prm_lib
from rl_jax.value.prm import pav as pav_lib
from rl_jax.value.prm import segments as steps_lib

KINDS = ("pav", "orm", "pav_tree")


def load_run(workdir: str, phase: str = "sft"):
  """(experiment, policy params of `phase`) of a finished run."""
  exp = experiment.build(workdir_lib.load_config(workdir), workdir)
  return exp, runner.load_params(exp, phase)


def delimiters(exp, delimiter: str, token_ids: Sequence[int]) -> tuple[int, ...]:
  """Explicit `token_ids`, else every token whose text holds `delimiter`."""
  return tuple(int(i) for i in token_ids) or steps_lib.delimiter_ids(exp.tokenizer, delimiter)


def spread_ids(n_total: int, n: int) -> np.ndarray:
  """n problem indices spread evenly over [0, n_total) (the ladder's splits are stratum-ordered,
  so every stratum is represented)."""
  return np.unique(np.linspace(0, n_total - 1, min(n, n_total)).round().astype(np.int64))


def train(workdir: str, out_dir: str, *, kinds: Sequence[str] = ("pav", "orm"),
          phase: str = "sft", num_prompts: int = 256, samples: int = 4, n_mc: int = 4,
          prover_k: int = 1, steps: int = 400, batch_size: int = 64, lr: float = 5e-4,
          delimiter: str = "\n", token_ids: Sequence[int] = (), max_steps: int = 10,
          seed: int = 0) -> dict:
  """Samples the run's policy on train problems, labels the step prefixes (PAV: Monte Carlo
  continuations; ORM: the outcome; pav_tree: the node values of EPTree rollouts of the same
  problems, `config.rl.eptree` options), fits one PRM per kind (initialised from the policy) and saves
  each under `out_dir/<kind>`. Returns (and writes to out_dir/train_prm.json) the timings, label
  statistics and loss logs."""
  for k in kinds:
    if k not in KINDS:
      raise ValueError(f"kind {k!r}; expected some of {KINDS}")
  t0 = time.perf_counter()
  exp, policy = load_run(workdir, phase)
  key = jax.random.fold_in(jax.random.key(seed), seeds.PRM_DATA)
  delim = delimiters(exp, delimiter, token_ids)
  ids = np.random.default_rng([seed, seeds.PRM_DATA]).choice(len(exp.task.train), num_prompts,
                                                   replace=False)
  comps = prm_data.sample(exp, policy, "train", ids, samples, jax.random.fold_in(key, 0))
  segs = prm_data.segment(exp, comps, delim, max_steps)
  result = {"workdir": workdir, "phase": phase, "num_completions": len(comps.tokens),
            "policy_accuracy": float(comps.rewards.mean()), "delimiters": list(delim),
            "sample_seconds": time.perf_counter() - t0, "models": {}}
  for kind in kinds:
    t1 = time.perf_counter()
    data, data_segs = comps, segs
    if kind == "pav_tree":  # EPTree node values of fresh tree rollouts of the same problems
      data, values, _, decoded = prm_data.sample_tree(exp, policy, ids, jax.random.fold_in(key, 2))
      data_segs = prm_data.segment(exp, data, delim, max_steps)
      labels, weights = prm_data.tree_labels(values, data_segs)
      labels = np.asarray(pav_lib.best_of_k(labels, prover_k)) * (weights > 0)
      result.setdefault("tree_decode_tokens", decoded)
    elif kind == "pav":
      labels, weights = prm_data.mc_labels(exp, policy, comps, segs, n_mc,
                                           jax.random.fold_in(key, 1), prover_k=prover_k)
    else:
      labels, weights = prm_data.outcome_labels(comps, segs)
    t_label = time.perf_counter() - t1
    spec = prm_lib.PRMSpec(model=exp.model_cfg, delimiters=delim,
                           ignore_ids=(exp.tokenizer.eos_id, exp.tokenizer.pad_id), kind=kind,
                           prover_k=prover_k if kind != "orm" else 1)
    params = prm_lib.init_from_policy(exp.model_cfg, policy, base_rate=float(comps.rewards.mean()))
    optim = common.optim(lr, warmup_steps=min(20, steps // 10), schedule="cosine",
                         end_lr_frac=0.1)
    params, log = prm_data.fit(spec, params, data, labels, weights, steps=steps,
                               batch_size=batch_size, optim=optim, seed=seed)
    prm_lib.save(os.path.join(out_dir, kind), spec, params,
                 meta={"kind": kind, "n_mc": n_mc, "steps": steps, "workdir": workdir})
    w = weights > 0
    result["models"][kind] = {"label_seconds": t_label, "fit_seconds": time.perf_counter() - t1
                              - t_label, "labels": int(w.sum()),
                              "label_mean": float(labels[w].mean()), "log": log,
                              "dir": os.path.join(out_dir, kind)}
  result["seconds"] = time.perf_counter() - t0
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "train_prm.json"), "w") as f:
    json.dump(result, f, indent=1)
  return result


def evaluate(workdir: str, prm_dirs: Sequence[str], out_dir: str, *, phase: str = "sft",
             num_prompts: int = 300, samples: int = 8, max_steps: int = 10, seed: int = 0,
             write: bool = True) -> dict:
  """Judges each PRM in `prm_dirs` on `samples` held-out completions of `num_prompts` problems
  from the run's policy (`prm_eval`'s metrics); writes out_dir/prm-PHASE.json and .md."""
  t0 = time.perf_counter()
  exp, policy = load_run(workdir, phase)
  if not hasattr(exp.task, "check_steps"):
    raise ValueError(f"the run's task {exp.config.task.name!r} has no step checker; eval_prm "
                     "needs true step labels (the ladder task)")
  key = jax.random.fold_in(jax.random.key(seed), seeds.PRM_JUDGE)
  ids = spread_ids(len(exp.task.heldout), num_prompts)
  comps = prm_data.sample(exp, policy, "heldout", ids, samples, key)
  examples = comps.examples(exp)
  checks = [exp.task.check_steps(t, e) for t, e in zip(comps.texts, examples)]
  answers = [prm_eval.final_answer(t) for t in comps.texts]
  result = {"workdir": workdir, "phase": phase, "problems": len(ids), "samples": samples,
            "policy_accuracy": float(comps.rewards.mean()),
            "first": float(comps.rewards.reshape(-1, samples)[:, 0].mean()),
            "majority": prm_eval.majority(comps.rewards, answers, samples),
            "oracle": float(comps.rewards.reshape(-1, samples).max(1).mean()), "prms": {}}
  problem = np.repeat(np.arange(len(ids)), samples)
  for d in prm_dirs:
    spec, params, _ = prm_lib.load(d)
    segs = prm_data.segment(exp, comps, spec.delimiters, max_steps)
    labels, lmask, kept = prm_eval.true_labels(checks, comps.texts, segs.num_steps, max_steps)
    vals = prm_lib.predict_batched(spec, params, comps.prompt, comps.prompt_mask, comps.tokens,
                                   comps.mask)
    v0, q = steps_lib.gather_steps(vals, segs)
    v0, q = np.asarray(v0), np.asarray(q)
    m = prm_eval.judge(q[kept], v0[kept], labels[kept], lmask[kept], problem[kept])
    qmin = np.where(segs.step_mask, q, np.inf).min(1)
    qlast = q[np.arange(len(q)), np.maximum(segs.num_steps - 1, 0)]
    m.update(rows_left_out=int((~kept).sum()),
             bon_min=prm_eval.best_of_n(qmin, comps.rewards, answers, samples),
             bon_last=prm_eval.best_of_n(qlast, comps.rewards, answers, samples))
    result["prms"][os.path.basename(os.path.normpath(d)) or d] = dict(m, kind=spec.kind, dir=d)
  result["seconds"] = time.perf_counter() - t0
  if write:
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, f"prm-{phase}")
    with open(stem + ".json", "w") as f:
      json.dump(result, f, indent=1)
    with open(stem + ".md", "w") as f:
      f.write(markdown(result))
    result["files"] = [stem + ".json", stem + ".md"]
  return result


def markdown(result: dict) -> str:
  """One table row per PRM, plus the policy's own best-of-N references."""
  n = result["samples"]
  lines = [f"# PRMs on {result['problems']} held-out problems x {n} samples "
           f"({result['workdir']}, {result['phase']} policy)", "",
           f"Policy accuracy {result['policy_accuracy']:.3f}; best-of-{n} references: first "
           f"sample {result['first']:.3f}, majority vote {result['majority']:.3f}, oracle "
           f"{result['oracle']:.3f}.", "",
           "| PRM | kind | first-wrong-step acc (tau) | on wrong / on correct | acc at tau 0.5 | "
           f"constant guess | step AUROC | AUROC (progress) | best-of-{n} min / last |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
  for name, m in result["prms"].items():
    lines.append(f"| {name} | {m['kind']} | {m['first_wrong_acc']:.3f} ({m['tau']:.2f}) | "
                 f"{m['first_wrong_acc_on_wrong']:.3f} / {m['first_wrong_acc_on_correct']:.3f} | "
                 f"{m['first_wrong_acc_tau05']:.3f} | {m['first_wrong_acc_constant']:.3f} | "
                 f"{m['auroc']:.3f} | "
                 f"{m['auroc_progress']:.3f} | {m['bon_min']:.3f} / {m['bon_last']:.3f} |")
  return "\n".join(lines) + "\n"
