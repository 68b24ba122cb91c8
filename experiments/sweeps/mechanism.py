"""What a methods_v2 run's mechanism did, read from its metrics and rollout history: the rows a
prompt got at a visit by its recent success rate (the allocators), V0.5's extra rows, and a
rollout engine's decoded tokens, forks, prunes and quality head. `write_tables` puts
the seed means into a methods_v2 report."""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from rl_jax import workdir as workdir_lib
from rl_jax.metrics import read_metrics
from rl_jax.value.history import RolloutHistory

# What each allocator's mechanism did, read from a run's rollout history: the rows a prompt got
# at a visit by what its last BUFFER rollouts before it said (no estimate below MIN_OBS).
BUFFER, MIN_OBS = 16, 8
RATE_BINS = ("no estimate", "p = 0", "0 < p < 1", "p = 1")
MECHANISM_METRICS = ("informative_frac", "alloc/n_max", "alloc/groups_n17_up", "v05/extra_rows",
                     "v05/rejected_frac", "v05/w_mean")
# What a rollout engine did, per RL step: the tokens it decoded and those its batch holds, the
# forks a tree made, the rows it pruned and those it filled with a copy of a root's first row
# (LATR), ARRoL's quality head (accuracy and BCE on each round's survivors) and APRIL's share of
# tokens from an older policy.
ENGINE_METRICS = ("rollout_tokens", "batch_tokens", "tree_forks", "tree_pruned", "tree_filled",
                  "tree_fork_prefix_mean", "arrol/rows_pruned", "arrol/head_acc",
                  "arrol/head_loss", "april/offpolicy_token_frac", "april/resumed_groups")


def rows_by_prior_rate(history: RolloutHistory) -> dict:
  """{bin: {'visits', 'rows_per_visit', 'row_share'}} over every (prompt, step) visit of the
  history, the bin set by the prompt's success rate over its newest BUFFER rollouts before that
  step (RATE_BINS; 'no estimate' under MIN_OBS rollouts); and 'visits_per_prompt', the mean
  number of steps at which a prompt that was drawn at all was drawn."""
  rec = history.records()
  rows = {b: [] for b in RATE_BINS}
  for step in np.unique(rec["step"]):
    ids = np.unique(rec["prompt_id"][rec["step"] == step])
    n, _ = history.stats(ids, since_step=int(step), before_step=int(step) + 1)
    att, suc = history.stats(ids, before_step=int(step), last_rollouts=BUFFER)
    p = suc / np.maximum(att, 1)
    kind = np.where(att < MIN_OBS, 0, np.where(p == 0, 1, np.where(p == 1, 3, 2)))
    for k, b in enumerate(RATE_BINS):
      rows[b].extend(n[kind == k].tolist())
  total = max(sum(sum(v) for v in rows.values()), 1)
  visits = [len(np.unique(rec["step"][rec["prompt_id"] == i])) for i in np.unique(rec["prompt_id"])]
  out = {b: dict(visits=len(v), rows_per_visit=float(np.mean(v)) if v else None,
                 row_share=sum(v) / total) for b, v in rows.items()}
  out["visits_per_prompt"] = float(np.mean(visits)) if visits else None
  return out


def mechanism(workdir: str) -> dict:
  """One run's mechanism numbers: the means over RL steps of MECHANISM_METRICS it logged, and,
  for a run that kept its history, `rows_by_prior_rate`."""
  recs = [r for r in read_metrics(workdir) if r.get("phase") == "rl"]
  out = {k: float(np.mean([r[k] for r in recs if k in r])) for k in (
      *MECHANISM_METRICS, *ENGINE_METRICS) if any(k in r for r in recs)}
  head = [r for r in recs if "arrol/head_acc" in r and "reward_mean" in r]
  if head:  # the accuracy of always guessing the batch's more common outcome
    out["arrol/constant_acc"] = float(np.mean([max(r["reward_mean"], 1 - r["reward_mean"])
                                               for r in head]))
  path = os.path.join(workdir, workdir_lib.HISTORY_FILE)
  if os.path.exists(path):
    out["rows_by_prior_rate"] = rows_by_prior_rate(RolloutHistory.from_jsonl(path))
  return out


def mean_tree(items: list):
  """The elementwise mean of equal-shaped nested dicts of numbers (None where any is None)."""
  if isinstance(items[0], dict):
    return {k: mean_tree([i[k] for i in items]) for k in items[0]}
  return None if any(i is None for i in items) else float(np.mean(items))


def write_tables(out_prefix: str, root: str, names, ground, engine_row) -> None:
  """Adds each variant's seed-mean `mechanism` to OUT.json and a table of it to OUT.md (runs
  under ROOT/methods_v2, those of `ground` under ROOT/ground_v2; `names`, when given, limits
  the variants): the pool's rows by success rate, and the engines' (`engine_row(name)`)."""
  with open(out_prefix + ".json") as f:
    data = json.load(f)
  lines = ["", f"Rows per visit of a prompt by its success rate over its last {BUFFER} rollouts "
           f"before the visit (no estimate under {MIN_OBS}), their share of all rows, and visits "
           "per prompt drawn.",
           "", "| variant | informative groups | largest group | " +
           " | ".join(f"rows/visit at {b} (share)" for b in RATE_BINS) +
           " | visits per prompt | V0.5 extra rows / step | V0.5 prior rejected |",
           "|---|---:|---:|" + "---:|" * len(RATE_BINS) + "---:|---:|---:|"]
  pool_header = len(lines)
  engine_lines = ["", "Rollout engines, per RL step: decoded tokens, tokens in the batch, "
                  "informative groups, forks and pruned rows of a tree, ARRoL's quality head "
                  "(accuracy and BCE on the survivors' outcomes, and the accuracy of always "
                  "guessing the batch's more common outcome) and its pruned rows, APRIL's "
                  "resumed groups and share of tokens from an older policy.", "",
                  "| variant | decoded tokens | batch tokens | informative groups | forks | "
                  "pruned (tree) | ARRoL pruned rows | ARRoL head acc (BCE; constant guess) | "
                  "APRIL resumed groups | APRIL off-policy tokens |", "|---|" + "---:|" * 9]
  engine_header = len(engine_lines)
  fmt = lambda x, f="{:.2f}": "-" if x is None else f.format(x)
  for v in data["variants"]:
    if names is not None and v["name"] not in names:
      continue
    sub = "ground_v2" if v["name"] in ground else "methods_v2"
    dirs = sorted(os.path.dirname(f) for f in glob.glob(
        os.path.join(root, sub, v["name"] + "_seed*", "summary.json")))
    if not dirs:
      continue
    runs = [mechanism(d) for d in dirs]
    keys = [k for k in runs[0] if all(k in r for r in runs)]  # Every seed has them, in order.
    m = mean_tree([{k: r[k] for k in keys} for r in runs])
    v["mechanism"] = m
    if engine_row(v["name"]):
      acc, bce, const = (m.get(k) for k in ("arrol/head_acc", "arrol/head_loss",
                                            "arrol/constant_acc"))
      engine_lines.append(
          f"| {v['name']} | {fmt(m.get('rollout_tokens'), '{:,.0f}')} | "
          f"{fmt(m.get('batch_tokens'), '{:,.0f}')} | {fmt(m.get('informative_frac'))} | "
          f"{fmt(m.get('tree_forks'), '{:.1f}')} | {fmt(m.get('tree_pruned'), '{:.1f}')} | "
          f"{fmt(m.get('arrol/rows_pruned'), '{:.1f}')} | "
          + ("-" if acc is None else f"{acc:.2f} ({bce:.3f}; {fmt(const)})") + " | "
          f"{fmt(m.get('april/resumed_groups'), '{:.1f}')} | "
          f"{fmt(m.get('april/offpolicy_token_frac'))} |")
      continue  # On the full train set a prompt has no history to bin by.
    by = m.get("rows_by_prior_rate")
    if by is None:
      continue
    cells = [f"{fmt(by[b]['rows_per_visit'], '{:.1f}')} ({by[b]['row_share']:.2f})"
             for b in RATE_BINS]
    lines.append(f"| {v['name']} | {fmt(m.get('informative_frac'))} | "
                 f"{fmt(m.get('alloc/n_max'), '{:.1f}')} | " + " | ".join(cells) +
                 f" | {fmt(by['visits_per_prompt'], '{:.1f}')} | "
                 f"{fmt(m.get('v05/extra_rows'), '{:.1f}')} | {fmt(m.get('v05/rejected_frac'))} |")
  with open(out_prefix + ".json", "w") as f:
    json.dump(data, f, indent=1)
  lines = (["", "## What the mechanisms did (means over steps and seeds)"] +
           (lines if len(lines) > pool_header else []) +  # the tables that have rows
           (engine_lines if len(engine_lines) > engine_header else []))
  with open(out_prefix + ".md", "a") as f:
    f.write("\n".join(lines) + "\n")
