"""A pre-registered replication on fresh SFT draws (issue 59): the rows, SFT draws and RL seeds
of a pre-registration file, run block by block, then its report.

    python -m experiments.sweeps.replication \
        --prereg=experiments/preregistrations/replication_v2.json \
        --workdir_root=runs/sweeps --jobs=2 [--dry_run] [--report_only] [--status]

Per SFT draw S, in the file's order (its stopping rule): the SFT run (`sft.seed=S`, no RL) in
ROOT/STUDY/_sft/sftS; PAV's PRM trained on it (the file's `prm` flags) in ROOT/STUDY/_prm/sftS
and judged on held-out problems (`experiments.eval_prm`, its mechanism check), beside the rows
that need no PRM; then the rows that read it. Every run starts from its draw's SFT
(`init_from`) with `sft.seed=S` and its RL seed, in ROOT/STUDY/sftS/ROW_seedR. Re-running the
command continues an interrupted study (finished runs are skipped, half-finished ones resume).
Each launch appends the code's commit, whether the tree was clean, the start time (UTC) and
the runs it had still to do to ROOT/STUDY/launches.jsonl, which the report reads to show that
the pre-registration's commit precedes every run (no result depends on these times).

`--status` prints, per SFT draw, what is done (the SFT, the PRM and its judgement, how many runs
finished and how many are under way) and reads no result, so a study can be watched without its
outcome being seen before the stopping rule is applied.

The report is `experiments.report --prereg=FILE` over ROOT/STUDY/sft*/: the registered
comparisons with the SFT draw as a random effect (docs/research/index.md names the study).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

from absl import app, flags

from experiments import prereg as prereg_lib
from experiments.sweeps import launch

PRM_KIND_DIR = "pav"  # train_prm saves the `kinds=pav` PRM under OUT/pav


def sft_dir(root: str, study: str, sft: int) -> str:
  return os.path.join(root, study, "_sft", f"sft{sft}")


def prm_out(root: str, study: str, sft: int) -> str:
  return os.path.join(root, study, "_prm", f"sft{sft}")


def run_dir(root: str, study: str, sft: int, row: str, seed: int) -> str:
  return os.path.join(root, study, f"sft{sft}", f"{row}_seed{seed}")


def _needs_prm(overrides: dict) -> bool:
  return any(v == "{prm_dir}" for v in overrides.values())


def block(reg: dict, root: str, sft: int) -> dict:
  """One SFT draw's processes as argv lists: 'sft' (workdir, argv), 'prm' and 'judge' argv (None
  where no row reads a PRM), 'prm_dir' and 'judge_dir' (where the PRM and its judgement go), and
  'runs' / 'prm_runs': (workdir, argv) of the rows that do not / do read the PRM, seed by seed."""
  study, base = reg["study"], reg["base_config"]
  sdir = sft_dir(root, study, sft)
  prm_dir = os.path.join(prm_out(root, study, sft), PRM_KIND_DIR)
  judge_dir = os.path.join(prm_out(root, study, sft), "judge")
  out = dict(sft=(sdir, launch.command(base, sdir, {"seed": 0, "sft.seed": sft, "rl.steps": 0,
                                                     "control.enabled": False})),
             prm=None, judge=None, prm_dir=prm_dir, judge_dir=judge_dir, runs=[], prm_runs=[])
  if any(_needs_prm(o) for o in reg["rows"].values()):
    flags_ = [f"--{k}={v}" for k, v in reg["prm"].items()]
    out["prm"] = [sys.executable, "-m", "experiments.train_prm", f"--workdir={sdir}",
                  f"--out={prm_out(root, study, sft)}"] + flags_
    out["judge"] = [sys.executable, "-m", "experiments.eval_prm", f"--workdir={sdir}",
                    f"--prm={prm_dir}", f"--out={judge_dir}"]
  for seed in reg["rl_seeds"]:
    for row, overrides in reg["rows"].items():
      values = {k: prm_dir if v == "{prm_dir}" else v for k, v in overrides.items()}
      values.update({"seed": seed, "sft.seed": sft, "init_from": sdir})
      wdir = run_dir(root, study, sft, row, seed)
      out["prm_runs" if _needs_prm(overrides) else "runs"].append(
          (wdir, launch.command(base, wdir, values)))
  return out


def _git(*args: str) -> str:
  out = subprocess.run(["git", *args], capture_output=True, text=True)
  return out.stdout.strip() if out.returncode == 0 else ""


def record_launch(root: str, study: str, todo: list[str]) -> dict:
  """Appends this launch's provenance to ROOT/STUDY/launches.jsonl and returns it."""
  entry = dict(commit=_git("rev-parse", "HEAD") or None,
               clean=not _git("status", "--porcelain", "--untracked-files=no"),
               started=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               runs=todo)
  os.makedirs(os.path.join(root, study), exist_ok=True)
  with open(os.path.join(root, study, "launches.jsonl"), "a") as f:
    f.write(json.dumps(entry) + "\n")
  return entry


def report_command(prereg: str, reg: dict, root: str, out: str) -> list[str]:
  """argv of `experiments.report` judging the registered comparisons (OUT.{md,png,json})."""
  return [sys.executable, "-m", "experiments.report",
          f"--workdirs={os.path.join(root, reg['study'], 'sft*', '*_seed*')}",
          f"--prereg={prereg}", f"--launches={os.path.join(root, reg['study'], 'launches.jsonl')}",
          f"--baseline={reg['comparisons'][0]['baseline']}", f"--split={reg['split']}",
          f"--out={out}.md", f"--png={out}.png", f"--json={out}.json"]


def _judged(judge_dir: str) -> bool:
  return os.path.isdir(judge_dir) and any(f.endswith(".json") for f in os.listdir(judge_dir))


def _trained(prm_dir: str) -> bool:
  return os.path.exists(os.path.join(prm_dir, "prm.json"))


def _finished(workdir: str) -> bool:
  return os.path.exists(os.path.join(workdir, "summary.json"))


def status(reg: dict, root: str) -> list[str]:
  """One line per SFT draw: its SFT, its PRM (trained, judged), runs finished and under way (a work
  dir without summary.json), and whether the block is complete. Reads no metric or result."""
  lines = []
  for sft in reg["sft_draws"]:
    blk = block(reg, root, sft)
    runs = [w for w, _ in blk["runs"] + blk["prm_runs"]]
    done = sum(map(_finished, runs))
    started = sum(os.path.isdir(w) and not _finished(w) for w in runs)
    sft_state = ("done" if _finished(blk["sft"][0]) else
                 "under way" if os.path.isdir(blk["sft"][0]) else "not started")
    parts = [f"sft{sft}: SFT {sft_state}"]
    if blk["prm"]:
      parts.append("PRM " + ("judged" if _judged(blk["judge_dir"]) else
                             "trained" if _trained(blk["prm_dir"]) else
                             "under way" if os.path.isdir(os.path.dirname(blk["prm_dir"])) else
                             "not trained"))
    parts.append(f"runs {done}/{len(runs)} finished" + (f", {started} under way" if started
                                                        else ""))
    lines.append(", ".join(parts) + (" (complete)" if done == len(runs) else ""))
  return lines


def run_block(blk: dict, jobs: int, dry_run: bool) -> None:
  """The SFT, then the PRM (trained and judged in the background) beside the rows that need no
  PRM, then the rows that read it."""
  launch.execute([blk["sft"]], 1, dry_run)
  background = None
  if blk["prm"]:
    prm_dir = blk["prm_dir"]
    todo = [cmd for cmd, done in ((blk["prm"], _trained(prm_dir)),
                                  (blk["judge"], _judged(blk["judge_dir"]))) if not done]
    if dry_run:
      for cmd in todo:
        print(" ".join(cmd), flush=True)
    elif todo:
      script = " && ".join(" ".join(f"'{a}'" for a in cmd) for cmd in todo)
      os.makedirs(os.path.dirname(prm_dir), exist_ok=True)
      log = open(os.path.join(os.path.dirname(prm_dir), "train.log"), "ab")
      background = subprocess.Popen(["bash", "-c", script], stdout=log, stderr=subprocess.STDOUT)
  launch.execute(blk["runs"], jobs, dry_run)
  if background is not None and background.wait() != 0:
    raise RuntimeError("training or judging the PRM failed: see "
                       f"{os.path.dirname(prm_dir)}/train.log")
  launch.execute(blk["prm_runs"], jobs, dry_run)


if __name__ == "__main__":
  _PREREG = flags.DEFINE_string("prereg", "experiments/preregistrations/replication_v2.json",
                                "The pre-registration file (committed before the runs).")
  _ROOT = flags.DEFINE_string("workdir_root", "runs/sweeps", "Runs go to ROOT/STUDY/...")
  _JOBS = flags.DEFINE_integer("jobs", 2, "Runs at once after each SFT.", lower_bound=1)
  _DRAWS = flags.DEFINE_integer("draws", None, "Run only the first N SFT draws of the file "
                                "(its stopping rule: compute time decides, not results).")
  _OUT = flags.DEFINE_string("out_dir", "experiments/sweeps", "Where STUDY_report.* go.")
  _DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the commands instead of running them.")
  _REPORT_ONLY = flags.DEFINE_bool("report_only", False, "Write the report from the finished "
                                   "runs; start none.")
  _STATUS = flags.DEFINE_bool("status", False, "Print each SFT draw's progress (reads no "
                              "result); start nothing.")

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
      reg = prereg_lib.load(_PREREG.value)
    except (OSError, ValueError) as e:
      raise app.UsageError(str(e)) from None
    root = _ROOT.value
    if _STATUS.value:
      print("\n".join(status(reg, root)))
      return
    draws = reg["sft_draws"][:_DRAWS.value] if _DRAWS.value else reg["sft_draws"]
    if not _REPORT_ONLY.value:
      blocks = [block(reg, root, s) for s in draws]
      if not _DRY_RUN.value:
        todo = [w for b in blocks for w, _ in [b["sft"], *b["runs"], *b["prm_runs"]]
                if not _finished(w)]
        record_launch(root, reg["study"], todo)
      for blk in blocks:
        run_block(blk, _JOBS.value, _DRY_RUN.value)
    report = report_command(_PREREG.value, reg, root,
                            os.path.join(_OUT.value, f"{reg['study']}_report"))
    if _DRY_RUN.value:
      print(" ".join(report))
      return
    subprocess.run(report, check=True)

  app.run(main)
