"""Runs a sweep, one `python -m experiments.run` process per run, one after the other.

    python -m experiments.sweeps.launch --sweep=estimators \
        --base_config=experiments/configs/default.py --workdir_root=runs/sweeps [--dry_run]

`--sweep=NAME` is the module `experiments/sweeps/NAME.py`; its `get_sweep()` lists the runs as
dicts of config overrides (plus 'name'), which become `--config.KEY=VALUE` flags. Run NAME goes
to WORKDIR_ROOT/SWEEP/NAME. A run whose `summary.json` exists and whose recorded config is the
sweep's (`rl_jax.fingerprint`) is skipped, so re-running the command continues an interrupted
sweep (and a half-finished run resumes from its checkpoints). A finished run whose sweep entry
has changed runs again: `experiments.run` continues it when only `rl.steps` was raised (and the
run's learning rate is constant), and refuses any other change in one line, which stops the
launch.
`--jobs=N` runs N runs at once after the shared SFTs (on a 2-core CPU, 2 runs at once finish a
sweep sooner than one after another; each run's output then goes to its WORKDIR/launch.log).

With --share_sft (the default) one SFT-only run per SFT seed goes first, to
WORKDIR_ROOT/SWEEP/_sft/seedS (`rl.steps=0`, control off), and every run of that SFT seed starts
from its final checkpoint (`config.init_from`). The SFT seed is the base config's `sft.seed`
where it pins one (the ladder: 0, so every training seed shares one SFT), else the run's seed. A run that overrides SFT, model, task or
tokenizer fields trains its own SFT instead.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shlex
import subprocess
import sys
import time

from absl import app, flags
from ml_collections import config_flags

from rl_jax import fingerprint
from rl_jax.workdir import SUMMARY_FILE  # (rl_jax.workdir imports no jax)

# Overrides of these change the SFT policy, so such a run cannot share the seed's SFT.
_SFT_PREFIXES = ("sft.", "model.", "task.", "tokenizer.", "sampling.max_new_tokens", "init_from")


def format_value(value) -> str:
  """A config value as `--config.k=` text that ml_collections parses back to the same value."""
  if isinstance(value, str):
    return value
  return repr(value)


def command(base_config: str, workdir: str, overrides: dict) -> list[str]:
  """argv of one run: `python -m experiments.run --config=... --workdir=... --config.k=v ...`."""
  return [sys.executable, "-m", "experiments.run", f"--config={base_config}",
          f"--workdir={workdir}"] + [f"--config.{k}={format_value(v)}"
                                     for k, v in overrides.items() if k != "name"]


def _shares_sft(overrides: dict) -> bool:
  return not any(k.startswith(_SFT_PREFIXES) for k in overrides)


def config_file(spec: str, flag: str = "--config"):
  """The ConfigDict a config file spec `path[:variant]` makes (what `--config=` loads); `flag`
  names the spec in the error for a missing file."""
  path, _, arg = spec.partition(":")
  loader = importlib.util.spec_from_file_location("_sweep_base_config", path)
  if loader is None:
    raise FileNotFoundError(f"{flag}={spec!r}: no config file {path!r}")
  module = importlib.util.module_from_spec(loader)
  loader.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


def base_sft_seed(base_config: str) -> int:
  """`sft.seed` of the base config file (`path[:variant]`); -1 where it has none."""
  return int(config_file(base_config, "--base_config").sft.get("seed", -1))


def plan(runs: list[dict], base_config: str, root: str, share_sft: bool,
         sft_seed: int = -1) -> list[tuple[str, list]]:
  """(workdir, argv) of every process in order: the shared SFT runs first, then the sweep.

  `sft_seed` >= 0 (the base config's pinned `sft.seed`): one SFT for every seed; -1: one per seed.
  """
  names = [r["name"] for r in runs]
  if len(set(names)) != len(names):
    raise ValueError(f"run names must be unique, got {names}")

  def sft_of(seed: int) -> int:
    return sft_seed if sft_seed >= 0 else seed

  out, sft_dirs = [], {}
  if share_sft:
    for seed in dict.fromkeys(sft_of(r.get("seed", 0)) for r in runs if _shares_sft(r)):
      sft_dirs[seed] = os.path.join(root, "_sft", f"seed{seed}")
      out.append((sft_dirs[seed], command(base_config, sft_dirs[seed], {
          "seed": seed, "rl.steps": 0, "control.enabled": False})))
  for run in runs:
    overrides = dict(run)
    seed = sft_of(overrides.get("seed", 0))
    if seed in sft_dirs and _shares_sft(overrides):
      overrides["init_from"] = sft_dirs[seed]
    workdir = os.path.join(root, run["name"])
    out.append((workdir, command(base_config, workdir, overrides)))
  return out


def _start(args: list, workdir: str, log: bool) -> subprocess.Popen:
  if not log:
    return subprocess.Popen(args)
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "launch.log"), "ab") as f:
    return subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT)


def run_config(args: list[str]):
  """The config `experiments.run` builds from `args`' `--config=` / `--config.K=V` flags."""
  argv = ["launch"] + [a for a in args if a.startswith("--config")]
  values = flags.FlagValues()
  # The override flags (--config.K) are defined from `sys_argv`, as from sys.argv in a run.
  config_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=True,
                                  sys_argv=argv)
  values(argv)
  return values.config


def changed(workdir: str, args: list[str]) -> str:
  """'' when `workdir`'s recorded config (`rl_jax.fingerprint`) is the one `args` make (or none
  is recorded), else the fields that differ (`fingerprint.describe`)."""
  stored = fingerprint.stored_fields(workdir)
  if stored is None:
    return ""
  return fingerprint.describe(fingerprint.diff(stored, fingerprint.results_fields(
      run_config(args))))


def execute(steps: list[tuple[str, list]], jobs: int = 1, dry_run: bool = False) -> None:
  """Runs `plan`'s steps in order, `jobs` at a time; a shared SFT (`--config.rl.steps=0`) runs
  alone, after the runs in flight, since the runs after it start from it. A step whose
  summary.json exists is skipped when its recorded config is the step's (`changed`), and run
  again otherwise (a continuation to more RL steps, or a one-line refusal); a failed run stops
  the launch (after the runs in flight end) with its command and status."""
  pending = []
  for i, (workdir, args) in enumerate(steps, 1):
    if os.path.exists(os.path.join(workdir, SUMMARY_FILE)):
      diff = changed(workdir, args)
      if not diff:
        print(f"[{i}/{len(steps)}] done, skipped: {workdir}", flush=True)
        continue
      print(f"[{i}/{len(steps)}] finished with other settings ({diff}): run again",
            flush=True)
    line = f"[{i}/{len(steps)}] {shlex.join(args)}"  # Printed when the run starts.
    if dry_run:
      print(line, flush=True)
      continue
    if "--config.rl.steps=0" in args or jobs == 1:  # a shared SFT: the runs after it need it
      _wait(pending, 0)
      print(line, flush=True)
      _wait([(workdir, args, _start(args, workdir, False))], 0)
    else:
      _wait(pending, jobs - 1)
      print(line, flush=True)
      pending.append((workdir, args, _start(args, workdir, True)))
  _wait(pending, 0)


def _wait(pending: list, keep: int) -> None:
  """Waits until at most `keep` of the `pending` (workdir, args, process) are running (removing
  the ended ones); a run that failed raises once the others in flight have ended."""
  failed = []
  while pending and (len(pending) > keep or failed):
    for item in [p for p in pending if p[2].poll() is not None]:
      pending.remove(item)
      if item[2].returncode != 0:
        failed.append(item)
    if pending and (len(pending) > keep or failed):
      time.sleep(1.0)
  if failed:
    workdir, args, proc = failed[0]
    raise RuntimeError(f"run {workdir} exited with status {proc.returncode} (see "
                       f"{workdir}/launch.log if it ran beside others): {shlex.join(args)}")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  sweep = importlib.import_module(f"experiments.sweeps.{_SWEEP.value}")
  root = os.path.join(_ROOT.value, _SWEEP.value)
  steps = plan(sweep.get_sweep(), _BASE.value, root, _SHARE_SFT.value,
               base_sft_seed(_BASE.value))
  execute(steps, _JOBS.value, _DRY_RUN.value)


if __name__ == "__main__":
  # Defined here, not on import: a sweep module with a command of its own (methods_v2) imports
  # this module's functions and defines its own flags.
  _SWEEP = flags.DEFINE_string("sweep", None, "Sweep module name in experiments/sweeps/.")
  _BASE = flags.DEFINE_string("base_config", "experiments/configs/default.py",
                              "Config file[:variant] every run starts from.")
  _ROOT = flags.DEFINE_string("workdir_root", "runs/sweeps", "Runs go to ROOT/SWEEP/NAME.")
  _DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the commands instead of running them.")
  _SHARE_SFT = flags.DEFINE_bool("share_sft", True, "Run SFT once per seed and start every run "
                                 "from it (config.init_from).")
  _JOBS = flags.DEFINE_integer("jobs", 1, "Runs at once after the shared SFTs (which run first, "
                               "one at a time). With more than one, each run's output goes to "
                               "WORKDIR/launch.log.", lower_bound=1)
  flags.mark_flag_as_required("sweep")
  app.run(main)
