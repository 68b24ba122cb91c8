"""The comparisons a pre-registration declares, judged on a sweep's finished runs.

`registered(runs, reg, ...)` keeps the SFT draws whose every registered row and seed finished
(the stopping rule's complete blocks), estimates each declared comparison with the SFT draw as a
random effect (`report_stats.effect`), adjusts the p-values by Holm over the declared
comparisons, adds a Bonferroni-corrected interval, the exact sign test, Fieller's interval for
each declared share, what each method's mechanism did, and the registration's and the runs'
commits. Anything the file does not declare is exploratory. `registered_markdown` renders it.
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from experiments import prereg as prereg_lib
from experiments.report_stats import effect, fieller, holm, t975, t_quantile
from experiments.report_stats import json_number as _num
from rl_jax.metrics import read_metrics

# Per-step metrics that show a registered row's mechanism acted (means over RL steps and runs).
MECHANISM_KEYS = ("process/wrong_step_rows", "process/progress_abs", "tree_forks",
                  "tree_decode_tokens", "rollout_tokens")
# The held-out PRM judgement (experiments.eval_prm) read for a row that uses a PRM.
JUDGE_KEYS = ("first_wrong_acc", "first_wrong_acc_constant", "auroc")


def blocks(runs: list[dict], reg: dict) -> tuple[list, dict]:
  """(complete SFT draws in the file's order, {incomplete draw: runs missing}) of the registered
  rows x seeds."""
  have = {(r["sft"], r["variant"], r["seed"]) for r in runs}
  complete, missing = [], {}
  for sft in reg["sft_draws"]:
    lack = sum((sft, row, seed) not in have for row in reg["rows"] for seed in reg["rl_seeds"])
    if lack == 0:
      complete.append(sft)
    elif lack < len(reg["rows"]) * len(reg["rl_seeds"]):
      missing[sft] = lack
  return complete, missing


def _finals(runs: list[dict], key: str, row: str, draws: list) -> dict:
  return {(r["sft"], r["seed"]): r[key] for r in runs if r["variant"] == row and r["sft"] in draws}


def _mechanism(runs: list[dict], row: str, draws: list) -> dict:
  out: dict = {}
  for r in runs:
    if r["variant"] != row or r["sft"] not in draws:
      continue
    recs = [m for m in read_metrics(r["workdir"]) if m.get("phase") == "rl"]
    for k in MECHANISM_KEYS:
      vals = [m[k] for m in recs if k in m]
      if vals:
        out.setdefault(k, []).append(float(np.mean(vals)))
    cfg = os.path.join(r["workdir"], "run_config.json")
    prm_dir = ""
    if os.path.exists(cfg):
      with open(cfg) as f:
        prm_dir = json.load(f).get("rl", {}).get("process", {}).get("prm_dir", "")
    for path in glob.glob(os.path.join(os.path.dirname(prm_dir), "judge", "*.json")
                          ) if prm_dir else ():
      with open(path) as f:
        judged = next(iter(json.load(f).get("prms", {}).values()), {})
      for k in JUDGE_KEYS:
        if k in judged:
          out.setdefault(f"prm/{k}", {})[r["sft"]] = judged[k]
  return {k: (_num(float(np.mean(list(v.values() if isinstance(v, dict) else v))))
              if v else None) for k, v in out.items()}


def provenance(path: str, launches: str | None) -> dict:
  """The registration's commits and the sweep's launches: whether the registration's last change
  precedes (is an ancestor of) every launch's commit and the file is unchanged since."""
  reg = prereg_lib.registration(path)
  out = dict(registered=reg["added"], last_changed=reg["changed"], launches=[],
             registration_precedes_runs=None)
  if launches and os.path.exists(launches):
    with open(launches) as f:
      # Each launch's commit, clean tree and start; its run list is counted, not copied (work
      # dirs are paths of one machine).
      out["launches"] = [dict({k: e[k] for k in ("commit", "clean", "started") if k in e},
                              runs=len(e.get("runs", ())))
                         for e in map(json.loads, filter(str.strip, f))]
  if out["launches"]:
    out["first_run_started"] = min(e["started"] for e in out["launches"])
  if reg["changed"] and out["launches"]:
    checks = [prereg_lib.is_ancestor(path, reg["changed"][0], e["commit"])
              for e in out["launches"] if e.get("commit")]
    out["registration_precedes_runs"] = (None if None in checks or not checks
                                         else all(checks))
  return out


def registered(runs: list[dict], reg: dict, key: str, path: str,
               launches: str | None = None) -> dict:
  """The registered comparisons on `runs` (report.load_run records with 'sft', 'variant',
  'seed', `key` and 'workdir'): see the module docstring. `path`: the registration file."""
  complete, missing = blocks(runs, reg)
  analysis = reg["analysis"]
  alpha = float(analysis.get("alpha", 0.05))
  judged = len(complete) >= reg["min_sft_draws"]
  comps = []
  for c in reg["comparisons"]:
    a, b = (_finals(runs, key, c[k], complete) for k in ("method", "baseline"))
    e = effect({u: a[u] - b[u] for u in set(a) & set(b)}, c["direction"])
    comps.append(dict(c, **e))
  adjusted = holm({c["id"]: c["p"] for c in comps})
  m = sum(np.isfinite(c["p"]) for c in comps)
  for c in comps:
    c["p_holm"] = adjusted[c["id"]]
    dof = c["dof"]
    if dof >= 1 and np.isfinite(c["ci"]) and m:
      se = c["ci"] / t975(dof)
      c["ci_corrected"] = t_quantile(1 - alpha / (2 * m), dof) * se
    else:
      c["ci_corrected"] = float("nan")
    c["replicated"] = (bool(c["p_holm"] < alpha) if judged and np.isfinite(c["p_holm"])
                       else None)
  shares = []
  for s in reg.get("shares", ()):
    meth, orac, base = (_finals(runs, key, s[k], complete) for k in ("method", "oracle",
                                                                      "baseline"))
    units = set(meth) & set(orac) & set(base)
    f = fieller({u: meth[u] - base[u] for u in units}, {u: orac[u] - base[u] for u in units})
    shares.append(dict(s, share=_num(f["ratio"]), fieller95=[_num(f["low"]), _num(f["high"])],
                       bounded=f["bounded"], replicates=f["n"]))
  variants = sorted({r["variant"] for r in runs})
  return dict(
      study=reg["study"], file=path, metric=key, alpha=alpha, correction=analysis["correction"],
      sft_draws_complete=complete, sft_draws_incomplete={str(k): v for k, v in missing.items()},
      min_sft_draws=reg["min_sft_draws"], judged=judged,
      comparisons=[{k: (_num(v) if isinstance(v, float) else v) for k, v in c.items()}
                   for c in comps],
      shares=shares,
      # Every registered row, so a declared check that compares rows (LATR's rollout tokens
      # against its control's) has both sides.
      mechanism={row: _mechanism(runs, row, complete) for row in reg["rows"]},
      mechanism_checks=dict(reg.get("mechanism", {})),
      exploratory=[v for v in variants if v not in reg["rows"]],
      provenance=provenance(path, launches))


def _fmt(x, spec: str = "{:+.3f}") -> str:
  return "-" if x is None else spec.format(x)


def registered_markdown(data: dict) -> str:
  """The registered comparisons as markdown: provenance, one row per comparison, the shares and
  the mechanism."""
  prov = data["provenance"]
  reg = prov["registered"]
  lines = ["## Registered comparisons", "",
           f"Pre-registration `{data['file']}`: added in commit "
           f"{reg[0][:10] + ' (' + reg[1] + ')' if reg else '(not committed)'}"
           + (f", last changed in {prov['last_changed'][0][:10]}" if prov["last_changed"] and
              reg and prov["last_changed"][0] != reg[0] else "") + "."]
  if prov["launches"]:
    commits = sorted({e["commit"][:10] for e in prov["launches"] if e.get("commit")})
    precedes = {True: "yes", False: "**no**", None: "unknown"}[
        prov["registration_precedes_runs"]]
    lines.append(f"Runs launched from commit(s) {', '.join(commits)}, the first at "
                 f"{prov['first_run_started']}; the registration precedes every launch: "
                 f"{precedes}.")
  done = ", ".join(map(str, data["sft_draws_complete"])) or "none"
  lines += ["", f"Complete SFT draws: {done} (at least {data['min_sft_draws']} needed"
            + ("" if data["judged"] else "; **not judged yet**") + ")"
            + (f"; incomplete, left out: {data['sft_draws_incomplete']}"
               if data["sft_draws_incomplete"] else "") + ". "
            f"Estimates: the mean over SFT draws of each draw's mean paired difference (same SFT, "
            f"same RL seed), ± its 95% t interval over the draws; the corrected interval is "
            f"Bonferroni's over the {len(data['comparisons'])} comparisons; p one-sided in the "
            f"registered direction, adjusted by {data['correction'].title()}.", "",
           "| id | comparison | estimate | 95% interval | corrected interval | p | p (Holm) | "
           "SFT draws x units | SD between SFTs / seeds | higher (sign test p) | replicated |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
  for c in data["comparisons"]:
    rep = {True: "**yes**", False: "no", None: "not judged"}[c["replicated"]]
    sd = f"{_fmt(c['sd_sft'], '{:.3f}')} / {_fmt(c['sd_seed'], '{:.3f}')}"
    lines.append(
        f"| {c['id']} | {c['method']} − {c['baseline']} | {_fmt(c['mean'])} | "
        f"± {_fmt(c['ci'], '{:.3f}')} | ± {_fmt(c['ci_corrected'], '{:.3f}')} | "
        f"{_fmt(c['p'], '{:.4f}')} | {_fmt(c['p_holm'], '{:.4f}')} | "
        f"{c['sfts']} x {c['units']} | {sd} | {c['higher']} of {c['units']} "
        f"({_fmt(c['sign_p'], '{:.3f}')}) | {rep} |")
  for s in data["shares"]:
    lo, hi = s["fieller95"]
    lines += ["", f"Share of {s['oracle']}'s gain over {s['baseline']} recovered by "
              f"{s['method']}: {_fmt(s['share'], '{:.2f}')}, Fieller 95% interval "
              + (f"[{_fmt(lo, '{:.2f}')}, {_fmt(hi, '{:.2f}')}]" if s["bounded"] else
                 "unbounded (the oracle's gain is not resolved from 0)")
              + f" over {s['replicates']} replicates."]
  if data["mechanism"]:
    lines += ["", "What acted (per-step means over the complete draws' runs; the registered "
              "check where the registration declares one):", ""]
    checks = data.get("mechanism_checks", {})
    for row, mech in data["mechanism"].items():
      parts = ", ".join(f"{k} {v:.4g}" for k, v in mech.items() if v is not None) or "no runs"
      lines.append(f"- `{row}`: {parts}" + (f" (check: {checks[row]})" if row in checks else ""))
  if data["exploratory"]:
    lines += ["", "Exploratory (not registered): " + ", ".join(data["exploratory"]) + "."]
  return "\n".join(lines) + "\n"
