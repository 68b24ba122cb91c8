"""Fault report: the `:smoke` default experiment under injected faults, vs an uninterrupted run.

    python -m benchmarks.faults                       # 8 runs x 3 signals, prints one JSON line
    python -m benchmarks.faults --runs=2 --signals_per_run=2 --workdir=/tmp/faults

Every run is `experiments/configs/default.py:smoke` (control included) in its own subprocess,
with two in-run faults that every run, the reference included, meets the same way:

* a reward component `faulty` (weight 0, so the advantages are the clean run's) that raises on
  some completions and hangs (sleeps an hour) on others, chosen by a hash of the completion text;
  the contained scorer must score them 0, count them (`reward/errors`, `reward/timeouts`) and go on;
* a NaN injected into RL step 3's rewards (`config.inject_nan_at='rl:3'`): the step must be skipped
  and counted (`nonfinite`).

On top of these, each faulty run gets `--signals_per_run` process faults, drawn (seeded) from:
`SIGKILL` at a random time (1 to --max_delay s after a start), `SIGKILL_write` as soon as a
checkpoint write has begun (an orbax temporary directory exists), and `SIGTERM` at a random
moment of training (0-3 s after the start's first metrics write; the run must write a checkpoint
of its current step and exit with status 143). After each fault the same command is re-run, and the
run is re-started until it exits 0.

The JSON line: faults injected (signals that hit a live process, plus the reward errors, reward
timeouts and skipped non-finite steps in the final records), runs that finished, records lost,
duplicated or differing (timings aside) in metrics.jsonl against the reference, and whether each
final summary equals the reference's (timings aside). Children share a persistent XLA compilation
cache (`--cache_dir`), so a restart costs the imports and the tokenizer, not the compiles.

The child entry point (`python -m benchmarks.faults --child=WORKDIR`) is what the tests run too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib

FAULT_KINDS = ("SIGKILL", "SIGKILL_write", "SIGTERM")
NAN_STEP = 3
REWARD_TIMEOUT = 1.0
# Keys that measure time, not the computation.
TIMING_RECORD_KEYS = ("time", "step_seconds")
TIMING_SUMMARY_KEYS = ("wall_seconds", "sft_train_seconds", "rl_train_seconds",
                       "sft_more_train_seconds")


def faulty_reward(task, completion, example):
  """A reward that raises on about 1 completion in 5 and hangs on about 1 in 17 (by a hash of the
  text, so every run meets the same faults); 0.0 otherwise."""
  del task, example
  h = zlib.crc32(completion.encode("utf-8", "replace"))
  if h % 5 == 0:
    raise RuntimeError(f"injected reward error (crc {h})")
  if h % 17 == 1:
    time.sleep(3600)
  return 0.0


def _register():
  from rl_jax import rewards  # pylint: disable=g-import-not-at-top
  if "faulty" not in rewards.REWARDS:
    rewards.REWARDS.register("faulty")(faulty_reward)


_register()


def child_config():
  """default.py:smoke with the faulty reward component (weight 0) and a NaN at RL step 3."""
  from experiments.configs import default  # pylint: disable=g-import-not-at-top
  c = default.get_config("smoke")
  c.rl.rewards = ("task_score", "faulty")
  c.rl.reward_weights = (1.0, 0.0)
  c.rl.reward_timeout = REWARD_TIMEOUT
  c.inject_nan_at = f"rl:{NAN_STEP}"
  return c


def _child(workdir: str) -> int:
  from rl_jax.train import loop, signals  # pylint: disable=g-import-not-at-top
  try:
    loop.run(child_config(), workdir)
  except signals.Preempted as e:
    print(f"stopped: {e}", file=sys.stderr)
    return 128 + e.signum
  return 0


def child_env(cache_dir: str | None) -> dict:
  """The environment of a child: this one, plus a shared persistent compilation cache."""
  env = dict(os.environ)
  if cache_dir:
    env.update(JAX_COMPILATION_CACHE_DIR=cache_dir,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  return env


def start_child(workdir: str, env: dict, log) -> subprocess.Popen:
  """Starts (or re-starts) the faulty smoke run in `workdir`, its output appended to `log`."""
  return subprocess.Popen([sys.executable, "-m", "benchmarks.faults", f"--child={workdir}"],
                          env=env, stdout=log, stderr=subprocess.STDOUT,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _writing_checkpoint(workdir: str) -> bool:
  root = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(root):
    return False
  for phase in os.scandir(root):
    if phase.is_dir() and any("orbax-checkpoint-tmp" in e.name for e in os.scandir(phase.path)):
      return True
  return False


def inject(proc: subprocess.Popen, kind: str, workdir: str, delay: float) -> bool:
  """Sends the fault `kind` to `proc`: 'SIGKILL' `delay` s after the start, 'SIGKILL_write' as
  soon as a checkpoint write has begun (giving up a minute after `delay`), 'SIGTERM' `delay` s
  after this start has written metrics (training has begun; the run's handlers are installed).
  Returns whether the process was alive to get it."""
  started = time.time()
  deadline = time.monotonic() + delay
  if kind == "SIGTERM":  # `delay` s after this start has written metrics (training has begun).
    limit = time.monotonic() + 120.0
    while proc.poll() is None and time.monotonic() < limit:
      if _training_started(workdir, started):
        break
      time.sleep(0.005)
    deadline = time.monotonic() + delay
    while proc.poll() is None and time.monotonic() < deadline:
      time.sleep(0.005)
  elif kind == "SIGKILL_write":
    deadline += 60.0
    while proc.poll() is None and not _writing_checkpoint(workdir):
      if time.monotonic() > deadline:
        break
      time.sleep(0.002)
  else:
    while proc.poll() is None and time.monotonic() < deadline:
      time.sleep(0.01)
  if proc.poll() is not None:
    return False
  proc.send_signal(signal.SIGTERM if kind == "SIGTERM" else signal.SIGKILL)
  return True


def _training_started(workdir: str, since: float) -> bool:
  """Whether this start has written metrics (so the run's signal handlers are installed)."""
  path = os.path.join(workdir, "metrics.jsonl")
  return os.path.exists(path) and os.path.getmtime(path) > since


def read_records(workdir: str) -> list[dict]:
  """The records of `workdir/metrics.jsonl` ([] if there is none)."""
  from rl_jax.metrics import read_metrics  # pylint: disable=g-import-not-at-top
  path = os.path.join(workdir, "metrics.jsonl")
  return read_metrics(workdir) if os.path.exists(path) else []


def compare_records(reference: list[dict], records: list[dict]) -> dict:
  """Records lost (in the reference, absent here), duplicated (a (phase, step) twice) and
  differing (present in both, different values; timings aside)."""
  key = lambda r: (r["phase"], r["step"])
  strip = lambda r: {k: v for k, v in r.items() if k not in TIMING_RECORD_KEYS}
  want = {key(r): strip(r) for r in reference}
  seen, dup = {}, 0
  for r in records:
    if key(r) in seen:
      dup += 1
    seen[key(r)] = strip(r)
  lost = sum(k not in seen for k in want)
  differing = sum(k in seen and seen[k] != v for k, v in want.items())
  extra = sum(k not in want for k in seen)
  return {"lost": lost, "duplicated": dup, "differing": differing, "unexpected": extra}


def read_summary(workdir: str) -> dict | None:
  """`workdir/summary.json` without its timing keys, or None if the run has not finished."""
  path = os.path.join(workdir, "summary.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    summary = json.load(f)
  return {k: v for k, v in summary.items() if k not in TIMING_SUMMARY_KEYS}


def run_with_faults(workdir: str, kinds: list[str], rng: random.Random, env: dict,
                    max_delay: float, max_starts: int = 20) -> dict:
  """Runs the child in `workdir`, injecting `kinds` in turn (one per start) and re-starting it
  until it exits 0; returns what happened."""
  events, starts, pending = [], 0, list(kinds)
  with open(os.path.join(os.path.dirname(workdir), os.path.basename(workdir) + ".log"),
            "a") as log:
    while starts < max_starts:
      starts += 1
      started = time.time()
      proc = start_child(workdir, env, log)
      if pending:
        kind = pending[0]
        delay = rng.uniform(0.0, 3.0) if kind == "SIGTERM" else rng.uniform(1.0, max_delay)
        if inject(proc, kind, workdir, delay):
          training = _training_started(workdir, started)
          pending.pop(0)
          rc = proc.wait()
          events.append({"fault": kind, "exit": rc, "in_training": training})
          continue
      rc = proc.wait()
      if rc == 0:
        break
      # Died by itself (a finding, not a fault).
      events.append({"fault": None, "exit": rc, "in_training": None})
  return {"starts": starts, "events": events, "finished": rc == 0}


def _in_run_faults(records: list[dict]) -> dict:
  return {"reward_errors": int(sum(r.get("reward/errors", 0) for r in records)),
          "reward_timeouts": int(sum(r.get("reward/timeouts", 0) for r in records)),
          "nonfinite_steps": int(sum(r.get("nonfinite", 0) for r in records))}


def report(workdir: str, runs: int, signals_per_run: int, seed: int, cache_dir: str | None,
           max_delay: float) -> dict:
  """Runs the reference and the faulty runs under `workdir`; returns the report's dict."""
  t0 = time.time()
  env = child_env(cache_dir)
  rng = random.Random(seed)
  ref_dir = os.path.join(workdir, "reference")
  ref = run_with_faults(ref_dir, [], rng, env, max_delay)
  if not ref["finished"]:
    raise RuntimeError(f"the uninterrupted reference run failed; see {ref_dir}.log")
  reference, ref_summary = read_records(ref_dir), read_summary(ref_dir)
  out_runs, totals = [], {"lost": 0, "duplicated": 0, "differing": 0, "unexpected": 0}
  signals_hit = {k: 0 for k in FAULT_KINDS}
  in_run = dict.fromkeys(("reward_errors", "reward_timeouts", "nonfinite_steps"), 0)
  for i in range(runs):
    kinds = [rng.choice(FAULT_KINDS) for _ in range(signals_per_run)]
    run_dir = os.path.join(workdir, f"run{i}")
    result = run_with_faults(run_dir, kinds, rng, env, max_delay)
    records = read_records(run_dir)
    cmp = compare_records(reference, records)
    for k in totals:
      totals[k] += cmp[k]
    for e in result["events"]:
      if e["fault"]:
        signals_hit[e["fault"]] += 1
    for k, v in _in_run_faults(records).items():
      in_run[k] += v
    out_runs.append(dict(result, records=cmp, summary_equal=read_summary(run_dir) == ref_summary))
  # SIGTERMs come once training has begun, so each must be a clean stop (143).
  sigterms = [e for r in out_runs for e in r["events"] if e["fault"] == "SIGTERM"]
  return {
      "date": datetime.date.today().isoformat(),
      "faults_injected": sum(signals_hit.values()) + sum(in_run.values()),
      "signals": signals_hit, **in_run,
      "runs": runs, "runs_finished": sum(r["finished"] for r in out_runs),
      "records_lost": totals["lost"], "records_duplicated": totals["duplicated"],
      "records_differing": totals["differing"], "records_unexpected": totals["unexpected"],
      "summaries_equal": [r["summary_equal"] for r in out_runs],
      "all_summaries_equal": all(r["summary_equal"] for r in out_runs),
      "sigterm_exits": {str(c): sum(e["exit"] == c for e in sigterms)
                        for c in sorted({e["exit"] for e in sigterms})},
      "sigterm_all_exit_143": all(e["exit"] == 128 + signal.SIGTERM for e in sigterms),
      "starts": sum(r["starts"] for r in out_runs),
      "exits": [[e["exit"] for e in r["events"]] for r in out_runs],
      "reference_in_run_faults": _in_run_faults(reference),
      "seconds": round(time.time() - t0, 1),
  }


def main(argv=None) -> None:
  """Command line: the report (one JSON line), or with --child one run of the faulty config."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--child", help=argparse.SUPPRESS)
  parser.add_argument("--runs", type=int, default=8)
  parser.add_argument("--signals_per_run", type=int, default=3)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--max_delay", type=float, default=25.0,
                      help="random signals come 1 to this many seconds after a start")
  parser.add_argument("--workdir", default="", help="kept if given; a temporary dir otherwise")
  parser.add_argument("--cache_dir", default="",
                      help="persistent compilation cache (default: WORKDIR/xla_cache)")
  args = parser.parse_args(argv)
  if args.child:
    sys.exit(_child(args.child))
  if args.runs < 1 or args.signals_per_run < 0:
    parser.error(f"--runs must be >= 1 and --signals_per_run >= 0, got {args.runs} and "
                 f"{args.signals_per_run}")
  workdir = args.workdir or tempfile.mkdtemp(prefix="faults_")
  os.makedirs(workdir, exist_ok=True)
  try:
    out = report(workdir, args.runs, args.signals_per_run, args.seed,
                 args.cache_dir or os.path.join(workdir, "xla_cache"), args.max_delay)
  finally:
    if not args.workdir:
      shutil.rmtree(workdir, ignore_errors=True)
  print(json.dumps(out))


if __name__ == "__main__":
  main()
