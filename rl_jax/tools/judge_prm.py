"""PRMs of a finished run judged on held-out completions against the task's step checker
(`experiments/eval_prm.py` is thin flags over `evaluate`; `value.prm.judge` defines each number).
"""

from __future__ import annotations

import json
import os
import time
from typing import Sequence

import jax
import numpy as np

from rl_jax import seeds
from rl_jax.tools.train_prm import load_run, spread_ids
from rl_jax.value.prm import data as prm_data, judge as prm_eval
from rl_jax.value.prm import model as prm_lib
from rl_jax.value.prm import segments as steps_lib


def evaluate(workdir: str, prm_dirs: Sequence[str], out_dir: str, *, phase: str = "sft",
             num_prompts: int = 300, samples: int = 8, max_steps: int = 10, seed: int = 0,
             write: bool = True) -> dict:
  """Judges each PRM in `prm_dirs` on `samples` held-out completions of `num_prompts` problems
  from the run's policy (`value.prm.judge`'s metrics); writes out_dir/prm-PHASE.json and .md."""
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
    result["prms"][_name(d, prm_dirs)] = dict(m, kind=spec.kind, dir=d)
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


def _name(d: str, dirs: Sequence[str]) -> str:
  """A PRM's row name: its directory's base name, with its parent's when another PRM of `dirs`
  has the same base name (train_prm saves each PRM under OUT/<kind>)."""
  base = lambda x: os.path.basename(os.path.normpath(x)) or x
  if sum(base(x) == base(d) for x in dirs) > 1:
    return os.path.join(base(os.path.dirname(os.path.normpath(d))), base(d))
  return base(d)


def markdown(result: dict) -> str:
  """One table row per PRM, plus the policy's own best-of-N references."""
  n = result["samples"]
  lines = [f"# PRMs on {result['problems']} held-out problems x {n} samples "
           f"({result['workdir']}, {result['phase']} policy)", "",
           f"Policy accuracy {result['policy_accuracy']:.3f}; best-of-{n} references: first "
           f"sample {result['first']:.3f}, majority vote {result['majority']:.3f}, oracle "
           f"{result['oracle']:.3f}.", "",
           "| PRM | kind | first-wrong-step acc (tau) | on wrong / on correct | acc at tau 0.5 | "
           "by progress (delta) | constant guess | step AUROC | AUROC (progress) | "
           f"best-of-{n} min / last |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for name, m in result["prms"].items():
    lines.append(f"| {name} | {m['kind']} | {m['first_wrong_acc']:.3f} ({m['tau']:.2f}) | "
                 f"{m['first_wrong_acc_on_wrong']:.3f} / {m['first_wrong_acc_on_correct']:.3f} | "
                 f"{m['first_wrong_acc_tau05']:.3f} | "
                 f"{m['first_wrong_acc_progress']:.3f} ({m['delta']:.2f}) | "
                 f"{m['first_wrong_acc_constant']:.3f} | "
                 f"{m['auroc']:.3f} | "
                 f"{m['auroc_progress']:.3f} | {m['bon_min']:.3f} / {m['bon_last']:.3f} |")
  return "\n".join(lines) + "\n"
