"""The cost of containing reward calls, side by side: inline vs thread vs process isolation.

    python -m benchmarks.reward_overhead            # prints one JSON line

Scores RL-step-sized batches (the default experiment's 32 prompts x 8 samples = 256 completions of
its chain_sum task, with its `task_score` reward) with `rl_jax.rewards.contained.ContainedScorer`
in each isolation mode, alternating the modes for --repeats rounds, and reports the median seconds
per batch. `thread_overhead_per_run_s` is (thread - inline) x the default config's RL steps, and
`thread_overhead_fraction` that over --run_seconds, the default experiment's wall time (the
README's 328 s for seed 0 by default): issue 21 asks for at most 0.05.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from rl_jax import data
from rl_jax.rewards import contained


def batch(task, size: int, rng: np.random.Generator):
  """`size` completions like a rollout's: the right answer, a wrong one or junk."""
  examples = [task.train[i] for i in rng.integers(0, len(task.train), size)]
  texts = []
  for e, u in zip(examples, rng.random(size)):
    texts.append(e.answer if u < 0.5 else str(int(rng.integers(-9, 30))) if u < 0.9 else "7 +")
  return texts, examples


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--repeats", type=int, default=30)
  parser.add_argument("--run_seconds", type=float, default=328.0)
  args = parser.parse_args(argv)
  from experiments.configs import default  # pylint: disable=g-import-not-at-top
  config = default.get_config()
  tc = config.task
  task = data.make_task(tc.name, tc.options.to_dict(), 0, 2000, 10)
  size = config.rl.prompts_per_step * config.rl.group_size
  texts, examples = batch(task, size, np.random.default_rng(0))
  rewards = tuple(config.rl.rewards)
  scorers = {mode: contained.ContainedScorer(task, timeout=config.rl.reward_timeout,
                                             isolation=mode)
             for mode in contained.ISOLATIONS}
  times = {mode: [] for mode in scorers}
  results = {}
  try:
    for mode, scorer in scorers.items():  # Warm-up (the process mode starts its child).
      results[mode] = scorer.score_components(texts, examples, rewards)[0]
    for _ in range(args.repeats):
      for mode, scorer in scorers.items():
        t0 = time.perf_counter()
        scorer.score_components(texts, examples, rewards)
        times[mode].append(time.perf_counter() - t0)
  finally:
    for scorer in scorers.values():
      scorer.close()
  med = {mode: statistics.median(t) for mode, t in times.items()}
  overhead = (med["thread"] - med["inline"]) * config.rl.steps
  print(json.dumps({
      "date": time.strftime("%Y-%m-%d"), "batch": size, "reward": rewards,
      "seconds_per_batch": {m: round(v, 6) for m, v in med.items()},
      "thread_vs_inline": round(med["thread"] / med["inline"], 3),
      "process_vs_inline": round(med["process"] / med["inline"], 3),
      "rl_steps": config.rl.steps,
      "thread_overhead_per_run_s": round(overhead, 4),
      "thread_overhead_fraction": round(overhead / args.run_seconds, 5),
      "same_rewards": all(np.array_equal(results["inline"], r) for r in results.values()),
  }))


if __name__ == "__main__":
  main()
