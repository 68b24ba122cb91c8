"""The sweeps as data: each sweep's variants apply to its base config (ladder, ladder2), the
methods_v2 presets and ground v2's pilot change what they say, and the methods_v2 / ground v2
reports read fixed report JSON (gates, families, the recovered share, the engines' metrics).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from experiments.configs import ladder as ladder_config
from experiments.configs import ladder2 as ladder2_config
from experiments.sweeps import (estimators, ground_v2, ground_v2_pilot, ladder_baselines, launch,
                               mechanism, methods_v2, value_priors)
from rl_jax.rollout import checks
from rl_jax.rollout import requests as requests_lib
from rl_jax.train import config_check
from rl_jax.value.history import RolloutHistory


def test_estimator_sweep_is_data():
  runs = estimators.get_sweep()
  assert len(runs) == len(estimators.VARIANTS) * 2
  by_name = {r["name"]: r for r in runs}
  assert by_name["mc_grpo_g2_seed1"]["rl.group_size"] == 3  # G = 2 (+1 pivot).
  assert by_name["gdpo_format_seed0"]["rl.rewards"] == ("task_score", "format")
  assert {r["seed"] for r in runs} == {0, 1}


def test_ladder_baselines_sweep_applies_to_the_ladder_config():
  runs = ladder_baselines.get_sweep()
  assert len(runs) == len(ladder_baselines.VARIANTS) * 3
  assert {r["seed"] for r in runs} == {0, 1, 2}
  for run in runs:
    config = ladder_config.get_config()
    overrides = {k: v for k, v in run.items() if k != "name"}
    config.update_from_flattened_dict(overrides)  # A mistyped key raises here.
    checks.check_config(config)
    assert all(config[k.split(".")[0]] is not None for k in overrides)
  by_name = {r["name"]: r for r in runs}
  assert by_name["mc_grpo_seed2"]["rl.group_size"] == 5  # G = 4 (+1 pivot).
  assert by_name["grpo_g4_seed0"]["rl.group_size"] == 4


def test_ground_v2_sweep_applies_to_ladder2_and_names_the_issue_variants():
  runs = ground_v2.get_sweep()
  assert {r["name"].rsplit("_seed", 1)[0] for r in runs} == {
      "grpo_g4", "grpo_g8", "grpo_g16", "oracle_prm", "oracle_knapsack", "oracle_treepo"}
  assert [r["seed"] for r in runs[:6]] == [0] * 6 and {r["seed"] for r in runs} == set(range(5))
  budgets = {}
  for run in runs:
    config = ladder2_config.get_config()
    config.unlock()
    config.update_from_flattened_dict({k: v for k, v in run.items() if k != "name"})
    config_check.check(config)  # registry names, ranges, rollout and allocator rules
    budgets[run["name"].rsplit("_seed", 1)[0]] = config.rl.prompts_per_step * config.rl.group_size
  # The oracles run at GRPO G=4's rows per step; G=8 and G=16 at 2x and 4x.
  assert budgets == {"grpo_g4": 128, "grpo_g8": 256, "grpo_g16": 512, "oracle_prm": 128,
                     "oracle_knapsack": 128, "oracle_treepo": 128}
  assert {r["name"] for r in ground_v2.get_sweep(["oracle_treepo"])} == {
      f"oracle_treepo_seed{s}" for s in range(5)}
  with pytest.raises(ValueError, match=r"--variants names \['nope'\]; expected names from"):
    ground_v2.get_sweep(["grpo_g4", "nope"])
  report = ground_v2.report_command("runs/sweeps/ground_v2", "experiments/sweeps")
  assert "--baseline=grpo_g4" in report and any(a.endswith("ground_v2_report.json")
                                                for a in report)


def test_methods_v2_presets_apply_to_ladder2_at_g4_budget_from_ground_v2s_sft(tmp_path):
  """Every preset passes the config checks at GRPO G=4's rows per step (latr_g8, latr_p64, its
  control grpo_p64, the recipe built on it and the G = 8 rows of PAV and the pool at G=8's); PAV
  reads the sweep's PRMs; PRIME's PRM rate is the reference's ratio (1e-6 : 5e-7) times ladder2's
  policy rate; the dev screen runs seeds 0-2 and the table seeds 0-4; the dry run trains the PRMs
  from the shared SFT before any RL run."""
  runs = methods_v2.get_sweep(str(tmp_path))
  assert {r["seed"] for r in runs} == set(range(5))
  for name in methods_v2.SCREENED_OUT:  # the screen's seeds only
    assert {r["seed"] for r in runs if r["name"].startswith(name + "_seed")} == {0, 1, 2}
  assert {r["seed"] for r in methods_v2.get_sweep(str(tmp_path), "dev")} == {0, 1, 2}
  for run in runs:
    config = ladder2_config.get_config()
    config.unlock()
    config.update_from_flattened_dict({k: v for k, v in run.items() if k != "name"})
    config_check.check(config)
    if run["name"].startswith("grpo_g4_b24"):  # V0.5's first round alone: 24 x 4 rows
      assert requests_lib.batch_rows(config) == 96
      continue
    if run["name"].startswith("grpo_g8_b24"):  # and at G = 8's rows: 24 x 8
      assert requests_lib.batch_rows(config) == 192
      continue
    if run["name"].startswith(("latr_g8", "latr_p64", "grpo_p64", "recipe_latr_pav", "grpo_g8_pool",
                               "knapsack_g8_pool", "insight_g8_pool", "pav_g8", "oracle_v05_g8",
                               "v05_v0_g8")):  # 8 x 32, 4 x 64; V0.5: 8 x 24 first, 64 left
      assert requests_lib.batch_rows(config) == 256
      if config.rl.advantage == "v05":
        assert config.rl.prompts_per_step * config.rl.group_size == 192
      continue
    assert requests_lib.batch_rows(config) == 128, run["name"]  # G = 4's rows a step
    if config.rl.advantage == "v05":  # its extra rounds draw on the rows the first one leaves
      assert config.rl.prompts_per_step * config.rl.group_size == 96
    else:
      assert config.rl.prompts_per_step * config.rl.group_size == 128, run["name"]
    assert launch._shares_sft(run), run["name"]  # pairs with ground_v2's runs of the same seed
  v = methods_v2.variants(str(tmp_path))
  # Every preset is placed against an oracle, or is a family's own baseline or oracle.
  assert set(methods_v2.FAMILIES) | set(methods_v2.FAMILY_BASELINES) | set(
      methods_v2.FAMILY_ORACLES) == set(v)
  assert v["recipe_latr_pav"] == {**v["latr_p64"], **v["pav_bok4_a1"]}  # exactly its two parts
  # The pool family's best at G = 8's rows: the G = 4 presets with 8 rows a prompt (InSight's
  # equal groups 8 wide), beside GRPO G = 8 on the same pool.
  g8 = {"rl.group_size": 8}
  assert v["knapsack_g8_pool"] == {**v["knapsack_buf16"], **g8}
  assert v["insight_g8_pool"] == {**v["insight_pool"], **g8, "rl.max_group_size": 8}
  assert v["grpo_g8_pool"] == {**v["grpo_g4_pool"], **g8}
  assert v["pav_g8"] == {**v["pav_bok4_a1"], **g8}  # PAV's best at G = 8's rows
  for name in ("oracle_v05_g8", "v05_v0_g8"):  # V0.5 and its oracle at twice the rows
    assert v[name] == {**v[name.replace("_g8", "_eq")], **g8, "rl.rows": 256}
  assert methods_v2.FAMILIES["v05_v0_g8"] == ("value prior", "oracle_v05_g8", "grpo_g8")
  assert methods_v2.FAMILIES["knapsack_g8_pool"][2] == "grpo_g8_pool"
  assert v["pav_truth_a1"]["rl.process.prm_dir"] == os.path.join(
      str(tmp_path), "methods_v2", "_prm", "truth", "truth")
  config = ladder2_config.get_config()
  assert v["prime_ratio"]["rl.process.prm_lr"] / config.rl.optim.lr == pytest.approx(1e-6 / 5e-7)
  out = subprocess.run([sys.executable, "-m", "experiments.sweeps.methods_v2", "--dry_run",
                        f"--workdir_root={tmp_path}", "--split=dev"], capture_output=True,
                       text=True, check=True).stdout.splitlines()
  assert "experiments.train_prm" in out[1] and "--kinds=pav" in out[1] and "--n_mc=16" in out[1]
  assert "--kinds=truth" in out[2] and "--config.rl.steps=0" in out[0]
  assert len(out) == 3 + len(v) * 3 + 1 and all("init_from=" in line for line in out[3:-1])
  assert "experiments.report" in out[-1] and "methods_v2_dev_report.json" in out[-1]
  out = subprocess.run([sys.executable, "-m", "experiments.sweeps.methods_v2", "--dry_run",
                        f"--workdir_root={tmp_path}", "--variants=vade_pool"], capture_output=True,
                       text=True, check=True).stdout.splitlines()
  # No process reward among them: no PRM is trained.
  assert len(out) == 1 + 5 + 1 and all("vade_pool_seed" in line for line in out[1:-1])
  assert not any("train_prm" in line for line in out)
  out = subprocess.run([sys.executable, "-m", "experiments.sweeps.methods_v2", "--dry_run",
                        f"--workdir_root={tmp_path}", "--variants=arrol_g4,pav_truth_a1"],
                       capture_output=True, text=True, check=True).stdout.splitlines()
  assert [line for line in out if "train_prm" in line] == [out[1]] and "--kinds=truth" in out[1]
  out = subprocess.run([sys.executable, "-m", "experiments.sweeps.methods_v2", "--dry_run",
                        f"--workdir_root={tmp_path}", "--variants=arrol_g4", "--seeds=1,3",
                        "--report_name=engines"], capture_output=True, text=True,
                       check=True).stdout.splitlines()
  assert [l.split("--config.seed=")[1].split()[0] for l in out[1:-1]] == ["1", "3"]
  assert out[-1].endswith("--json=experiments/sweeps/engines.json")
  # The test split takes replicates past the table's seeds 0-4; the dev split only its own.
  out = subprocess.run([sys.executable, "-m", "experiments.sweeps.methods_v2", "--dry_run",
                        f"--workdir_root={tmp_path}", "--variants=insight_pool", "--seeds=7,5"],
                       capture_output=True, text=True, check=True).stdout.splitlines()
  assert [l.split("--workdir=")[1].split()[0] for l in out[1:-1]] == [
      f"{tmp_path}/methods_v2/insight_pool_seed{s}" for s in (5, 7)]
  assert [r["seed"] for r in methods_v2.get_sweep(str(tmp_path), only=["pav_bok4_a2"],
                                                   seeds=[2, 5])] == [2]  # screened out past 2
  with pytest.raises(ValueError, match="--seeds=-1: expected seeds >= 0"):
    methods_v2.get_sweep(str(tmp_path), seeds=[-1])
  for flags, message in ((["--split=dev", "--seeds=4"],
                          "--seeds=4: expected seeds of the dev split, [0, 1, 2]"),
                         (["--seeds=4,x"], "--seeds=4,x: expected non-negative integers")):
    bad = subprocess.run([sys.executable, "-m", "experiments.sweeps.methods_v2", "--dry_run",
                          *flags], capture_output=True, text=True)
    assert bad.returncode != 0 and message in bad.stderr
  bad = subprocess.run([sys.executable, "-m", "experiments.sweeps.methods_v2", "--dry_run",
                        "--variants=vade_pool,nope"], capture_output=True, text=True)
  assert bad.returncode != 0 and "--variants names ['nope']; expected names from" in bad.stderr
  assert "Traceback" not in bad.stderr


def test_ground_v2_pilot_changes_one_setting_of_an_oracle():
  """Each pilot variant is its ground_v2 variant (an oracle or GRPO G=4; Knapsack with the min_n
  of 2 it started from) at a pinned learning rate (the first ground's 1e-4, or 4e-5) with one
  setting changed (p16: the budget's shape), at G=4's rows."""
  runs = ground_v2_pilot.get_sweep()
  assert {r["seed"] for r in runs} == {0, 1}
  bases = dict(ground_v2.VARIANTS, oracle_knapsack=ground_v2_pilot._KNAPSACK_MIN2,
               grpo_p16=ground_v2.VARIANTS["grpo_g4"])
  assert bases["oracle_knapsack"]["rl.allocation.min_n"] == 2
  assert ground_v2.VARIANTS["oracle_knapsack"]["rl.allocation.min_n"] == 1  # the pilot's choice
  shape = {"rl.prompts_per_step", "rl.group_size", "rl.max_group_size"}
  for run in runs:
    variant = run["name"].rsplit("_seed", 1)[0]
    base = bases[next(b for b in ("oracle_prm", "oracle_knapsack", "grpo_g4", "grpo_p16")
                      if variant.startswith(b))]
    lr = run["rl.optim.lr"]
    assert lr in (ground_v2_pilot.FIRST_LR, 4e-5), variant
    changed = {k for k in set(run) | set(base) if k not in ("name", "seed", "rl.optim.lr")
               and run.get(k) != base.get(k)}
    if variant == "oracle_knapsack_p16_min1_lr4e5":
      assert changed == shape | {"rl.allocation.min_n"}
    elif variant == "oracle_knapsack_min1_mc64_lr4e5":  # min_n = 1 (ground_v2's) + the oracle's
      assert changed == {"rl.allocation.min_n", "value.oracle.mc_samples"}
    elif variant.startswith("oracle_knapsack_p16"):  # One setting: the budget's shape.
      assert changed == shape
    elif variant.startswith("grpo_p16"):  # p16's control: the same shape, uniform groups.
      assert changed == {"rl.prompts_per_step", "rl.group_size"}
    else:
      assert len(changed) == (0 if variant.endswith("_lr4e5") and variant.count("_") == 2
                              else 1), (variant, changed)
    config = ladder2_config.get_config()
    config.unlock()
    config.update_from_flattened_dict({k: v for k, v in run.items() if k != "name"})
    config_check.check(config)
    assert config.rl.prompts_per_step * config.rl.group_size == 128
  by = {r["name"]: r for r in runs}
  assert by["oracle_prm_a4_seed1"]["rl.process.alpha"] == 4.0
  assert by["oracle_knapsack_nofb_seed0"]["rl.allocation.knapsack.fallback"] is False
  assert by["grpo_g4_lr4e5_seed1"]["rl.optim.lr"] == 4e-5
  assert by["oracle_prm_s150_seed0"]["rl.steps"] == 150 and "oracle_prm_s150_seed1" not in by


def test_ground_v2_gates_on_fixed_report_json(tmp_path):
  """The gates read report --json: paired gains against grpo_g4 and its seed std."""
  def variant(name, by_seed, delta=None):
    return dict(name=name, seeds=len(by_seed), test_accuracy_by_seed=by_seed,
                paired_delta={} if delta is None else {"grpo_g4": delta})
  data = dict(variants=[
      variant("grpo_g4", {"0": 0.40, "1": 0.42, "2": 0.44}),
      variant("grpo_g16", {"0": 0.45, "1": 0.47, "2": 0.49}, [0.05, 0.004]),
      variant("oracle_prm", {"0": 0.43, "1": 0.45, "2": 0.47}, [0.03, 0.01]),
  ])
  rows = {r["variant"]: r for r in ground_v2.gates(data, min_seeds=3)}
  assert rows["grpo_g16"]["met"] is True  # 0.05 >= 0.04 and 0.05 - 0.004 > 0
  assert rows["oracle_prm"]["met"] is False  # 0.03 < 0.05
  assert rows["oracle_knapsack"]["met"] is None and rows["oracle_knapsack"]["seeds"] == 0
  assert rows["grpo_g4"]["value"] == pytest.approx(0.02)  # std of 0.40, 0.42, 0.44 (ddof 1)
  assert all(r["met"] is None for r in ground_v2.gates(data))  # 3 of the sweep's 5 seeds
  data["variants"][1]["paired_delta"]["grpo_g4"] = [0.05, 0.06]  # interval reaches 0
  assert ground_v2.gates(data, min_seeds=3)[0]["met"] is False
  out = tmp_path / "r"
  (tmp_path / "r.json").write_text(json.dumps(data))
  (tmp_path / "r.md").write_text("# table\n")
  ground_v2.add_gates(str(out), min_seeds=3)
  md = (tmp_path / "r.md").read_text()
  assert "| G=16 beats G=4 at equal RL steps: paired gain >= 0.04, its 95% interval above 0 | " \
         "grpo_g16 | 3 | +0.050 ± 0.060 | no |" in md
  assert "| oracle_knapsack | 0 | n/a | not run |" in md
  assert len(json.loads((tmp_path / "r.json").read_text())["gates"]) == 4


def test_value_priors_sweep_applies_to_the_ladder_config():
  runs = value_priors.get_sweep()
  assert len(runs) == len(value_priors.VARIANTS) * 3
  for run in runs:
    config = ladder_config.get_config()
    config.update_from_flattened_dict({k: v for k, v in run.items() if k != "name"})
    checks.check_config(config)
    assert config.rl.advantage == "v05" and config.rl.group_size == 4


def test_methods_v2_report_names_families_and_flattens_the_recovered_share(tmp_path):
  done = set(methods_v2.variants("R")) | set(methods_v2.GROUND)
  cmd = methods_v2.report_command("R", "out/methods_v2_report", "dev", done)
  # A partial sweep: pairs naming a variant without finished runs are left out.
  partial = methods_v2.report_command("R", "out/r", "test", done - {"oracle_knapsack_pool"})
  partial = next(a for a in partial if a.startswith("--oracle="))
  assert "knapsack_buf16" not in partial and "pav_bok4_a1:oracle_prm" in partial
  assert "--workdirs=R/methods_v2/[!_]*" in cmd and "--workdirs=R/ground_v2/oracle_prm_seed*" in cmd
  assert "--split=dev" in cmd and "--baseline=grpo_g4" in cmd
  # A machine without G = 4's runs pairs its report against another variant (then merged).
  assert "--baseline=grpo_g4_b24" in methods_v2.report_command("R", "o", done=done,
                                                               baseline="grpo_g4_b24")
  oracle = next(a for a in cmd if a.startswith("--oracle="))
  assert "pav_bok4_a1:oracle_prm" in oracle and "echo_measured:oracle_treepo" in oracle
  # The allocators' share is measured from GRPO on their own prompt pool.
  assert "knapsack_buf16:oracle_knapsack_pool:grpo_g4_pool" in oracle.split("=", 1)[1].split(",")
  path = tmp_path / "r.json"
  rec = dict(oracle="oracle_prm", baseline="grpo_g4", share=0.4, ci95=0.2, seeds=5, resolved=True)
  path.write_text(json.dumps({"variants": [
      {"name": "grpo_g4"}, {"name": "grpo_g8"}, {"name": "oracle_prm"},
      {"name": "pav_bok4_a1", "recovered_share": rec}, {"name": "grpo_g4_pool"},
      {"name": "vade_pool"}]}))
  methods_v2.add_families(str(path))
  by = {v["name"]: v for v in json.loads(path.read_text())["variants"]}
  assert [by[n]["family"] for n in ("grpo_g4", "grpo_g8", "oracle_prm", "pav_bok4_a1",
                                    "grpo_g4_pool", "vade_pool")] == [
      "baseline", "budget", "oracle", "process reward", "baseline", "data selection"]
  assert (by["pav_bok4_a1"]["recovered_share"], by["pav_bok4_a1"]["recovered_share_ci95"],
          by["pav_bok4_a1"]["oracle"], by["pav_bok4_a1"]["recovered"]) == (0.4, 0.2, "oracle_prm",
                                                                            rec)
  assert by["grpo_g8"]["recovered_share"] is None and by["grpo_g8"]["recovered"] is None


def test_methods_v2_rows_by_prior_rate_reads_the_16_rollout_buffer(tmp_path):
  """Visits binned by the prompt's rate over its last 16 rollouts before the step (none under 8):
  prompt 1 gets 8 rows (no history), 16 (after 0 of 8: p = 0), 4 (its newest 16 rows, 4 right:
  0 < p < 1); prompt 2 gets 4 and 2 rows (4 seen: no estimate). 34 rows in all."""
  h = RolloutHistory()
  h.record(0, [1, 2], [8, 4], [0, 4])
  h.record(1, [1], [16], [4])
  h.record(2, [1, 2], [4, 2], [1, 1])
  by = mechanism.rows_by_prior_rate(h)
  assert by["no estimate"] == dict(visits=3, rows_per_visit=pytest.approx(14 / 3),
                                   row_share=pytest.approx(14 / 34))
  assert by["p = 0"] == dict(visits=1, rows_per_visit=16.0, row_share=pytest.approx(16 / 34))
  assert by["0 < p < 1"] == dict(visits=1, rows_per_visit=4.0, row_share=pytest.approx(4 / 34))
  assert by["p = 1"] == dict(visits=0, rows_per_visit=None, row_share=0.0)
  assert by["visits_per_prompt"] == 2.5
  # add_mechanism: the seed means go into the report's JSON and a row of its table.
  for seed, frac in ((0, 0.5), (1, 0.7)):
    d = tmp_path / "methods_v2" / f"knapsack_buf16_seed{seed}"
    d.mkdir(parents=True)
    (d / "summary.json").write_text("{}")
    (d / "metrics.jsonl").write_text(json.dumps(
        {"phase": "rl", "step": 1, "informative_frac": frac, "alloc/n_max": 16.0}) + "\n")
    h.to_jsonl(str(d / "history.jsonl"))
  out = tmp_path / "report"
  out.with_suffix(".json").write_text(json.dumps({"variants": [{"name": "knapsack_buf16"},
                                                                {"name": "grpo_g4"}]}))
  out.with_suffix(".md").write_text("table\n")
  methods_v2.add_mechanism(str(out), str(tmp_path))
  v = json.loads(out.with_suffix(".json").read_text())["variants"]
  assert v[0]["mechanism"]["informative_frac"] == pytest.approx(0.6) and "mechanism" not in v[1]
  assert v[0]["mechanism"]["rows_by_prior_rate"]["p = 0"]["rows_per_visit"] == 16.0
  row = next(l for l in out.with_suffix(".md").read_text().splitlines()
             if l.startswith("| knapsack_buf16 |"))
  assert row.startswith("| knapsack_buf16 | 0.60 | 16.0 | 4.7 (0.41) | 16.0 (0.47) | 4.0 (0.12) |"
                        " - (0.00) | 2.5 | - | - |")
  names = methods_v2.mechanism_variants()
  assert {"knapsack_buf16", "grpo_g4_pool", "v05_v0_eq", "recipe_knapsack_pav"} <= set(names)
  assert {"echo_measured", "arrol_g4", "latr_g4", "latr_g8", "latr_p64", "grpo_p64",
          "recipe_latr_pav", "eptree_g4", "treepo_fixed", "april_g4", "grpo_g4", "grpo_g8",
          "oracle_treepo"} <= set(names)
  assert "pav_bok4_a1" not in names


def test_methods_v2_engine_table_reads_each_engines_own_metrics(tmp_path):
  """The engines' table: seed means over RL steps of the metrics each engine logs; '-' where an
  engine has none (LATR prunes no rows by a head, ARRoL makes no forks)."""
  runs = {"arrol_g4": [{"rollout_tokens": 700.0, "batch_tokens": 500.0, "informative_frac": 0.4,
                        "arrol/rows_pruned": 64.0, "arrol/head_acc": 0.7, "arrol/head_loss": 0.5,
                        "reward_mean": 0.25}],
          "latr_g4": [{"rollout_tokens": 400.0, "batch_tokens": 500.0, "informative_frac": 0.5,
                       "tree_forks": 30.0, "tree_pruned": 2.0, "tree_filled": 10.0},
                      {"rollout_tokens": 600.0, "batch_tokens": 500.0, "informative_frac": 0.6,
                       "tree_forks": 50.0, "tree_pruned": 4.0, "tree_filled": 20.0}]}
  runs["grpo_g4"] = [{"rollout_tokens": 500.0, "batch_tokens": 500.0, "informative_frac": 0.5}]
  for name, steps in runs.items():
    for seed in (0, 1):
      d = tmp_path / ("ground_v2" if name == "grpo_g4" else "methods_v2") / f"{name}_seed{seed}"
      d.mkdir(parents=True)
      (d / "summary.json").write_text("{}")
      (d / "metrics.jsonl").write_text("".join(
          json.dumps(dict(m, phase="rl", step=i + 1)) + "\n" for i, m in enumerate(steps)))
      RolloutHistory().to_jsonl(str(d / "history.jsonl"))  # every run keeps one
  out = tmp_path / "report"
  out.with_suffix(".json").write_text(json.dumps({"variants": [{"name": n} for n in runs]}))
  out.with_suffix(".md").write_text("table\n")
  methods_v2.add_mechanism(str(out), str(tmp_path), methods_v2.mechanism_variants())
  lines = out.with_suffix(".md").read_text().splitlines()
  assert "| arrol_g4 | 700 | 500 | 0.40 | - | - | 64.0 | 0.70 (0.500; 0.75) | - | - |" in lines
  assert "| latr_g4 | 500 | 500 | 0.55 | 40.0 | 3.0 | - | - | - | - |" in lines
  assert "| grpo_g4 | 500 | 500 | 0.50 | - | - | - | - | - | - |" in lines  # ground_v2's run
  v = json.loads(out.with_suffix(".json").read_text())["variants"]
  assert v[1]["mechanism"]["tree_forks"] == 40.0 and v[1]["mechanism"]["tree_filled"] == 15.0
  assert not any(l.startswith("| latr_g4 | -") for l in lines)  # not in the pool's table
  assert not any("rows/visit" in l for l in lines)  # ... which, with no rows, is left out
