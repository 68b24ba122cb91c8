"""Peak host memory (RSS) of an experiment run: its shipped settings and a variant, side by side.

    python -m benchmarks.peak_rss --config=experiments/configs/smollm2_learns.py --steps=2 \
        --variant="--config.model.remat=none --config.rl.num_minibatches=1 \
                   --config.eval.batch_size=100"

Runs `python -m experiments.run` twice in a subprocess each, one after the other, into fresh work
dirs under `--workdir` (a temporary folder by default): the config as given, for `--steps` RL steps
without periodic evaluation (the final evaluations run), and the same with the `--variant` flags
added. Prints one JSON line: each run's peak resident set size (the kernel's `ru_maxrss` of that
child process, as `command time -v` reports it), its exit status, and the shipped run's peak as
a ratio of the variant's.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile


# Forks and waits for the command from a small process: Linux carries a parent's peak RSS into a
# forked child's `ru_maxrss` (it is kept across exec), so the measuring process must be small.
_WRAPPER = """
import json, os, sys
out, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
  os.execv(argv[0], argv)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as f:
  json.dump({"rc": os.waitstatus_to_exitcode(status), "maxrss_kib": usage.ru_maxrss}, f)
"""


def peak_rss(argv: list[str], log_path: str) -> dict:
  """Runs `argv` to the end; -> {"peak_rss_bytes", "rc"} of that process alone (Linux ru_maxrss,
  KiB * 1024), measured by a small intermediate process."""
  out = log_path + ".rusage.json"
  with open(log_path, "w") as log:
    subprocess.run([sys.executable, "-c", _WRAPPER, out, *argv], stdout=log,
                   stderr=subprocess.STDOUT, check=False)
  with open(out) as f:
    got = json.load(f)
  return {"peak_rss_bytes": int(got["maxrss_kib"]) * 1024, "rc": int(got["rc"])}


def run_argv(config: str, workdir: str, steps: int, extra: list[str]) -> list[str]:
  return [sys.executable, "-m", "experiments.run", f"--config={config}", f"--workdir={workdir}",
          f"--config.rl.steps={steps}", "--config.rl.eval_every=0", *extra]


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", required=True, help="experiment config file[:variant]")
  parser.add_argument("--steps", type=int, default=2, help="RL steps of each run")
  parser.add_argument("--variant", default="--config.model.remat=none",
                      help="flags of the comparison run (shell-quoted, one string)")
  parser.add_argument("--extra", default="", help="flags of both runs (shell-quoted, one string)")
  parser.add_argument("--workdir", default="", help="where the runs go (default: a temporary dir)")
  args = parser.parse_args(argv)
  if args.steps < 1:
    raise SystemExit(f"--steps={args.steps}: expected at least 1 RL step")
  root = args.workdir or tempfile.mkdtemp(prefix="peak_rss_")
  os.makedirs(root, exist_ok=True)
  results = {}
  for name, flags in (("shipped", []), ("variant", shlex.split(args.variant))):
    flags = shlex.split(args.extra) + flags
    argv = run_argv(args.config, os.path.join(root, name), args.steps, flags)
    results[name] = dict(peak_rss(argv, os.path.join(root, f"{name}.log")), flags=flags)
  out = {"benchmark": "peak_rss", "config": args.config, "steps": args.steps, "results": results,
         "shipped_over_variant": round(results["shipped"]["peak_rss_bytes"]
                                       / max(results["variant"]["peak_rss_bytes"], 1), 3)}
  print(json.dumps(out), flush=True)
  return out


if __name__ == "__main__":
  main()
