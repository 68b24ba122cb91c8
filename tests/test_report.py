"""experiments/report.py on fixed inputs: intervals, tokens to target, AUC, the efficiency table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments import report


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
  (d / "summary.json").write_text(__import__("json").dumps(summary))
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
  import json  # pylint: disable=import-outside-toplevel
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
