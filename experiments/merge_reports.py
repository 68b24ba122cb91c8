"""Merges report JSONs (`experiments.report --json`) by seed: a sweep whose seeds ran on two
machines, each reading its own runs, becomes one table.

    python -m experiments.merge_reports --reports=OLD.json,NEW.json --baseline=grpo_g4 \
        [--oracle=v05_v0_eq:oracle_v05_eq,...] [--variants=...] --out=OUT.md --json=OUT.json

Per variant, the per-seed final accuracies (`test_accuracy_by_seed`) of every report are pooled;
the mean, its 95% t interval, the paired difference to every other variant (`paired_delta`, over
the seeds both hold) and, with `--oracle` (report.py's syntax), the share of the oracle's gain
recovered are computed again from the pooled seeds (without `--oracle`, each variant's own
`oracle` and its `recovered.baseline` from the reports, as methods_v2 writes them). `sources`
says which report gave each seed and `reproduced` which runs a later report repeated. The other
per-variant means (rollout tokens, seconds, zero-advantage share, `mechanism`) are pooled
weighted by seeds; tokens to target keeps only the count of seeds that reached it (null unless
every report has the same baseline and target), and AUC and the dev interval are null (they
need the runs' curves).

Runs of two machines can only be pooled when they start from the same SFT policy, which a
machine's floating-point results decide. So the reports must share at least one run (variant and
seed) and agree on every shared run's final accuracy (to 1e-9) and on the SFT accuracy: a run
reproduced on the second machine is the proof. A shared run adds no seed; a report that repeats
some of a variant's seeds and adds others is refused (its means cannot be split by seed).
"""

from __future__ import annotations

import json

from absl import flags

from experiments import cli
from experiments.report_stats import (effect, oracle_baselines, parse_oracles, share, unit,
                                      unit_text)
from experiments.report_stats import json_number as _num

_POOLED = ("rollout_tokens", "dev_accuracy", "rl_sampled_accuracy", "sft_accuracy",
           "zero_adv_share", "rl_train_seconds", "wall_seconds")
_KEPT = ("family", "test_accuracy_key")
TOLERANCE = 1e-9


def _pool(items: list[tuple[float, object]]):
  """The weighted mean of (weight, value) pairs, nested through dicts; None values skipped."""
  values = [(w, v) for w, v in items if v is not None]
  if not values:
    return None
  if all(isinstance(v, dict) for _, v in values):
    keys = dict.fromkeys(k for _, v in values for k in v)
    return {k: _pool([(w, v.get(k)) for w, v in values]) for k in keys}
  if all(isinstance(v, (int, float)) and not isinstance(v, bool) for _, v in values):
    return float(sum(w * v for w, v in values) / sum(w for w, _ in values))
  return values[0][1]


def _sorted(units) -> list:
  return sorted(units, key=lambda u: (-1 if u[0] is None else u[0], u[1]))


def _seeds(units) -> list:
  """Seed ids as the reports write them: ints for one SFT, 'S/R' for several draws."""
  return [u[1] if u[0] is None else unit_text(u) for u in _sorted(units)]


def _paired(values: dict, other: dict) -> list:
  """[mean, 95% half-width] of values - other over their common units (`effect`)."""
  e = effect({k: values[k] - other[k] for k in set(values) & set(other)})
  return [_num(e["mean"]), _num(e["ci"])]


def merge(reports: list[dict], names: list[str], baseline: str, oracle: str | None = None,
          variants=None) -> dict:
  """One report (report.py's JSON layout) from `reports` (their file names in `names`, for the
  errors and each variant's `sources`), pooled by seed as the module docstring says."""
  pooled, sources, parts, reproduced = {}, {}, {}, {}
  for report, name in zip(reports, names):
    for v in report["variants"]:
      seeds = {unit(s): a for s, a in v["test_accuracy_by_seed"].items() if a is not None}
      have = pooled.setdefault(v["name"], {})
      shared = set(seeds) & set(have)
      for s in sorted(shared):
        if abs(seeds[s] - have[s]) > TOLERANCE:
          raise ValueError(f"{name}: {v['name']} seed {unit_text(s)} has final accuracy "
                           f"{seeds[s]:.6f}, "
                           f"another report {have[s]:.6f}; expected the same run reproduced")
      if shared and shared != set(seeds):
        raise ValueError(f"{name}: {v['name']} repeats seeds {_seeds(shared)} and adds "
                         f"{_seeds(set(seeds) - shared)}; expected a report that repeats all "
                         "of a variant's seeds or none")
      if not shared:
        have.update(seeds)
        sources.setdefault(v["name"], {}).update({unit_text(s): name for s in seeds})
        parts.setdefault(v["name"], []).append((len(seeds), v))
      else:
        reproduced.setdefault(v["name"], []).extend(f"seed {unit_text(s)} in {name}"
                                                    for s in _sorted(shared))
  if len(reports) > 1 and not reproduced:
    raise ValueError(f"{', '.join(names)} share no run; expected at least one run (variant "
                     "and seed) in two reports to show that they start from one SFT policy")
  sft = {round(v["sft_accuracy"], 9) for r in reports for v in r["variants"]
         if v.get("sft_accuracy") is not None}
  if len(sft) > 1:
    raise ValueError(f"{', '.join(names)}: SFT accuracies {sorted(sft)}; expected one SFT policy")
  unknown = sorted(set(variants or ()) - set(pooled))
  if unknown:
    raise ValueError(f"--variants: {', '.join(unknown)} not in these reports; expected some of "
                     f"{sorted(pooled)}")
  keep = list(pooled) if not variants else [v for v in pooled if v in variants]
  # A run's target is its report's baseline's final (or `target`): counts add up only when every
  # report aimed at the same one.
  same_target = len({(r.get("baseline"), r.get("target")) for r in reports}) == 1
  if baseline not in pooled:
    raise ValueError(f"--baseline={baseline!r} is not a variant of these reports")
  if oracle is None:  # Each variant's own, where a report names it (methods_v2's `oracle`).
    own = {n: (v.get("oracle"), (v.get("recovered") or {}).get("baseline", baseline))
           for n in pooled for _, v in parts[n][:1]}
    oracle = ",".join(f"{n}:{o}:{b}" for n, (o, b) in own.items()
                      if n != baseline and o in pooled and b in pooled)
  oracles = parse_oracles(oracle, list(pooled), baseline)
  bases = oracle_baselines(oracle, list(pooled), baseline)
  out = []
  for name in keep:
    by_seed = pooled[name]
    level = effect(by_seed)  # the SFT draws as replicates where the reports hold several
    obj = dict(name=name, seeds=len(by_seed), seed_ids=_seeds(by_seed),
               test_accuracy=_num(level["mean"]), test_accuracy_ci95=_num(level["ci"]),
               test_accuracy_by_seed={unit_text(s): by_seed[s] for s in _sorted(by_seed)},
               sources=sources[name], reproduced=reproduced.get(name, []))
    for key in _KEPT:
      obj[key] = next((v[key] for _, v in parts[name] if key in v), None)
    for key in (*_POOLED, "mechanism"):
      obj[key] = _pool([(w, v.get(key)) for w, v in parts[name]])
    obj["dev_accuracy_ci95"], obj["auc"] = None, [None, None]
    obj["tokens_to_target"] = dict(mean=None, ci95=None, reached=sum(
        v.get("tokens_to_target", {}).get("reached", 0) for _, v in parts[name])
        if same_target else None)
    obj["paired_delta"] = {o: _paired(by_seed, pooled[o])
                           for o in pooled if o != name and set(by_seed) & set(pooled[o])}
    if name in oracles:
      rec = share(by_seed, pooled[oracles[name]], pooled[bases[name]], bases[name])
      rec.update(share=_num(rec["share"]), ci95=_num(rec["ci95"]),
                 fieller95=[_num(x) for x in rec.pop("fieller")])
      obj.update(oracle=oracles[name], recovered_share=rec["share"],
                 recovered_share_ci95=rec["ci95"], recovered=rec)
    out.append(obj)
  return dict(baseline=baseline, merged_from=names, variants=out)


def _pm(pair, fmt: str = "{:.3f}") -> str:
  mean, half = pair
  return "-" if mean is None else fmt.format(mean) + ("" if half is None else f" ± {half:.3f}")


def markdown(merged: dict) -> str:
  """The pooled table: seeds, final accuracy, the paired difference to the baseline, the share
  recovered, mean rollout tokens and wall seconds, and where each seed's run came from."""
  base = merged["baseline"]
  lines = [f"Merged by seed from {', '.join(merged['merged_from'])}; baseline `{base}`; final "
           "accuracy, ± = 95% t interval over seeds; share = (variant − baseline) / (oracle − "
           "baseline) over the seeds all three hold.", "",
           "| variant | seeds | final acc | Δ vs baseline (paired) | share of oracle gain | "
           "rollout tokens | wall s | seeds from |", "|---|---:|---:|---:|---:|---:|---:|---|"]
  for v in merged["variants"]:
    share = "-"
    if v.get("oracle") is not None:
      share = (f"{_pm((v['recovered_share'], v['recovered_share_ci95']))} of {v['oracle']}"
               if v["recovered"]["resolved"] else f"{_pm((v['recovered_share'], None))} of "
               f"{v['oracle']} (oracle gain not resolved)")
    src = {}
    for s, f in v["sources"].items():
      src.setdefault(f, []).append(s)
    where = "; ".join(f"{','.join(s)}: {f}" for f, s in src.items())
    if v["reproduced"]:
      where += f" (reproduced: {', '.join(v['reproduced'])})"
    final = _pm((v["test_accuracy"], v["test_accuracy_ci95"]))
    delta = _pm(v["paired_delta"].get(base, (None, None)), "{:+.3f}")
    lines.append(f"| {v['name']} | {v['seeds']} | {final}"
                 f" | {delta} | {share} | "
                 f"{v['rollout_tokens'] or float('nan'):,.0f} | "
                 f"{v['wall_seconds'] or float('nan'):.0f} | {where} |")
  return "\n".join(lines) + "\n"


def main(argv):
  cli.start(argv, quiet=False)
  reports = []
  for path in _REPORTS.value:
    try:
      with open(path) as f:
        reports.append(json.load(f))
    except (OSError, json.JSONDecodeError) as e:
      raise ValueError(f"--reports: cannot read {path} as a report JSON ({e})") from None
  merged = merge(reports, _REPORTS.value, _BASELINE.value, _ORACLE.value, _VARIANTS.value)
  with open(_OUT.value, "w") as f:
    f.write(markdown(merged))
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(merged, f, indent=1)


if __name__ == "__main__":
  _REPORTS = flags.DEFINE_list("reports", None, "Report JSONs of experiments.report, in order.")
  _BASELINE = flags.DEFINE_string("baseline", None, "Variant the table's Δ is paired against.")
  _ORACLE = flags.DEFINE_string("oracle", None, "As experiments.report's --oracle.")
  _VARIANTS = flags.DEFINE_list("variants", None, "Rows of the table (default: every variant).")
  _OUT = flags.DEFINE_string("out", None, "Markdown output path.")
  _JSON = flags.DEFINE_string("json", None, "JSON output path (optional).")
  cli.run(main, required=("reports", "baseline", "out"))
