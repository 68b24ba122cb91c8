"""Turns finished work dirs into an efficiency report: markdown tables, a PNG and a JSON file.

    python -m experiments.report --workdirs='runs/sweeps/ladder_baselines/*' \
        --out=runs/ladder_baselines.md --png=runs/ladder_baselines.png --baseline=grpo_g8 \
        [--oracle=oracle_prm | --oracle=knapsack:oracle_knapsack,pav:oracle_prm] \
        [--json=runs/ladder_baselines.json]

A run is a work dir holding `summary.json` (others, such as a sweep's `_sft/`, are skipped). Its
variant is the directory name without a trailing `_seedN`. Rollout tokens are the RL phase's
sampled completion tokens (every generation round counted); RL seconds are the wall seconds of
the RL steps, compilation of the first step excluded, summed over every process that ran them
(the RL checkpoint carries the count). Wall seconds are summary.json's `wall_seconds`: every
process that ran the work dir, a stopped one up to its last metrics record (`wall_clock.json`,
rl_jax/workdir.py); runs finished before that ledger count only the processes that reached
the end. Each run's curve is its dev greedy
accuracy at every periodic RL evaluation (`config.rl.eval_every`; no point is dropped, so
evaluating every 10 of 100 steps gives 11 points with the SFT policy's at 0 tokens).

Final accuracy is the test set's (`rl_test_accuracy`) when every run has one, else the dev set's
(`rl_accuracy`) for every run, so that paired differences compare like with like; the table's
title and the JSON's `test_accuracy_key` say which. `--split=dev` reads the dev set (for choosing
settings), `--split=test` insists on the test set. Tokens to target and AUC read the dev curve.

The first table has, per variant, the mean and 95% interval over seeds (Student t, n - 1 degrees
of freedom) of:
  * final greedy accuracy, and its paired difference to the baseline variant (the per-seed
    differences over the seeds that both ran; same seed = same SFT policy in a sweep with a
    shared SFT);
  * with `--oracle`, the share of the oracle's gain that the variant recovers,
    (method - baseline) / (oracle - baseline), over the seeds that all three ran
    (`recovered_share`: the ratio of the mean paired differences, and the delta-method interval;
    `variant:oracle:baseline` measures it from the family's own baseline, e.g. GRPO on the same
    prompt pool);
  * tokens to target: rollout tokens at which the curve first reaches the target accuracy
    (linear between evaluations). The default target is paired: the final dev accuracy of the
    baseline's run with the same seed (the same SFT policy in a sweep with a shared SFT; the
    baseline's mean final for a seed it lacks), so that seed-to-seed differences of level do
    not decide who reaches it; `--target` sets one accuracy for all. A run that never reaches
    it counts as not reached, and the cell says how many did;
  * AUC: the area under accuracy vs rollout tokens over [0, T], T the smallest final token count
    of all runs (the same range for every variant), divided by T, i.e. the mean accuracy over
    the first T tokens;
plus the means of sampled accuracy, SFT accuracy, rollout tokens, the share of rollout rows with
zero advantage (`zero_adv_share`), RL and wall seconds. The second
table lists every run. An interval that contains 0 (difference) or overlaps the baseline's is
within seed noise. The PNG plots accuracy against cumulative rollout tokens and RL seconds.

`--json=PATH` writes the first table's numbers (`json_report`): one object per variant with its
name, seeds, test_accuracy (mean) and test_accuracy_ci95, rollout_tokens, paired_delta (every
other variant's name -> [mean, 95% half-width] of this one minus it, per seed), and
recovered_share with `--oracle`; `null` where a number is undefined (one seed, no shared seed).

Several SFT draws: a run's SFT draw is its run_config.json's `sft.seed` (its seed where that is
-1). When the runs hold more than one draw, a run's unit is (draw, seed), differences pair
within a unit, and every interval treats the draw as a random effect
(`report_stats.effect`: the draws' means are the replicates, S - 1 degrees of freedom);
recovered shares are taken over the draws' means, with Fieller's interval beside the delta
method's (`fieller95` in the JSON). JSON keys of such units read 'S/R'.

`--prereg=FILE` (a pre-registration, experiments/prereg.py) puts the registered comparisons
first (`report_registered`): each declared comparison's estimate, 95% and Bonferroni-corrected
intervals, one-sided and Holm-adjusted p-values, the sign test beside "higher on N of M", the
declared shares (Fieller) and what each mechanism did, on the SFT draws whose every registered
run finished; the registration's commit and, with `--launches`, the runs' commits and first
start. Everything else in the report is exploratory. The JSON gains `registered`.

With `--ladder` (runs of configs/ladder.py) the report adds the proving ground's gate: per run,
SFT and RL greedy accuracy, the gain, the SFT success-rate shares (below 0.1, in [0.1, 0.9], above
0.9) and the step error rate; the 3-seed standard deviation of the final accuracy; a verdict per
gate criterion; and held-out greedy accuracy per stratum (number of terms), SFT and RL:

    python -m experiments.report --workdirs='runs/ladder_seed*' --out=runs/ladder.md --ladder
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re

import numpy as np
from absl import app, flags
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from experiments import prereg as prereg_lib
from experiments.report_stats import (effect, interval, oracle_baselines, parse_oracles, share,
                                      unit_text)
from experiments.report_stats import json_number as _num
from experiments.report_stats import pm as _pm
from experiments.report_registered import registered, registered_markdown
from experiments.report_tables import calibration_table, ladder_tables
from rl_jax.metrics import read_metrics

_WORKDIRS = flags.DEFINE_multi_string("workdirs", None, "Glob(s) of run work dirs.")
_OUT = flags.DEFINE_string("out", None, "Markdown output path.")
_PNG = flags.DEFINE_string("png", None, "PNG output path (optional).")
_BASELINE = flags.DEFINE_string("baseline", None, "Variant the others are compared with (default: "
                                "'grpo' if present, else the first variant).")
_LADDER = flags.DEFINE_bool("ladder", False, "Also write the proving ground's gate table, its "
                            "verdicts and the per-stratum table (runs of configs/ladder.py).")
_CALIBRATION = flags.DEFINE_bool("calibration", False, "Also write V0's calibration table "
                                  "(Brier, AUROC, ECE against its three baselines, per step).")
_ORACLE = flags.DEFINE_string(
    "oracle", None, "Adds the column 'share of the oracle's gain recovered', (variant - baseline) "
    "/ (oracle - baseline): one oracle variant for every variant ('oracle_prm'), or "
    "variant:oracle pairs ('knapsack:oracle_knapsack,pav:oracle_prm'; a bare name among them is "
    "the default); variant:oracle:baseline measures that variant's share from its own family "
    "baseline (e.g. GRPO on the same prompt pool).")
_JSON = flags.DEFINE_string("json", None, "JSON output path (optional): one object per variant "
                            "(`json_report`).")
_TARGET = flags.DEFINE_float("target", None, "Target accuracy for tokens-to-target (default: "
                             "each run's target is the final greedy accuracy of the baseline's "
                             "run with the same seed).")
SPLITS = ("auto", "dev", "test")  # What `--split` may name (`accuracy_key`).
_SPLIT = flags.DEFINE_enum("split", "auto", list(SPLITS), "Which final accuracy the "
                           "tables read: 'dev' to choose settings, 'test' for result tables; "
                           "'auto' reads test when every run has it, else dev.")

_PREREG = flags.DEFINE_string("prereg", None, "A pre-registration file (experiments/"
                              "preregistrations/): judge its declared comparisons (Holm-adjusted, "
                              "the SFT draw as a random effect); every other difference is "
                              "marked exploratory.")
_LAUNCHES = flags.DEFINE_string("launches", None, "The sweep's launch ledger (launches.jsonl): "
                                "the commits and start times of its runs, printed beside the "
                                "registration's commit.")

_SEED_SUFFIX = re.compile(r"_seed\d+$")
# (column title, key of the per-run record, format)
COLUMNS = (("greedy acc", "rl_accuracy", "{:.3f}"),
           ("sampled acc", "rl_sampled_accuracy", "{:.3f}"),
           ("SFT greedy", "sft_accuracy", "{:.3f}"),
           ("rollout tokens", "rollout_tokens", "{:,.0f}"),
           ("zero-adv rows", "zero_adv_share", "{:.3f}"),
           ("RL s", "rl_train_seconds", "{:.0f}"),
           ("wall s", "wall_seconds", "{:.0f}"))


def load_run(workdir: str) -> dict:
  """A run's summary numbers and its curves (accuracy vs cumulative tokens and seconds)."""
  with open(os.path.join(workdir, "summary.json")) as f:
    summary = json.load(f)
  rl = sorted((r for r in read_metrics(workdir) if r.get("phase") == "rl"),
              key=lambda r: r["step"])
  tokens = np.cumsum([r.get("rollout_tokens", 0) for r in rl])
  seconds = np.cumsum([0.0] + [r.get("step_seconds", 0.0) for r in rl[1:]])  # Step 1 compiles.
  curve = [(0, 0.0, 0.0, summary["sft_accuracy"])]
  curve += [(r["step"], float(tokens[i]), float(seconds[i]), r["heldout_accuracy"])
            for i, r in enumerate(rl) if "heldout_accuracy" in r]
  if rl and "heldout_accuracy" not in rl[-1]:  # The final evaluation is the same greedy one.
    curve.append((rl[-1]["step"], float(tokens[-1]), float(seconds[-1]), summary["rl_accuracy"]))
  name = os.path.basename(os.path.normpath(workdir))
  return dict({k: summary.get(k, float("nan")) for _, k, _ in COLUMNS}, name=name,
              sft=sft_draw(workdir, summary.get("seed")), workdir=workdir,
              rl_test_accuracy=summary.get("rl_test_accuracy", float("nan")),
              zero_adv_share=zero_adv_share(rl),
              variant=_SEED_SUFFIX.sub("", name), seed=summary.get("seed"),
              rollout_tokens=float(tokens[-1]) if len(tokens) else 0.0, curve=curve)


def sft_draw(workdir: str, seed) -> int | None:
  """The run's SFT draw from its run_config.json: `sft.seed`, or the training seed where that is
  -1 (one SFT per seed); None without a recorded config (one unnamed SFT)."""
  path = os.path.join(workdir, "run_config.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    sft = json.load(f).get("sft", {}).get("seed", -1)
  return int(sft) if sft is not None and sft >= 0 else seed


def unit_of(run: dict, several_sfts: bool):
  """A run's unit of pairing: its seed, or (SFT draw, seed) when the runs hold several draws."""
  return (run["sft"], run["seed"]) if several_sfts else run["seed"]


def several_sfts(runs: list[dict]) -> bool:
  return len({r.get("sft") for r in runs}) > 1


def zero_adv_share(rl_records: list[dict]) -> float:
  """Mean over RL steps of the share of rollout rows in groups whose rewards are all equal (no
  GRPO gradient): `alloc/zero_var_share` where logged, else 1 - `informative_frac` (the share of
  groups with a non-zero advantage, equal to the row share when groups have equal sizes)."""
  vals = [r["alloc/zero_var_share"] if "alloc/zero_var_share" in r else
          1.0 - r["informative_frac"] for r in rl_records
          if "alloc/zero_var_share" in r or "informative_frac" in r]
  return float(np.mean(vals)) if vals else float("nan")


def find_runs(patterns: list[str]) -> list[dict]:
  dirs = sorted({d for p in patterns for d in glob.glob(p) if os.path.isdir(d)})
  runs = [load_run(d) for d in dirs if os.path.exists(os.path.join(d, "summary.json"))]
  if not runs:
    raise FileNotFoundError(f"no work dir with a summary.json matches {patterns}")
  return runs


def by_variant(runs: list[dict]) -> dict[str, list[dict]]:
  groups = collections.defaultdict(list)
  for run in runs:
    groups[run["variant"]].append(run)
  return dict(groups)


def tokens_to_target(curve, target: float) -> float:
  """Rollout tokens at which accuracy first reaches `target` (linear between points); inf if never.

  `curve` is [(step, tokens, seconds, accuracy), ...] in step order.
  """
  prev = None
  for _, tokens, _, acc in curve:
    if acc >= target:
      if prev is None or acc == prev[1]:
        return float(tokens)
      frac = (target - prev[1]) / (acc - prev[1])
      return float(prev[0] + frac * (tokens - prev[0]))
    prev = (tokens, acc)
  return float("inf")


def auc(curve, max_tokens: float) -> float:
  """Mean accuracy over rollout tokens [0, max_tokens] (trapezoids; the curve is linear between
  points and cut at `max_tokens`, which must not exceed its last point)."""
  x = np.array([p[1] for p in curve], np.float64)
  y = np.array([p[3] for p in curve], np.float64)
  if max_tokens <= 0 or max_tokens > x[-1] + 1e-9:
    raise ValueError(f"max_tokens={max_tokens} must be in (0, {x[-1]}] (the curve's last point)")
  cut = np.searchsorted(x, max_tokens)
  xs = np.concatenate([x[:cut], [max_tokens]])
  ys = np.concatenate([y[:cut], [np.interp(max_tokens, x, y)]])
  return float(np.sum(np.diff(xs) * (ys[1:] + ys[:-1]) / 2) / max_tokens)


def accuracy_key(runs: list[dict], split: str = "auto") -> str:
  """The final accuracy the tables read. 'auto': 'rl_test_accuracy' when every run has a test-set
  figure, else 'rl_accuracy' (dev) for all; 'dev': 'rl_accuracy' (for choosing settings);
  'test': 'rl_test_accuracy', and a run without one is an error."""
  if split not in SPLITS:
    raise ValueError(f"--split={split!r}: expected one of {', '.join(SPLITS)}")
  missing = [r["name"] for r in runs if not np.isfinite(r.get("rl_test_accuracy", np.nan))]
  if split == "test" and missing:
    raise ValueError(f"--split=test: run {missing[0]!r} has no rl_test_accuracy in its "
                     "summary.json (its config has no test set)")
  return "rl_accuracy" if split == "dev" or missing else "rl_test_accuracy"


def efficiency(runs: list[dict], baseline: str | None = None, target: float | None = None,
               oracle: str | None = None, split: str = "auto") -> dict:
  """Per-variant statistics of the first table (see the module docstring); also returns the
  baseline, target, AUC token range, accuracy key and oracles ({variant: oracle}) used.

  Per variant: `final` (mean, 95% half-width) of the final accuracy (`accuracy_key`), `by_seed`
  {seed: final}, `delta` the paired difference to the baseline, `paired_delta` {other variant:
  (mean, half)} of this one minus it, `recovered` (`report_stats.recovered_share`) with an oracle.
  """
  groups = by_variant(runs)
  if baseline is None:
    baseline = "grpo" if "grpo" in groups else next(iter(groups))
  if baseline not in groups:
    raise ValueError(f"--baseline={baseline!r} is not a variant of these runs; expected one of "
                     f"{sorted(groups)}")
  key = accuracy_key(runs, split)
  oracles = parse_oracles(oracle, groups, baseline)
  bases = oracle_baselines(oracle, groups, baseline)
  multi = several_sfts(runs)
  finals = {v: {unit_of(r, multi): r[key] for r in group} for v, group in groups.items()}
  # The dev curve's target: the baseline's final of the same unit (SFT draw and seed).
  base_final = {unit_of(r, multi): r["rl_accuracy"] for r in groups[baseline]}
  mean_final = float(np.mean(list(base_final.values())))

  def run_target(run: dict) -> float:  # Paired by default: the same seed's baseline final.
    return target if target is not None else base_final.get(unit_of(run, multi), mean_final)

  max_tokens = min(r["curve"][-1][1] for r in runs)
  nan2 = (float("nan"), float("nan"))
  out = {}
  for variant, group in groups.items():
    reach = [tokens_to_target(r["curve"], run_target(r)) for r in group]
    effects = {other: paired_effect(finals[variant], finals[other]) for other in groups
               if other != variant and set(finals[variant]) & set(finals[other])}
    deltas = {other: (e["mean"], e["ci"]) for other, e in effects.items()}
    out[variant] = dict(
        seeds=len(group), seed_ids=sorted(finals[variant]), by_seed=finals[variant],
        sfts=len({r.get("sft") for r in group}),
        final=_level(finals[variant]),
        dev_final=_level({unit_of(r, multi): r["rl_accuracy"] for r in group}),
        delta=deltas.get(baseline, nan2), paired_delta=deltas,
        baseline_effect=effects.get(baseline),
        recovered=(share(finals[variant], finals[oracles[variant]], finals[bases[variant]],
                         bases[variant]) if variant in oracles else None),
        reached=sum(np.isfinite(reach)),
        to_target=interval(reach) if all(np.isfinite(reach)) else nan2,
        auc=interval([auc(r["curve"], max_tokens) for r in group]) if max_tokens > 0 else nan2,
        means={k: float(np.mean([r.get(k, np.nan) for r in group])) for _, k, _ in COLUMNS})
  return dict(variants=out, baseline=baseline, target=target, baseline_final=mean_final,
              auc_tokens=max_tokens, accuracy_key=key, oracles=oracles)


def paired_effect(values: dict, other: dict) -> dict:
  """`report_stats.effect` of values - other over the units both hold (the SFT draw a random
  effect where the units name several)."""
  return effect({k: values[k] - other[k] for k in set(values) & set(other)})


def _level(values: dict) -> tuple[float, float]:
  """(mean, 95% half-width) of a variant's finals over its units (SFT draws as replicates when
  there are several)."""
  e = effect(values)
  return e["mean"], e["ci"]


def _share_cell(v: dict, oracle: str, name_it: bool, baseline: str) -> str:
  rec = v["recovered"]
  if rec is None:
    return "-"
  if np.isinf(rec["ci95"]):
    cell = f"{rec['share']:.2f} (oracle gain not resolved)"
  else:
    cell = _pm(rec["share"], rec["ci95"], "{:.2f}")
  over = f" over {rec['baseline']}" if rec["baseline"] != baseline else ""
  return f"{cell} of {oracle}{over}" if name_it or over else cell


def markdown(runs: list[dict], baseline: str | None = None, target: float | None = None,
             oracle: str | None = None, split: str = "auto") -> str:
  """The efficiency table (mean ± 95% interval over seeds per variant), then every run."""
  eff = efficiency(runs, baseline, target, oracle, split)
  read = "test" if eff["accuracy_key"] == "rl_test_accuracy" else "dev"
  aim = (f"target accuracy {eff['target']:.3f}" if eff["target"] is not None else
         f"target accuracy: the baseline's final with the same seed (mean "
         f"{eff['baseline_final']:.3f})")
  oracles = eff["oracles"]
  share_note = ""
  if oracles:
    share_note = (" Share of the oracle's gain recovered: mean(variant − baseline) / "
                  "mean(oracle − baseline) over the seeds all three ran, ± its delta-method 95% "
                  "interval; 'not resolved' where the oracle's own paired gain is not above 0.")
  title = (f"Baseline `{eff['baseline']}`; final accuracy on the {read} set; tokens to target "
           f"on the dev curve, {aim}; AUC over the first {eff['auc_tokens']:,.0f} rollout "
           f"tokens; ± = 95% t interval over seeds.{share_note}")
  head = ["variant", "seeds", f"{read} greedy acc", "Δ vs baseline (paired)",
          *(["share of oracle gain recovered"] if oracles else []), "tokens to target",
          "AUC (acc over tokens)", *(t for t, _, _ in COLUMNS[1:])]
  lines = [title, "", "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
  name_oracle = len(set(oracles.values())) > 1
  for variant, v in eff["variants"].items():
    reached = (_pm(*v["to_target"], fmt="{:,.0f}") if v["reached"] == v["seeds"]
               else f"reached {v['reached']}/{v['seeds']}")
    share = ([_share_cell(v, oracles.get(variant), name_oracle, eff["baseline"])]
             if oracles else [])
    means = [fmt.format(v["means"][k]) for _, k, fmt in COLUMNS[1:]]
    lines.append(" | ".join([f"| {variant}", str(v["seeds"]), _pm(*v["final"]),
                             _pm(*v["delta"]), *share, reached, _pm(*v["auc"]), *means]) + " |")
  columns = COLUMNS + ((("test greedy", "rl_test_accuracy", "{:.3f}"),) if read == "test" else ())
  head = [f"| {' | '.join(t for t, _, _ in columns)} |", "|" + "---:|" * len(columns)]
  lines += ["", "| run | seed " + head[0], "|---|---:" + head[1]]
  for r in runs:
    cells = [fmt.format(r.get(k, float("nan"))) for _, k, fmt in columns]
    lines.append(f"| {r['name']} | {r['seed']} | {' | '.join(cells)} |")
  return "\n".join(lines) + "\n"


def json_report(runs: list[dict], baseline: str | None = None, target: float | None = None,
                oracle: str | None = None, split: str = "auto") -> dict:
  """The first table as data: {'baseline', 'test_accuracy_key', 'target', 'auc_tokens',
  'variants': [one object per variant]}. Each object holds `name`; `seeds` (count) and
  `seed_ids`; `test_accuracy` (the mean final of `test_accuracy_key`: `rl_test_accuracy`, or
  `rl_accuracy` when a run lacks a test set), `test_accuracy_ci95` (95% t half-width) and
  `test_accuracy_by_seed`; `dev_accuracy` and its `dev_accuracy_ci95`; `rollout_tokens` (mean);
  `paired_delta` {other variant: [mean, ci95] of this one minus it over their common seeds};
  `tokens_to_target` {mean, ci95, reached}; `auc` [mean, ci95]; `recovered_share` {oracle,
  share, ci95, seeds, resolved} when `oracle` maps it; the other table columns' means. Undefined
  numbers (one seed, an unresolved oracle gain) are null."""
  eff = efficiency(runs, baseline, target, oracle, split)
  variants = []
  for name, v in eff["variants"].items():
    obj = dict(
        name=name, seeds=v["seeds"], seed_ids=v["seed_ids"],
        test_accuracy=_num(v["final"][0]), test_accuracy_ci95=_num(v["final"][1]),
        test_accuracy_key=eff["accuracy_key"],
        test_accuracy_by_seed={unit_text(s): _num(a) for s, a in sorted(v["by_seed"].items())},
        sfts=v["sfts"],
        dev_accuracy=_num(v["dev_final"][0]), dev_accuracy_ci95=_num(v["dev_final"][1]),
        rollout_tokens=_num(v["means"]["rollout_tokens"]),
        paired_delta={o: [_num(m), _num(h)] for o, (m, h) in v["paired_delta"].items()},
        tokens_to_target=dict(mean=_num(v["to_target"][0]), ci95=_num(v["to_target"][1]),
                              reached=int(v["reached"])),
        auc=[_num(x) for x in v["auc"]],
        **{k: _num(v["means"][k]) for _, k, _ in COLUMNS if k not in ("rl_accuracy",
                                                                       "rollout_tokens")})
    if v["recovered"] is not None:
      rec = v["recovered"]
      obj["recovered_share"] = dict(oracle=eff["oracles"][name], baseline=rec["baseline"],
                                    share=_num(rec["share"]), ci95=_num(rec["ci95"]),
                                    seeds=rec["seeds"], resolved=rec["resolved"],
                                    fieller95=[_num(x) for x in rec["fieller"]])
    variants.append(obj)
  return dict(baseline=eff["baseline"], test_accuracy_key=eff["accuracy_key"],
              target=_num(eff["target"]), auc_tokens=_num(eff["auc_tokens"]), variants=variants)


def plot(runs: list[dict], out_png: str) -> str:
  """Held-out greedy accuracy vs cumulative rollout tokens and vs RL seconds: the mean over seeds
  (points averaged at equal eval steps) with its 95% interval shaded."""
  fig = Figure(figsize=(11, 4), layout="constrained")
  FigureCanvasAgg(fig)
  axes = fig.subplots(1, 2)
  for i, (variant, group) in enumerate(by_variant(runs).items()):
    color = f"C{i % 10}"
    steps = sorted(set.intersection(*[{p[0] for p in r["curve"]} for r in group]))
    mean = np.array([np.mean([[p[1], p[2], p[3]] for r in group for p in r["curve"]
                              if p[0] == s], axis=0) for s in steps]).reshape(-1, 3)
    half = np.array([interval([p[3] for r in group for p in r["curve"] if p[0] == s])[1]
                     for s in steps])
    for ax, col in zip(axes, (0, 1)):
      if len(group) > 1:  # The 95% interval over seeds at each evaluation.
        ax.fill_between(mean[:, col], mean[:, 2] - half, mean[:, 2] + half, color=color,
                        alpha=0.15, lw=0)
      ax.plot(mean[:, col], mean[:, 2], color=color, marker=".", label=variant)
  for ax, xlabel in zip(axes, ("cumulative rollout tokens", "cumulative RL wall seconds")):
    ax.set(xlabel=xlabel, ylabel="held-out greedy accuracy")
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize="small")
  os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
  fig.savefig(out_png, dpi=100)
  return out_png


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  runs = find_runs(_WORKDIRS.value)
  text = markdown(runs, _BASELINE.value, _TARGET.value, _ORACLE.value, _SPLIT.value)
  dirs = sorted({d for p in _WORKDIRS.value for d in glob.glob(p)
                 if os.path.exists(os.path.join(d, "summary.json"))})
  if _LADDER.value:
    text += "\n" + ladder_tables(dirs)
  if _CALIBRATION.value:
    text += "\n" + (calibration_table(dirs) or "No V0 calibration metrics in these runs.\n")
  judged = None
  if _PREREG.value:
    reg = prereg_lib.load(_PREREG.value)
    judged = registered(runs, reg, accuracy_key(runs, _SPLIT.value), _PREREG.value,
                        _LAUNCHES.value)
    text = (registered_markdown(judged) + "\n## Every variant (exploratory beyond the registered "
            "comparisons above)\n\n" + text)
  os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
  with open(_OUT.value, "w") as f:
    f.write(text)
  if _PNG.value:
    plot(runs, _PNG.value)
  if _JSON.value:
    os.makedirs(os.path.dirname(os.path.abspath(_JSON.value)), exist_ok=True)
    with open(_JSON.value, "w") as f:
      data = json_report(runs, _BASELINE.value, _TARGET.value, _ORACLE.value, _SPLIT.value)
      if judged is not None:
        data["registered"] = judged
      json.dump(data, f, indent=1, allow_nan=False)
      f.write("\n")
  print(text)


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdirs", "out"])
  app.run(main)
