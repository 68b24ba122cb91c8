"""experiments/merge_reports.py on fixed reports: seeds pooled, paired differences and the
recovered share computed again, a reproduced run checked, and mistakes refused in one line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from experiments import merge_reports
from experiments.report_stats import recovered_share

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _variant(name, by_seed, tokens=100.0, mechanism=None, reached=0):
  return dict(name=name, test_accuracy_by_seed={str(s): a for s, a in by_seed.items()},
              rollout_tokens=tokens, wall_seconds=10.0, sft_accuracy=0.28, family="x",
              tokens_to_target=dict(mean=None, ci95=None, reached=reached),
              mechanism=mechanism)


def _reports(b_g4=0.44):
  old = dict(variants=[
      _variant("grpo_g4", {0: 0.40, 1: 0.42, 2: 0.44}),
      _variant("m", {0: 0.45, 1: 0.47}, tokens=100.0, mechanism={"a": 1.0, "b": {"c": 2.0}},
               reached=1),
      _variant("oracle", {0: 0.50, 1: 0.50, 2: 0.52})])
  new = dict(variants=[
      _variant("grpo_g4", {2: b_g4}, tokens=999.0),  # seed 2 again: the reproduction check
      _variant("m", {2: 0.49}, tokens=160.0, mechanism={"a": 4.0, "b": {"c": None}}, reached=1)])
  return [old, new]


def test_seeds_pool_and_statistics_are_recomputed():
  merged = merge_reports.merge(_reports(), ["old.json", "new.json"], "grpo_g4", "m:oracle")
  m = {v["name"]: v for v in merged["variants"]}["m"]
  assert m["seeds"] == 3 and m["seed_ids"] == [0, 1, 2]
  assert m["test_accuracy"] == pytest.approx(0.47)
  assert m["test_accuracy_ci95"] == pytest.approx(4.303 * 0.02 / math.sqrt(3))
  assert m["paired_delta"]["grpo_g4"] == pytest.approx([0.05, 0.0])
  # d_m = 0.05 on every seed, d_o = 0.10, 0.08, 0.08: share 0.05 / 0.08667.
  want = recovered_share({0: 0.45, 1: 0.47, 2: 0.49}, {0: 0.50, 1: 0.50, 2: 0.52},
                         {0: 0.40, 1: 0.42, 2: 0.44})
  assert m["recovered_share"] == pytest.approx(0.05 / (0.26 / 3)) == pytest.approx(want["share"])
  assert m["recovered_share_ci95"] == pytest.approx(want["ci95"])
  # Means weighted by seeds: (2 * 100 + 160) / 3; a missing value is skipped.
  assert m["rollout_tokens"] == pytest.approx(120.0)
  assert m["mechanism"] == {"a": pytest.approx(2.0), "b": {"c": pytest.approx(2.0)}}
  assert m["tokens_to_target"]["reached"] == 2
  other = _reports()
  other[1]["baseline"] = "m"  # another target: the counts do not add up
  assert merge_reports.merge(other, ["o", "n"], "grpo_g4")["variants"][1][
      "tokens_to_target"]["reached"] is None
  assert m["sources"] == {"0": "old.json", "1": "old.json", "2": "new.json"}
  g4 = {v["name"]: v for v in merged["variants"]}["grpo_g4"]
  assert g4["seeds"] == 3 and g4["rollout_tokens"] == 100.0  # the repeat adds no seed
  assert g4["reproduced"] == ["seed 2 in new.json"]
  table = merge_reports.markdown(merged)
  assert "| m | 3 | 0.470 ± 0.050 | +0.050 ± 0.000 | 0.577 ± 0.191 of oracle |" in table
  # Without --oracle, each variant's own oracle as the reports name it (methods_v2's fields).
  reports = _reports()
  reports[0]["variants"][1].update(oracle="oracle", recovered={"baseline": "grpo_g4"})
  own = merge_reports.merge(reports, ["old.json", "new.json"], "grpo_g4")
  assert {v["name"]: v.get("recovered_share") for v in own["variants"]} == {
      "grpo_g4": None, "m": pytest.approx(want["share"]), "oracle": None}


@pytest.mark.parametrize("reports, expected", [
    (lambda: _reports(b_g4=0.45), "new.json: grpo_g4 seed 2 has final accuracy 0.450000"),
    (lambda: [_reports()[0], dict(variants=[_variant("grpo_g4", {2: 0.44, 3: 0.5})])],
     "new.json: grpo_g4 repeats seeds [2] and adds [3]"),
    (lambda: [_reports()[0], dict(variants=[_variant("m", {3: 0.5})])], "share no run"),
])
def test_reports_of_two_sft_policies_are_refused(reports, expected):
  with pytest.raises(ValueError, match=expected.replace("[", r"\[").replace("]", r"\]")):
    merge_reports.merge(reports(), ["old.json", "new.json"], "grpo_g4")


def test_rows_can_be_chosen_and_an_unknown_one_is_named():
  merged = merge_reports.merge(_reports(), ["o", "n"], "grpo_g4", variants=["m"])
  assert [v["name"] for v in merged["variants"]] == ["m"]
  with pytest.raises(ValueError, match="--variants: mm not in these reports"):
    merge_reports.merge(_reports(), ["o", "n"], "grpo_g4", variants=["m", "mm"])


def test_a_user_meets_one_line(tmp_path):
  paths = []
  for i, report in enumerate(_reports(b_g4=0.45)):
    paths.append(str(tmp_path / f"r{i}.json"))
    with open(paths[-1], "w") as f:
      json.dump(report, f)

  def cli(*paths_):
    return subprocess.run([sys.executable, "-m", "experiments.merge_reports",
                           f"--reports={','.join(paths_)}", "--baseline=grpo_g4",
                           f"--out={tmp_path / 'm.md'}", f"--json={tmp_path / 'm.json'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)

  proc = cli(*paths)
  assert proc.returncode != 0 and len(proc.stderr.splitlines()) == 1, proc.stderr
  assert proc.stderr.startswith("error: ") and "grpo_g4 seed 2" in proc.stderr
  proc = cli(paths[0])
  assert proc.returncode == 0, proc.stderr
  with open(tmp_path / "m.json") as f:
    assert [v["seeds"] for v in json.load(f)["variants"]] == [3, 2, 3]
