"""experiments/report.py on fixed inputs: intervals, tokens to target, AUC, the efficiency table."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from absl import flags

from experiments import report, report_stats


def _run(name, seed, curve, final=None):
  final = curve[-1][3] if final is None else final
  return dict(name=name, variant=report._SEED_SUFFIX.sub("", name), seed=seed, curve=curve,
              rl_accuracy=final, rl_sampled_accuracy=final - 0.1, sft_accuracy=curve[0][3],
              rollout_tokens=curve[-1][1], rl_train_seconds=10.0, wall_seconds=20.0)


def test_interval_matches_student_t():
  mean, half = report.interval([0.70, 0.72, 0.74])
  assert mean == pytest.approx(0.72)
  # s = 0.02, t(0.975, 2) = 4.303: 4.303 * 0.02 / sqrt(3).
  assert half == pytest.approx(4.303 * 0.02 / math.sqrt(3))
  assert math.isnan(report.interval([0.5])[1])
  assert report.interval([0.5, 0.5])[1] == 0.0


def test_tokens_to_target_interpolates():
  curve = [(0, 0.0, 0.0, 0.2), (50, 1000.0, 5.0, 0.4), (100, 2000.0, 10.0, 0.6)]
  assert report.tokens_to_target(curve, 0.5) == pytest.approx(1500.0)
  assert report.tokens_to_target(curve, 0.4) == pytest.approx(1000.0)
  assert report.tokens_to_target(curve, 0.1) == 0.0  # the SFT policy already meets it
  assert report.tokens_to_target(curve, 0.7) == math.inf
  # Non-monotone: the first crossing counts.
  bumpy = [(0, 0.0, 0.0, 0.2), (1, 100.0, 1.0, 0.6), (2, 200.0, 2.0, 0.3), (3, 300.0, 3.0, 0.7)]
  assert report.tokens_to_target(bumpy, 0.5) == pytest.approx(75.0)


def test_auc_is_mean_accuracy_over_tokens():
  curve = [(0, 0.0, 0.0, 0.2), (50, 1000.0, 5.0, 0.4), (100, 2000.0, 10.0, 0.6)]
  assert report.auc(curve, 2000.0) == pytest.approx(0.4)
  # Cut at 1500: trapezoids 1000 * 0.3 + 500 * (0.4 + 0.5) / 2 = 525, / 1500.
  assert report.auc(curve, 1500.0) == pytest.approx(525.0 / 1500.0)
  with pytest.raises(ValueError, match="max_tokens"):
    report.auc(curve, 3000.0)


def test_efficiency_table():
  base = [_run(f"grpo_seed{s}", s, [(0, 0.0, 0.0, 0.2), (10, 1000.0, 1.0, 0.5 + 0.01 * s)])
          for s in range(3)]
  fast = [_run(f"fast_seed{s}", s, [(0, 0.0, 0.0, 0.2), (10, 500.0, 1.0, 0.6 + 0.01 * s)])
          for s in range(3)]
  slow = [_run(f"slow_seed{s}", s, [(0, 0.0, 0.0, 0.2), (10, 1000.0, 1.0, 0.3)])
          for s in range(3)]
  paired = report.efficiency(base + fast + slow, baseline="grpo")
  assert paired["target"] is None and paired["baseline_final"] == pytest.approx(0.51)
  pv = paired["variants"]
  # Seed s's target is grpo_seed{s}'s final 0.5 + 0.01 s: grpo reaches it at its last point,
  # fast at 500 * (0.3 + 0.01 s) / (0.4 + 0.01 s).
  assert pv["grpo"]["reached"] == 3 and pv["grpo"]["to_target"][0] == pytest.approx(1000.0)
  assert pv["fast"]["to_target"][0] == pytest.approx(
      np.mean([500 * (0.3 + 0.01 * s) / (0.4 + 0.01 * s) for s in range(3)]))
  assert pv["slow"]["reached"] == 0
  assert "the baseline's final with the same seed (mean 0.510)" in report.markdown(
      base + fast + slow, baseline="grpo")
  eff = report.efficiency(base + fast + slow, baseline="grpo", target=0.51)
  assert eff["target"] == pytest.approx(0.51)
  assert eff["auc_tokens"] == 500.0
  v = eff["variants"]
  # fast reaches 0.51 at 500 * (0.31 / (0.4 + 0.01 s)).
  expected = [500 * 0.31 / (0.4 + 0.01 * s) for s in range(3)]
  assert v["fast"]["to_target"][0] == pytest.approx(np.mean(expected))
  assert v["fast"]["delta"] == (pytest.approx(0.1), pytest.approx(0.0, abs=1e-12))
  assert v["slow"]["reached"] == 0 and math.isnan(v["slow"]["to_target"][0])
  assert v["grpo"]["reached"] == 2  # seed 0 ends at 0.50 < 0.51
  text = report.markdown(base + fast + slow, baseline="grpo", target=0.51)
  assert "| slow | 3 |" in text and "reached 0/3" in text and "reached 2/3" in text
  assert "target accuracy 0.510" in text
  with pytest.raises(ValueError, match="--baseline"):
    report.efficiency(base, baseline="nope")


def _ladder_summary(seed, sft, rl, shares=(0.3, 0.5, 0.2)):
  by = {str(k): rl - 0.05 * (k - 2) for k in range(2, 8)}
  return dict(seed=seed, sft_accuracy=sft, rl_accuracy=rl, sft_sampled_accuracy=sft - 0.02,
              rl_sampled_accuracy=rl - 0.02, sft_step_error_rate=0.5, rl_step_error_rate=0.3,
              wall_seconds=800.0, sft_accuracy_by_stratum={k: v - 0.1 for k, v in by.items()},
              rl_accuracy_by_stratum=by,
              sft_success_rate_shares={"share_below_0.1": shares[0],
                                       "share_0.1_to_0.9": shares[1],
                                       "share_above_0.9": shares[2]})


def _write(tmp_path, name, summary):
  d = tmp_path / name
  d.mkdir()
  (d / "summary.json").write_text(json.dumps(summary))
  return str(d)


def test_ladder_gate_table(tmp_path):
  dirs = [_write(tmp_path, f"s{s}", _ladder_summary(s, 0.35, 0.50 + 0.01 * s)) for s in range(3)]
  text = report.ladder_tables(dirs)
  assert "| RL gain >= 0.1 (every run) | yes |" in text
  assert "seed std of RL final <= 0.02 (is 0.0100) | yes |" in text
  assert "| SFT rates > 0.9 >= 0.1 | yes |" in text
  assert "| terms | 2 | 3 | 4 | 5 | 6 | 7 |" in text
  assert "| RL greedy | 0.510 ± " in text
  # A run that gains too little, a spread that is too wide, too few easy prompts: each fails.
  bad = dirs[:2] + [_write(tmp_path, "bad", _ladder_summary(2, 0.45, 0.50, (0.3, 0.65, 0.05)))]
  bad.append(_write(tmp_path, "wide", _ladder_summary(3, 0.30, 0.60)))
  text = report.ladder_tables(bad)
  assert "| RL gain >= 0.1 (every run) | **no** |" in text
  assert "| SFT rates > 0.9 >= 0.1 | **no** |" in text
  assert "(is 0.0486) | **no** |" in text
  with pytest.raises(ValueError, match="per-stratum"):
    report.ladder_tables([_write(tmp_path, "plain", {"seed": 0})])


def test_zero_adv_share_prefers_the_allocation_metric():
  recs = [{"alloc/zero_var_share": 0.5, "informative_frac": 0.9}, {"informative_frac": 0.75},
          {"loss": 1.0}]
  assert report.zero_adv_share(recs) == pytest.approx(0.375)
  assert np.isnan(report.zero_adv_share([]))


def test_calibration_table(tmp_path):
  """Per step: mean ± 95% t interval of V0 and its baselines over runs; the past rate's coverage."""
  dirs = []
  for s, brier in enumerate((0.08, 0.10)):
    d = tmp_path / f"v{s}"
    d.mkdir()
    recs = [{"phase": "rl", "step": 1, "loss": 0.0},
            {"phase": "rl", "step": 25, "v0/brier": brier, "v0/auroc": 0.8, "v0/ece": 0.05,
             "baseline_global_mean/brier": 0.12, "baseline_global_mean/auroc": 0.5,
             "baseline_global_mean/ece": 0.01, "baseline_past_rate/brier": float("nan"),
             "baseline_past_rate/coverage": 0.5 * s, "baseline_logreg/brier": 0.09}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    dirs.append(str(d))
  text = report.calibration_table(dirs)
  half = 12.706 * np.std([0.08, 0.10], ddof=1) / np.sqrt(2)
  assert f"| 25 | 2 | brier | 0.090 ± {half:.3f} | 0.120 ± 0.000 | - (0.25) | 0.090 ± 0.000 |" in text
  assert "| 25 | 2 | auroc | 0.800 ± 0.000 | 0.500 ± 0.000 | - (0.25) | - |" in text
  assert report.calibration_table([str(tmp_path / "v0")]).count("\n") == 5  # header + 3 rows
  (tmp_path / "plain").mkdir()
  (tmp_path / "plain" / "metrics.jsonl").write_text('{"phase": "rl", "step": 1}\n')
  assert report.calibration_table([str(tmp_path / "plain")]) == ""


# Hand-made work dirs for the paired, recovered-share and JSON tests. Final greedy accuracy on the
# test set (rl_test_accuracy) per seed 0, 1, 2; the dev set's (rl_accuracy) is 0.02 lower:
#   grpo         0.50 0.52 0.48
#   oracle_prm   0.60 0.64 0.56   oracle - grpo = 0.10 0.12 0.08 (mean 0.10, sd 0.02)
#   pav          0.56 0.58 0.51   pav - grpo    = 0.06 0.06 0.03 (mean 0.05)
#   weak_oracle  0.52 0.50 0.49   weak - grpo   = 0.02 -0.02 0.01 (mean 0.0033, not above 0)
TEST_FINALS = {"grpo": (0.50, 0.52, 0.48), "oracle_prm": (0.60, 0.64, 0.56),
               "pav": (0.56, 0.58, 0.51), "weak_oracle": (0.52, 0.50, 0.49)}
SFT = 0.30
T4303 = 4.303  # t(0.975, 2 degrees of freedom)


def _write_run(root, name, seed, test_final, with_test=True, steps=100, eval_every=10):
  """A work dir: summary.json, and metrics.jsonl with `steps` RL steps of 100 rollout tokens
  whose dev accuracy rises linearly from SFT to the dev final, evaluated every `eval_every`."""
  dev_final = round(test_final - 0.02, 6)
  d = root / name
  d.mkdir()
  summary = dict(seed=seed, sft_accuracy=SFT, rl_accuracy=dev_final,
                 rl_sampled_accuracy=dev_final - 0.1, rl_train_seconds=10.0, wall_seconds=20.0)
  if with_test:
    summary.update(rl_test_accuracy=test_final, sft_test_accuracy=SFT + 0.01)
  (d / "summary.json").write_text(json.dumps(summary))
  recs = []
  for step in range(1, steps + 1):
    rec = {"phase": "rl", "step": step, "rollout_tokens": 100, "step_seconds": 0.1,
           "informative_frac": 0.5}
    if step % eval_every == 0:
      rec["heldout_accuracy"] = SFT + (dev_final - SFT) * step / steps
    recs.append(rec)
  (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
  return str(d)


def _ground(tmp_path, with_test=True):
  for variant, finals in TEST_FINALS.items():
    for seed, final in enumerate(finals):
      _write_run(tmp_path, f"{variant}_seed{seed}", seed, final,
                 with_test=with_test or variant != "pav")
  return report.find_runs([str(tmp_path / "*")])


def test_curves_keep_every_evaluation(tmp_path):
  """Evaluating every 10 of 100 steps gives 11 points (SFT at 0 tokens), none dropped."""
  runs = _ground(tmp_path)
  curve = next(r for r in runs if r["name"] == "grpo_seed0")["curve"]
  assert [p[0] for p in curve] == list(range(0, 101, 10))
  assert [p[1] for p in curve] == [1000.0 * k for k in range(11)]
  assert curve[-1][3] == pytest.approx(0.48)  # The dev final, 0.50 - 0.02.


def test_recovered_share_delta_method():
  base = dict(enumerate(TEST_FINALS["grpo"]))
  rec = report_stats.recovered_share(dict(enumerate(TEST_FINALS["pav"])),
                               dict(enumerate(TEST_FINALS["oracle_prm"])), base)
  # R = mean(pav - grpo) / mean(oracle - grpo) = 0.05 / 0.10 = 0.5. Residuals d_m - R d_o:
  # 0.06 - 0.05, 0.06 - 0.06, 0.03 - 0.04 = 0.01, 0, -0.01, sd 0.01; half-width
  # t * sd / (sqrt(3) * 0.10) = 4.303 * 0.01 / 0.17321 = 0.24843.
  assert rec["share"] == pytest.approx(0.5)
  assert rec["ci95"] == pytest.approx(T4303 * 0.01 / (math.sqrt(3) * 0.10))
  assert rec["ci95"] == pytest.approx(0.24843, abs=1e-5)
  assert rec["seeds"] == 3 and rec["resolved"]
  # The weak oracle gains 0.02, -0.02, 0.01: mean 0.00333, sd 0.02082, lower end
  # 0.00333 - 4.303 * 0.02082 / sqrt(3) < 0, so the share 0.05 / 0.00333 = 15 has no interval.
  weak = report_stats.recovered_share(dict(enumerate(TEST_FINALS["pav"])),
                                dict(enumerate(TEST_FINALS["weak_oracle"])), base)
  assert weak["share"] == pytest.approx(15.0) and math.isinf(weak["ci95"])
  assert not weak["resolved"]
  # Only the seeds all three ran count: without seed 2, R = 0.06 / 0.11.
  two = report_stats.recovered_share({0: 0.56, 1: 0.58}, dict(enumerate(TEST_FINALS["oracle_prm"])),
                               base)
  assert two["seeds"] == 2 and two["share"] == pytest.approx(0.06 / 0.11)
  one = report_stats.recovered_share({0: 0.56}, {0: 0.60}, {0: 0.50})
  assert one["share"] == pytest.approx(0.6) and math.isnan(one["ci95"])
  assert math.isnan(report_stats.recovered_share({}, {0: 0.6}, {0: 0.5})["share"])
  assert math.isnan(report_stats.recovered_share({0: 0.6}, {0: 0.5}, {0: 0.5})["share"])  # no gain


def test_parse_oracles():
  variants = ["grpo", "pav", "knapsack", "oracle_prm", "oracle_knapsack"]
  assert report.parse_oracles("oracle_prm", variants, "grpo") == {
      "pav": "oracle_prm", "knapsack": "oracle_prm", "oracle_knapsack": "oracle_prm"}
  assert report.parse_oracles("knapsack:oracle_knapsack,pav:oracle_prm", variants, "grpo") == {
      "knapsack": "oracle_knapsack", "pav": "oracle_prm"}
  # A bare name is the default for the variants not named; oracles get no share themselves.
  assert report.parse_oracles("oracle_prm, knapsack:oracle_knapsack", variants, "grpo") == {
      "pav": "oracle_prm", "knapsack": "oracle_knapsack"}
  assert report.parse_oracles(None, variants, "grpo") == {}
  with pytest.raises(ValueError, match="not variants"):
    report.parse_oracles("pav:oracle_nope", variants, "grpo")
  with pytest.raises(ValueError, match="two default"):
    report.parse_oracles("oracle_prm,oracle_knapsack", variants, "grpo")


def test_markdown_reports_test_split_and_recovered_share(tmp_path):
  runs = _ground(tmp_path)
  text = report.markdown(runs, baseline="grpo", oracle="pav:oracle_prm")
  assert "final accuracy on the test set" in text
  assert "| variant | seeds | test greedy acc | Δ vs baseline (paired) | share of oracle gain" in text
  rows = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}
  # pav: mean (0.56 + 0.58 + 0.51) / 3 = 0.550 ± 4.303 * sqrt(0.0013 / 3) = 0.090; paired delta
  # 0.05 ± 4.303 * 0.01 = 0.043 (d = 0.06, 0.06, 0.03: sd 0.017321, / sqrt(3) = 0.01); share
  # 0.50 ± 0.25 (test_recovered_share_delta_method).
  assert rows["pav"].startswith("| pav | 3 | 0.550 ± 0.090 | 0.050 ± 0.043 | 0.50 ± 0.25 |")
  assert rows["weak_oracle"].startswith("| weak_oracle | 3 | 0.503 ± 0.038 | 0.003 ± 0.052 | - |")
  assert rows["grpo_seed0"].startswith("| grpo_seed0 | 0 | 0.480 |")  # dev, then test last
  assert rows["grpo_seed0"].endswith("| 0.500 |")
  # An oracle whose gain is not above 0 (0.00333 ± 0.052): the share 0.05 / 0.00333 = 15 is
  # shown without an interval.
  text = report.markdown(runs, baseline="grpo", oracle="weak_oracle")
  assert "| pav | 3 | 0.550 ± 0.090 | 0.050 ± 0.043 | 15.00 (oracle gain not resolved) |" in text
  # Two oracles: each cell names its own.
  runs += [report.load_run(_write_run(tmp_path, f"pav2_seed{s}", s, acc))
           for s, acc in enumerate(TEST_FINALS["pav"])]
  text = report.markdown(runs, baseline="grpo", oracle="pav:oracle_prm,pav2:weak_oracle")
  assert "| 0.50 ± 0.25 of oracle_prm |" in text
  assert "| 15.00 (oracle gain not resolved) of weak_oracle |" in text


def test_a_family_measures_its_share_from_its_own_baseline(tmp_path):
  """`variant:oracle:baseline`: pav's share of oracle_prm's gain over weak_oracle (a family run on
  its own prompt pool, say): pav - weak = 0.04, 0.08, 0.02 and oracle - weak = 0.08, 0.14, 0.07,
  so R = 0.14 / 0.29 = 0.4828; the family's baseline gets no share itself, its paired delta to
  the report's baseline stays."""
  runs = _ground(tmp_path)
  spec = "pav:oracle_prm:weak_oracle"
  assert report.parse_oracles(spec, TEST_FINALS, "grpo") == {"pav": "oracle_prm"}
  data = report.json_report(runs, baseline="grpo", oracle=spec)
  by = {v["name"]: v for v in data["variants"]}
  rec = by["pav"]["recovered_share"]
  assert (rec["oracle"], rec["baseline"], rec["seeds"]) == ("oracle_prm", "weak_oracle", 3)
  assert rec["share"] == pytest.approx(0.14 / 0.29) and rec["resolved"]
  assert "recovered_share" not in by["weak_oracle"]
  assert by["pav"]["paired_delta"]["grpo"][0] == pytest.approx(0.05)
  text = report.markdown(runs, baseline="grpo", oracle=spec)
  assert "| 0.48 ± " in text and " of oracle_prm over weak_oracle |" in text
  with pytest.raises(ValueError, match="'pav:oracle_prm:weak_oracle:x' is not variant:oracle"):
    report.parse_oracles(spec + ":x", TEST_FINALS, "grpo")
  with pytest.raises(ValueError, match=r"names \['nope'\]"):
    report.parse_oracles("pav:oracle_prm:nope", TEST_FINALS, "grpo")


def test_json_report(tmp_path):
  runs = _ground(tmp_path)
  data = report.json_report(runs, baseline="grpo", oracle="oracle_prm")
  json.dumps(data, allow_nan=False)  # Strict JSON: undefined numbers are null.
  assert data["baseline"] == "grpo" and data["test_accuracy_key"] == "rl_test_accuracy"
  by = {v["name"]: v for v in data["variants"]}
  assert sorted(by) == ["grpo", "oracle_prm", "pav", "weak_oracle"]
  pav = by["pav"]
  assert pav["seeds"] == 3 and pav["seed_ids"] == [0, 1, 2]
  # Mean 0.55; deviations 0.01, 0.03, -0.04: sd sqrt(0.0026 / 2); half 4.303 * sd / sqrt(3).
  assert pav["test_accuracy"] == pytest.approx(0.55)
  assert pav["test_accuracy_ci95"] == pytest.approx(T4303 * math.sqrt(0.0013 / 3))
  assert pav["dev_accuracy"] == pytest.approx(0.53)
  assert pav["rollout_tokens"] == 10000.0  # 100 steps x 100 tokens
  assert pav["paired_delta"]["grpo"] == [pytest.approx(0.05), pytest.approx(T4303 * 0.01)]
  # pav - oracle_prm = -0.04, -0.06, -0.05: mean -0.05, sd 0.01.
  assert pav["paired_delta"]["oracle_prm"] == [pytest.approx(-0.05),
                                               pytest.approx(T4303 * 0.01 / math.sqrt(3))]
  assert pav["recovered_share"] == dict(oracle="oracle_prm", baseline="grpo",
                                        share=pytest.approx(0.5), ci95=pytest.approx(0.24843,
                                                                                    abs=1e-5),
                                        seeds=3, resolved=True,
                                        fieller95=[pytest.approx(0.1203, abs=1e-4),
                                                   pytest.approx(0.7158, abs=1e-4)])
  # Fieller: a = 0.05, b = 0.10, v_aa = 1e-4, v_bb = 1.3333e-4, v_ab = 1e-4 (sample moments / 3),
  # t^2 = 18.5158: R^2 (0.01 - t^2 v_bb) - 2 R (0.005 - t^2 v_ab) + (0.0025 - t^2 v_aa) = 0 has
  # roots (0.0062968 -+ 0.0044851) / 0.0150624 = 0.1203, 0.7158 (not symmetric about 0.5).
  # weak_oracle - grpo = 0.02, -0.02, 0.01 (mean 0.00333): share 0.0333 of oracle_prm's gain.
  assert by["weak_oracle"]["recovered_share"]["share"] == pytest.approx(0.1 / 3)
  assert "recovered_share" not in by["grpo"] and "recovered_share" not in by["oracle_prm"]
  unresolved = report.json_report(runs, baseline="grpo", oracle="pav:weak_oracle")
  share = next(v for v in unresolved["variants"] if v["name"] == "pav")["recovered_share"]
  assert share["share"] == pytest.approx(15.0) and share["ci95"] is None  # null, not Infinity
  assert not share["resolved"]
  # Tokens to target: seed s's target is grpo's dev final (0.48, 0.50, 0.46); pav's dev curve
  # rises linearly from 0.30 to 0.54, 0.56, 0.49 over 10,000 tokens, so it reaches it at
  # 10,000 x 0.18 / 0.24 = 7,500, 10,000 x 0.20 / 0.26 = 7,692.3 and 10,000 x 0.16 / 0.19.
  assert pav["tokens_to_target"]["reached"] == 3
  assert pav["tokens_to_target"]["mean"] == pytest.approx(
      np.mean([7500.0, 1e4 * 0.20 / 0.26, 1e4 * 0.16 / 0.19]))
  assert by["grpo"]["tokens_to_target"]["mean"] == pytest.approx(10000.0)
  assert by["grpo"]["paired_delta"]["pav"][0] == pytest.approx(-0.05)


def test_json_falls_back_to_dev_when_a_run_has_no_test_set(tmp_path):
  """One variant without rl_test_accuracy: every variant is read on dev, and the key says so."""
  data = report.json_report(_ground(tmp_path, with_test=False), baseline="grpo")
  assert data["test_accuracy_key"] == "rl_accuracy"
  by = {v["name"]: v for v in data["variants"]}
  assert by["grpo"]["test_accuracy"] == pytest.approx(0.48)  # dev: 0.48, 0.50, 0.46
  assert by["pav"]["test_accuracy_key"] == "rl_accuracy"
  assert by["pav"]["paired_delta"]["grpo"][0] == pytest.approx(0.05)  # the same on dev
  assert "recovered_share" not in by["pav"]


def test_split_dev_reads_the_dev_set_and_test_insists_on_it(tmp_path):
  """--split=dev pairs the dev finals though every run has a test set (settings are chosen on
  dev); --split=test refuses a run without a test set in one line naming it."""
  runs = _ground(tmp_path)
  data = report.json_report(runs, baseline="grpo", split="dev")
  assert data["test_accuracy_key"] == "rl_accuracy"
  by = {v["name"]: v for v in data["variants"]}
  assert by["grpo"]["test_accuracy"] == pytest.approx(0.48)  # dev: 0.48, 0.50, 0.46
  assert "final accuracy on the dev set" in report.markdown(runs, baseline="grpo", split="dev")
  (tmp_path / "b").mkdir()
  no_test = report.load_run(_write_run(tmp_path / "b", "grpo_seed9", 9, 0.5, with_test=False))
  with pytest.raises(ValueError, match="--split=test: run 'grpo_seed9' has no rl_test_accuracy"):
    report.efficiency(runs + [no_test], baseline="grpo", split="test")
  with pytest.raises(ValueError, match="--split='val'"):
    report.efficiency(runs, baseline="grpo", split="val")


def test_main_writes_json(tmp_path):
  """report's flags parse in a process that has also imported experiments.run (a test worker
  that ran another file first): run marks --config required only when it runs as a command."""
  # pylint: disable=g-import-not-at-top,unused-import (imported for its flag definitions)
  from experiments import run
  (tmp_path / "runs").mkdir()
  _ground(tmp_path / "runs")
  out = tmp_path / "out"
  flags.FLAGS(["report", f"--workdirs={tmp_path / 'runs' / '*'}", f"--out={out / 'r.md'}",
               f"--json={out / 'r.json'}", "--baseline=grpo", "--oracle=pav:oracle_prm"])
  try:
    report.main(["report"])
  finally:
    flags.FLAGS.unparse_flags()
  data = json.loads((out / "r.json").read_text())
  assert [v["name"] for v in data["variants"]] == ["grpo", "oracle_prm", "pav", "weak_oracle"]
  assert data["variants"][2]["recovered_share"]["share"] == pytest.approx(0.5)
  assert "share of oracle gain recovered" in (out / "r.md").read_text()
