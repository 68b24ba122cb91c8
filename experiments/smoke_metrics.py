"""Runs the smoke set and compares its metrics: the "no behaviour change" check of a refactor.

    python -m experiments.smoke_metrics --out=DIR [--only=NAME,NAME]
    python -m experiments.smoke_metrics --compare=DIR_A,DIR_B [--only=NAME,NAME]

`--out`: each configuration of `RUNS` (or of `--only`) runs in turn as
`python -m experiments.run --config=... --workdir=DIR/NAME` in a subprocess; DIR/NAME must not
exist yet. One line per run (name, exit status, wall seconds) is printed and DIR/smoke_runs.json
records them. Exit status 1 when any run failed.

`--compare`: DIR_A/NAME/metrics.jsonl against DIR_B/NAME/metrics.jsonl for every run, line by
line, each line's JSON object without its timing keys (a key containing one of `TIMING`) and
re-serialized in its own key order, so equal means byte-identical apart from timing. One line per
run: `IDENTICAL`, or the first difference (line, key, both values; a missing file; a different
line count). Exit status 1 on any difference.

Together the runs reach every rollout engine, the refill decode loop, V0.5, APRIL with the
MinPRO loss, ragged groups under an allocator, dynamic sampling and the oracle process reward,
with rewards that vary within some groups (non-zero advantages and gradients).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """The command's flags, defined only when it runs (absl flags are global: another experiments
  module imported beside this one, e.g. `experiments.report`, also defines `--out`)."""
  flags.DEFINE_string("out", None, "Directory that receives one work dir per run.")
  flags.DEFINE_string("compare", None, "DIR_A,DIR_B: compare the runs' metrics.")
  flags.DEFINE_string("only", "", "Comma-separated run names (default: every run).")

_DEFAULT = "experiments/configs/default.py:smoke"
_LADDER2 = "experiments/configs/ladder2.py:smoke"

# After default.py:smoke's 6 SFT steps every reward is 0, so every advantage and gradient is 0
# and a change in the estimators or the loss would not show. The method runs on default.py
# train SFT for 300 steps: some groups then have rewards that vary.
_SFT = ("sft.steps=300",)

# name -> (config, overrides). Each must pass the config check and finish.
RUNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "default": (_DEFAULT, ()),
    "ladder2": (_LADDER2, ()),
    # LATR's default windows (20, 30, 50) exceed the smoke's 5 new tokens.
    "latr": (_DEFAULT, _SFT + ("rl.rollout=latr", "rl.latr.windows=(2,)",
                               "rl.latr.mix_schedule=((0,0.5),)", "rl.latr.tau_abs=0.0",
                               "rl.latr.tau_rel=1.0")),
    "eptree": (_DEFAULT, _SFT + ("rl.rollout=eptree",)),
    "treepo": (_DEFAULT, _SFT + ("rl.rollout=treepo", "rl.advantage=treepo")),
    "echo": (_DEFAULT, _SFT + ("rl.rollout=echo",)),
    "arrol": (_DEFAULT, _SFT + ("rl.rollout=arrol",)),
    "refill": (_DEFAULT, _SFT + ("sampling.engine=refill", "sampling.num_slots=8")),
    "v05": (_DEFAULT, _SFT + ("rl.advantage=v05", "rl.max_group_size=16", "rl.rows=32")),
    "april_minpro": (_DEFAULT, _SFT + ("rl.partial.enabled=True", "rl.tis_cap=2.0",
                                       "rl.loss=minpro_reconstructed")),
    # A pool of 4 prompts repeats them, so the allocator has a history from step 2 on.
    "knapsack": (_DEFAULT, _SFT + ("rl.allocator=knapsack", "rl.max_group_size=8",
                                   "rl.prompt_pool=4", "rl.allocation.knapsack.min_obs=4")),
    "dynamic": (_DEFAULT, _SFT + ("rl.dynamic_sampling=True",)),
    "ladder2_oracle_prm": (_LADDER2, ("rl.process_reward=oracle", "rl.process.alpha=1.0")),
}

TIMING = ("seconds", "time", "per_sec", "wall")
METRICS = "metrics.jsonl"


def command(name: str, workdir: str) -> list[str]:
  """The argv that runs `name` of `RUNS` into `workdir`."""
  config, overrides = RUNS[name]
  return [sys.executable, "-m", "experiments.run", f"--config={config}",
          f"--workdir={workdir}", *(f"--config.{o}" for o in overrides)]


def is_timing(key: str) -> bool:
  return any(t in key for t in TIMING)


def _canonical(line: str) -> tuple[dict, str]:
  """A metrics line's object without its timing keys, and that object serialized."""
  record = {k: v for k, v in json.loads(line).items() if not is_timing(k)}
  return record, json.dumps(record)


def compare_files(path_a: str, path_b: str) -> str | None:
  """None when the two metrics.jsonl files agree line by line apart from timing keys, else one
  line saying where they first differ (or which file is missing)."""
  missing = [p for p in (path_a, path_b) if not os.path.isfile(p)]
  if missing:
    return "missing " + ", ".join(missing)
  with open(path_a) as fa, open(path_b) as fb:
    lines_a, lines_b = fa.read().splitlines(), fb.read().splitlines()
  for i, (la, lb) in enumerate(zip(lines_a, lines_b), start=1):
    (ra, sa), (rb, sb) = _canonical(la), _canonical(lb)
    if sa == sb:
      continue
    for key in dict.fromkeys([*ra, *rb]):
      va, vb = ra.get(key, "<absent>"), rb.get(key, "<absent>")
      if json.dumps(va) != json.dumps(vb):
        return f"line {i} ({ra.get('phase')} step {ra.get('step')}): {key}: {va!r} != {vb!r}"
    return f"line {i}: same keys and values in another order"
  if len(lines_a) != len(lines_b):
    return f"{len(lines_a)} lines != {len(lines_b)} lines"
  return None


def compare_dirs(dir_a: str, dir_b: str, names) -> dict[str, str | None]:
  """compare_files of DIR/NAME/metrics.jsonl for each name."""
  return {n: compare_files(os.path.join(dir_a, n, METRICS), os.path.join(dir_b, n, METRICS))
          for n in names}


def _names() -> list[str]:
  names = [n for n in FLAGS.only.split(",") if n] or list(RUNS)
  unknown = [n for n in names if n not in RUNS]
  if unknown:
    raise app.UsageError(f"--only names unknown runs {unknown}; expected names in {list(RUNS)}")
  return names


def _run_all(out: str, names: list[str]) -> int:
  taken = [n for n in names if os.path.exists(os.path.join(out, n))]
  if taken:
    raise app.UsageError(f"{out} already holds {taken}; expected a fresh --out directory")
  os.makedirs(out, exist_ok=True)
  record, failed = {}, 0
  for name in names:
    argv = command(name, os.path.join(out, name))
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    failed += proc.returncode != 0
    record[name] = {"rc": proc.returncode, "seconds": round(seconds, 1), "argv": argv[1:]}
    tail = proc.stderr.strip().splitlines()[-1:] if proc.returncode else []
    print(f"{name:20s} rc={proc.returncode} {seconds:7.1f}s {' '.join(tail)}", flush=True)
  with open(os.path.join(out, "smoke_runs.json"), "w") as f:
    json.dump(record, f, indent=1)
  return int(bool(failed))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if bool(FLAGS.out) == bool(FLAGS.compare):
    raise app.UsageError("give exactly one of --out=DIR and --compare=DIR_A,DIR_B")
  names = _names()
  if FLAGS.out:
    sys.exit(_run_all(FLAGS.out, names))
  dirs = FLAGS.compare.split(",")
  if len(dirs) != 2:
    raise app.UsageError(f"--compare={FLAGS.compare}: expected two directories DIR_A,DIR_B")
  results = compare_dirs(*dirs, names)
  for name, diff in results.items():
    print(f"{name:20s} {diff or 'IDENTICAL'}")
  sys.exit(int(any(d is not None for d in results.values())))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
