"""The report's statistics for several SFT draws (issue 59) on fixed inputs with known answers: the
SFT draw as a random effect, Holm's adjustment, the exact sign test, Fieller's interval, and the
registered comparisons read from a pre-registration file over hand-made work dirs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from experiments import report, report_registered
from experiments.report_stats import effect, fieller, holm, sign_test, unit, unit_text

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Paired differences, 3 SFT draws x 2 seeds. Draw means 0.03, 0.06, 0.01 (mean 0.033333; their sd
# 0.025166, se 0.014530, t = 2.2942 on 2 degrees of freedom); within each draw the seeds are
# +-0.01 from its mean (sum of squares 6e-4 over 6 - 3 = 3 degrees of freedom: sd_seed 0.014142);
# MS_between = 2 * 1.26667e-3 / 2 = 1.26667e-3, n0 = 2: var_sft = (1.26667e-3 - 2e-4) / 2 =
# 5.3333e-4, sd_sft 0.023094.
DIFFS = {(1, 0): 0.02, (1, 1): 0.04, (2, 0): 0.05, (2, 1): 0.07, (3, 0): 0.00, (3, 1): 0.02}


def test_the_sft_draw_is_the_unit_of_replication():
  e = effect(DIFFS, "greater")
  assert e["mean"] == pytest.approx(0.1 / 3)
  assert e["dof"] == 2 and e["sfts"] == 3 and e["units"] == 6
  assert e["ci"] == pytest.approx(4.303 * 0.025166 / math.sqrt(3), abs=1e-5)
  # One-sided p on 2 degrees of freedom has a closed form: 1/2 - t / (2 sqrt(t^2 + 2)).
  t = (0.1 / 3) / (0.025166 / math.sqrt(3))
  assert e["p"] == pytest.approx(0.5 - t / (2 * math.sqrt(t * t + 2)), abs=1e-4)
  assert e["p"] == pytest.approx(0.0744, abs=1e-4)
  assert effect(DIFFS)["p"] == pytest.approx(2 * e["p"])  # two-sided
  assert effect(DIFFS, "less")["p"] == pytest.approx(1 - e["p"])
  assert e["sd_seed"] == pytest.approx(0.014142, abs=1e-6)
  assert e["sd_sft"] == pytest.approx(0.023094, abs=1e-6)
  # 5 of the 6 differences are positive, one is 0: the sign test counts 5 of 5, p = 2 / 32.
  assert e["higher"] == 5 and e["sign_p"] == pytest.approx(0.0625)


def test_one_sft_draw_keeps_the_seeds_as_units():
  """Every earlier sweep: seeds are the replicates, the same t interval as before."""
  e = effect({0: 0.06, 1: 0.06, 2: 0.03})
  assert e["mean"] == pytest.approx(0.05) and e["dof"] == 2 and e["sd_sft"] is None
  assert e["ci"] == pytest.approx(4.303 * 0.017321 / math.sqrt(3), abs=1e-5)


def test_holm_steps_down_and_keeps_the_order():
  # 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to the running 0.06.
  assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx(
      {"a": 0.03, "b": 0.06, "c": 0.06})
  assert holm({"a": 0.5, "b": 0.9}) == {"a": 1.0, "b": 1.0}
  out = holm({"a": 0.01, "b": float("nan")})  # nan does not count in m
  assert out["a"] == pytest.approx(0.01) and math.isnan(out["b"])


def test_sign_test_is_the_exact_binomial():
  assert sign_test(5, 5) == pytest.approx(0.0625)  # 5 of 5 seeds: not below 0.05
  assert sign_test(9, 9) == pytest.approx(2 / 512)
  assert sign_test(2, 4) == 1.0 and sign_test(0, 0) == 1.0
  assert sign_test(1, 6) == pytest.approx(2 * 7 / 64)


def test_fieller_with_an_exact_denominator_is_the_t_interval_over_it():
  """With no variance in the denominator the interval is (a -+ t se(a)) / b."""
  f = fieller({0: 0.06, 1: 0.06, 2: 0.03}, {0: 0.1, 1: 0.1, 2: 0.1})
  assert f["bounded"] and f["ratio"] == pytest.approx(0.5)
  assert (f["low"], f["high"]) == pytest.approx((0.5 - 0.4303, 0.5 + 0.4303), abs=1e-4)
  weak = fieller({0: 0.06, 1: 0.06, 2: 0.03}, {0: 0.02, 1: -0.02, 2: 0.01})
  assert not weak["bounded"] and weak["low"] == -math.inf and weak["high"] == math.inf


def test_units_round_trip_through_report_keys():
  assert unit("101/2") == (101, 2) and unit("3") == (None, 3) and unit((5, 1)) == (5, 1)
  assert unit_text((101, 2)) == "101/2" and unit_text(3) == "3"


# --- the registered comparisons over hand-made work dirs of 3 SFT draws x 2 seeds ---

REG = {
    "study": "toy", "question": "q", "registered": "2026-11-28", "base_config": "c.py",
    "metric": "rl_test_accuracy", "split": "test",
    "rows": {"grpo": {}, "method": {"a": 1}, "oracle": {"b": 2}},
    "sft_draws": [1, 2, 3, 4], "rl_seeds": [0, 1], "min_sft_draws": 3, "stopping_rule": "s",
    "analysis": {"alpha": 0.05, "correction": "holm"},
    "comparisons": [{"id": "M", "method": "method", "baseline": "grpo", "direction": "greater"},
                    {"id": "O", "method": "oracle", "baseline": "grpo", "direction": "greater"}],
    "shares": [{"method": "method", "oracle": "oracle", "baseline": "grpo"}],
    "mechanism": {"oracle": "process/wrong_step_rows > 0"},
}
BASE = {(1, 0): 0.40, (1, 1): 0.42, (2, 0): 0.50, (2, 1): 0.52, (3, 0): 0.45, (3, 1): 0.47}


def _run(root, sft, variant, seed, final):
  d = root / f"sft{sft}" / f"{variant}_seed{seed}"
  d.mkdir(parents=True)
  (d / "summary.json").write_text(json.dumps(dict(
      seed=seed, sft_accuracy=0.3, rl_accuracy=final, rl_test_accuracy=final,
      rl_sampled_accuracy=final, rl_train_seconds=1.0, wall_seconds=1.0)))
  (d / "run_config.json").write_text(json.dumps({"seed": seed, "sft": {"seed": sft}}))
  recs = [{"phase": "rl", "step": s, "rollout_tokens": 10, "heldout_accuracy": final,
           "process/wrong_step_rows": 0.5 if variant == "oracle" else 0.0} for s in (1, 2)]
  (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _sweep(root, oracle_gain=0.05):
  for (sft, seed), base in BASE.items():
    _run(root, sft, "grpo", seed, base)
    _run(root, sft, "method", seed, round(base + DIFFS[(sft, seed)], 6))
    _run(root, sft, "oracle", seed, round(base + oracle_gain + 0.01 * sft, 6))
  _run(root, 4, "grpo", 0, 0.5)  # a draw begun but not finished: left out
  return report.find_runs([str(root / "sft*" / "*")])


def test_registered_comparisons_pair_within_draws_and_adjust_by_holm(tmp_path):
  runs = _sweep(tmp_path)
  assert {r["sft"] for r in runs} == {1, 2, 3, 4}
  path = tmp_path / "toy.json"
  path.write_text(json.dumps(REG))
  data = report_registered.registered(runs, REG, "rl_test_accuracy", str(path))
  assert data["sft_draws_complete"] == [1, 2, 3] and data["sft_draws_incomplete"] == {"4": 5}
  assert data["judged"]
  by = {c["id"]: c for c in data["comparisons"]}
  m, o = by["M"], by["O"]
  assert m["mean"] == pytest.approx(0.1 / 3) and m["sfts"] == 3 and m["units"] == 6
  assert m["p"] == pytest.approx(effect(DIFFS, "greater")["p"])
  # The oracle gains 0.06, 0.07, 0.08 by draw (sd 0.01, se 0.005774, t 12.12): p = 0.00337.
  assert o["mean"] == pytest.approx(0.07) and o["p"] == pytest.approx(0.003368, abs=2e-5)
  assert o["p_holm"] == pytest.approx(2 * o["p"]) and m["p_holm"] == pytest.approx(m["p"])
  assert o["replicated"] is True and m["replicated"] is False
  # Bonferroni over 2 comparisons: t(1 - 0.05 / 4, 2) = 6.205 times the se.
  assert m["ci_corrected"] == pytest.approx(6.2053 * 0.025166 / math.sqrt(3), abs=1e-4)
  share = data["shares"][0]
  assert share["share"] == pytest.approx((0.1 / 3) / 0.07) and share["replicates"] == 3
  assert share["bounded"] and share["fieller95"][0] < share["share"] < share["fieller95"][1]
  assert data["mechanism"]["oracle"]["process/wrong_step_rows"] == pytest.approx(0.5)
  assert data["mechanism"]["grpo"]["rollout_tokens"] == 10  # every row, for checks across rows
  assert ("- `oracle`: process/wrong_step_rows 0.5, rollout_tokens 10 (check: "
          "process/wrong_step_rows > 0)") in report_registered.registered_markdown(data)
  assert data["exploratory"] == []
  # A registration git does not know (no repository here) is said so, beside the launches.
  launches = tmp_path / "launches.jsonl"
  launches.write_text(json.dumps(dict(commit="abc", clean=True, started="2026-11-28T23:43:09+00:00",
                                      runs=[])) + "\n")
  data = report_registered.registered(runs, REG, "rl_test_accuracy", str(path), str(launches))
  assert data["provenance"]["registration_precedes_runs"] is None
  text = report_registered.registered_markdown(data)
  assert "(not committed)" in text and "the registration precedes every launch: unknown" in text


def test_too_few_complete_draws_are_not_judged(tmp_path):
  runs = [r for r in _sweep(tmp_path) if r["sft"] != 3]
  data = report_registered.registered(runs, REG, "rl_test_accuracy", str(tmp_path / "x.json"))
  assert data["sft_draws_complete"] == [1, 2] and not data["judged"]
  assert {c["replicated"] for c in data["comparisons"]} == {None}
  assert "not judged yet" in report_registered.registered_markdown(data)


def test_the_report_command_prints_the_registration_and_marks_the_rest_exploratory(tmp_path):
  """As a user runs it: the table of registered comparisons first, the registration's commit
  (a scratch repository here), the launches' commits, and the JSON's `registered` block."""
  runs_root = tmp_path / "runs"
  runs_root.mkdir()
  _sweep(runs_root)
  _run(runs_root, 1, "extra", 0, 0.5)
  repo = tmp_path / "repo"
  repo.mkdir()
  git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True,
                                   text=True).stdout.strip()
  git("init", "-q")
  git("config", "user.email", "t@example.com")
  git("config", "user.name", "t")
  (repo / "toy.json").write_text(json.dumps(REG))
  git("add", "toy.json")
  git("commit", "-qm", "register")
  commit = git("rev-parse", "HEAD")
  launches = tmp_path / "launches.jsonl"
  launches.write_text(json.dumps(dict(commit=commit, clean=True,
                                      started="2026-11-28T23:43:09+00:00",
                                      runs=["/a/machine/path/sft1/grpo_seed0"])) + "\n")
  out = tmp_path / "out"
  subprocess.run([sys.executable, "-m", "experiments.report",
                  f"--workdirs={runs_root}/sft*/*_seed*", f"--prereg={repo / 'toy.json'}",
                  f"--launches={launches}", "--baseline=grpo", "--split=test",
                  f"--out={out}.md", f"--json={out}.json"],
                 cwd=REPO, check=True, capture_output=True, text=True)
  text = (tmp_path / "out.md").read_text()
  assert text.startswith("## Registered comparisons")
  assert f"added in commit {commit[:10]}" in text
  assert "the registration precedes every launch: yes" in text
  assert "| M | method − grpo | +0.033 |" in text and "Exploratory (not registered): extra" in text
  data = json.loads((tmp_path / "out.json").read_text())
  assert data["registered"]["provenance"]["registered"][0] == commit
  # The launches are counted, not copied: no machine's paths in a committed report.
  assert data["registered"]["provenance"]["launches"] == [dict(
      commit=commit, clean=True, started="2026-11-28T23:43:09+00:00", runs=1)]
  assert "/a/machine/path" not in (tmp_path / "out.json").read_text()
  assert [c["id"] for c in data["registered"]["comparisons"]] == ["M", "O"]
  by = {v["name"]: v for v in data["variants"]}
  assert by["method"]["sfts"] == 4 - 1 and "2/1" in by["method"]["test_accuracy_by_seed"]


def test_the_pages_print_a_registered_comparison_and_its_verdict(tmp_path):
  """experiments/pages.py's 'registered' kinds read the report's `registered` section: the
  estimate, its interval, the Holm p-value, the verdict, the SFT draws and the units."""
  from experiments import pages  # pylint: disable=import-outside-toplevel
  runs = _sweep(tmp_path / "runs")
  data = report_registered.registered(runs, REG, "rl_test_accuracy", str(tmp_path / "toy.json"))
  os.makedirs(tmp_path / pages.SWEEPS)
  (tmp_path / pages.SWEEPS / "toy_report.json").write_text(json.dumps(dict(registered=data)))
  row = lambda kind, variant: pages.Finding("x", "f", "m", "d", "toy_report.json", variant, kind)
  o = pages.cell(str(tmp_path), row("registered", "O"))
  by = {c["id"]: c for c in data["comparisons"]}
  assert o.text == (f"+0.070 ± {by['O']['ci']:.3f} (Holm-corrected ± "
                    f"{by['O']['ci_corrected']:.3f}; Holm p {by['O']['p_holm']:.3f}): replicated")
  assert (o.seeds, o.sft_draws) == (6, 3)
  assert o.source == "toy_report.json: registered.comparisons[O]"
  m = pages.cell(str(tmp_path), row("registered", "M"))
  assert m.text.startswith("+0.033 ± ") and m.text.endswith(": not replicated")
  share = pages.cell(str(tmp_path), row("registered_share", "method"))
  low, high = data["shares"][0]["fieller95"]
  assert share.text == f"0.48, Fieller [{low:.2f}, {high:.2f}]" and share.sft_draws == 3
  table = pages.findings_table(str(tmp_path), [row("registered", "O")], wording=False)
  assert "| 6 | first (3 draws) |" in table[-1]
  # A comparison the report could not estimate (null values, as report_stats writes NaN) prints
  # as such instead of failing.
  data["comparisons"][0].update(mean=None, ci=None, ci_corrected=None, p_holm=None,
                                replicated=None)
  (tmp_path / pages.SWEEPS / "toy_report.json").write_text(json.dumps(dict(registered=data)))
  assert pages.cell(str(tmp_path), row("registered", "M")).text == (
      "n/a ± n/a (Holm-corrected ± n/a; Holm p n/a): not judged yet")
