"""The pre-registered replication (issue 59): the registration file, its checks, and the sweep's
processes (no runs: the plan only)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from experiments import prereg
from experiments.configs import ladder2 as ladder2_config
from experiments.sweeps import ground_v2, launch, methods_v2, replication
from rl_jax.train import config_check

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE = os.path.join(REPO, "experiments", "preregistrations", "replication_v2.json")


def test_registration_holds_the_findings_rows_with_the_sweeps_settings_unchanged(tmp_path):
  """No retuning: each row is ground_v2's or methods_v2's preset as committed (PAV's PRM path
  aside), and the PRM is trained with methods_v2's flags; at least 3 fresh SFT draws (none is
  ladder2's sft.seed 0) x at least 3 RL seeds."""
  reg = prereg.load(FILE)
  presets = methods_v2.variants(str(tmp_path))
  assert reg["rows"]["grpo_g4"] == ground_v2.VARIANTS["grpo_g4"]
  assert reg["rows"]["grpo_g8"] == ground_v2.VARIANTS["grpo_g8"]
  assert reg["rows"]["oracle_prm"] == ground_v2.VARIANTS["oracle_prm"]
  pav = dict(presets["pav_bok4_a1"], **{"rl.process.prm_dir": "{prm_dir}"})
  assert reg["rows"]["pav_bok4_a1"] == pav
  assert reg["rows"]["latr_p64"] == presets["latr_p64"]
  assert reg["rows"]["grpo_p64"] == presets["grpo_p64"]
  assert reg["prm"] == methods_v2.PRMS["pav"]
  assert reg["base_config"] == methods_v2.BASE_CONFIG
  assert ladder2_config.get_config().sft.seed not in reg["sft_draws"]
  assert len(reg["sft_draws"]) >= reg["min_sft_draws"] >= 3 and len(reg["rl_seeds"]) >= 3
  assert {c["id"] for c in reg["comparisons"]} == {"F1", "F2", "F3a", "F3b", "F3c"}


def test_the_plan_runs_each_draws_sft_then_every_row_and_seed_from_it(tmp_path):
  reg = prereg.load(FILE)
  root = str(tmp_path)
  blk = replication.block(reg, root, 101)
  sft_dir, sft_args = blk["sft"]
  assert sft_dir.endswith(os.path.join("replication_v2", "_sft", "sft101"))
  assert {"--config.sft.seed=101", "--config.rl.steps=0"} <= set(sft_args)
  assert f"--workdir={sft_dir}" in blk["prm"] and "--prover_k=4" in blk["prm"]
  assert f"--prm={blk['prm_dir']}" in blk["judge"]
  runs = blk["runs"] + blk["prm_runs"]
  assert len(runs) == len(reg["rows"]) * len(reg["rl_seeds"])
  assert [w for w, _ in blk["prm_runs"]] == [
      replication.run_dir(root, "replication_v2", 101, "pav_bok4_a1", s) for s in reg["rl_seeds"]]
  for workdir, args in runs:
    assert {f"--config.init_from={sft_dir}", "--config.sft.seed=101"} <= set(args)
    config = launch.run_config(args)  # the flags parse into ladder2's config ...
    config_check.check(config)  # ... and pass its checks
    assert config.sft.seed == 101 and config.init_from == sft_dir
    if "pav_bok4_a1" in workdir:
      assert config.rl.process.prm_dir == blk["prm_dir"]


def test_the_dry_run_prints_the_first_draw_and_the_report_that_reads_the_registration(tmp_path):
  out = subprocess.run(
      [sys.executable, "-m", "experiments.sweeps.replication", f"--prereg={FILE}",
       f"--workdir_root={tmp_path}", "--draws=1", "--dry_run"],
      cwd=REPO, capture_output=True, text=True, check=True).stdout.splitlines()
  assert "--config.sft.seed=101" in out[0] and "sft102" not in "\n".join(out)
  assert "experiments.train_prm" in out[1] and "experiments.eval_prm" in out[2]
  report = shlex.split(out[-1])
  assert f"--prereg={FILE}" in report and "--split=test" in report
  assert not os.path.exists(os.path.join(tmp_path, "replication_v2", "launches.jsonl"))


def test_status_counts_what_is_done_without_reading_results(tmp_path):
  """--status as a user runs it: draw 101 complete, 102 half-way, 103 and 104 not begun."""
  reg = prereg.load(FILE)
  root = str(tmp_path)
  for sft, rows_done in ((101, None), (102, 4)):
    blk = replication.block(reg, root, sft)
    for workdir in [blk["sft"][0]] + [w for w, _ in blk["runs"] + blk["prm_runs"]][:rows_done]:
      os.makedirs(workdir)
      with open(os.path.join(workdir, "summary.json"), "w") as f:
        f.write("{}")  # its content is never read
  os.makedirs(replication.run_dir(root, "replication_v2", 102, "latr_p64", 2))  # under way
  os.makedirs(replication.prm_out(root, "replication_v2", 102))  # the PRM's training began
  prm = replication.block(reg, root, 101)["prm_dir"]
  os.makedirs(os.path.join(os.path.dirname(prm), "judge"))
  with open(os.path.join(os.path.dirname(prm), "judge", "prm-sft.json"), "w") as f:
    f.write("{}")
  out = subprocess.run(
      [sys.executable, "-m", "experiments.sweeps.replication", f"--prereg={FILE}",
       f"--workdir_root={tmp_path}", "--status"],
      cwd=REPO, capture_output=True, text=True, check=True).stdout.splitlines()
  assert out == [
      "sft101: SFT done, PRM judged, runs 18/18 finished (complete)",
      "sft102: SFT done, PRM under way, runs 4/18 finished, 1 under way",
      "sft103: SFT not started, PRM not trained, runs 0/18 finished",
      "sft104: SFT not started, PRM not trained, runs 0/18 finished"]
  assert not os.path.exists(os.path.join(tmp_path, "replication_v2", "launches.jsonl"))


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("stopping_rule"), r"missing field\(s\) \['stopping_rule'\]"),
    (lambda d: d["comparisons"][0].update(method="pav_g8"),
     r"comparisons\[0\]\.method='pav_g8' is not a row"),
    (lambda d: d["comparisons"][1].update(id="F1"), r"id 'F1' is used twice"),
    (lambda d: d.update(sft_draws=[101, 101]), r"'sft_draws'=\[101, 101\]: expected a list"),
    (lambda d: d.update(min_sft_draws=9), r"min_sft_draws=9: expected 1 to 4"),
    (lambda d: d["comparisons"][0].update(direction="up"), r"direction='up': expected one of"),
])
def test_a_malformed_registration_is_one_line_naming_the_field(tmp_path, edit, message):
  with open(FILE) as f:
    data = json.load(f)
  edit(data)
  path = tmp_path / "bad.json"
  path.write_text(json.dumps(data))
  with pytest.raises(ValueError, match=message) as info:
    prereg.load(str(path))
  assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_registration_names_the_commits_that_added_and_last_changed_the_file(tmp_path):
  """On a scratch repository: the first and the last commit of the file, in that order."""
  git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True,
                                   text=True).stdout.strip()
  git("init", "-q")
  git("config", "user.email", "t@example.com")
  git("config", "user.name", "t")
  path = tmp_path / "study.json"
  path.write_text("{}")
  git("add", "study.json")
  git("commit", "-qm", "register")
  first = git("rev-parse", "HEAD")
  path.write_text('{"a": 1}')
  git("commit", "-qam", "amend")
  last = git("rev-parse", "HEAD")
  reg = prereg.registration(str(path))
  assert reg["added"][0] == first and reg["changed"][0] == last
  assert prereg.is_ancestor(str(path), first, last) and not prereg.is_ancestor(str(path), last,
                                                                                first)
  assert prereg.registration(str(tmp_path / "nope.json")) == dict(added=None, changed=None)
