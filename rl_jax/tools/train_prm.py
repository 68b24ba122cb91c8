"""PRMs from a finished run: train them on the run's policy's rollouts (`experiments/train_prm.py`
is thin flags over `train`; `tools.judge_prm` judges the PRMs it writes).
"""

from __future__ import annotations

import json
import os
import time
from typing import Sequence

import jax
import numpy as np

from rl_jax import experiment, seeds
from rl_jax import workdir as workdir_lib
from rl_jax.evals import runner
from rl_jax.train_state import optim_config
from rl_jax.value.prm import data as prm_data
from rl_jax.value.prm import model as prm_lib
from rl_jax.value.prm import pav as pav_lib
from rl_jax.value.prm import segments as steps_lib

KINDS = ("pav", "orm", "pav_tree", "truth")


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
  problems, `config.rl.eptree` options; truth: the task's step checker, the learnable ceiling),
  fits one PRM per kind (initialised from the policy) and saves each under `out_dir/<kind>`.
  Returns (and writes to out_dir/train_prm.json) the timings, label statistics and loss logs."""
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
    elif kind == "truth":
      labels, weights = prm_data.truth_labels(exp, comps, segs)
    else:
      labels, weights = prm_data.outcome_labels(comps, segs)
    t_label = time.perf_counter() - t1
    spec = prm_lib.PRMSpec(model=exp.model_cfg, delimiters=delim,
                           ignore_ids=(exp.tokenizer.eos_id, exp.tokenizer.pad_id), kind=kind,
                           prover_k=prover_k if kind not in ("orm", "truth") else 1)
    params = prm_lib.init_from_policy(exp.model_cfg, policy, base_rate=float(comps.rewards.mean()))
    optim = optim_config(lr, warmup_steps=min(20, steps // 10), schedule="cosine",
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
