"""The two training-data paths side by side: config.data.source='memory' vs 'grain'.

    python -m benchmarks.data_path --config=experiments/configs/default.py --draws=500 \
        [--worker_count=0] [--read_threads=0]

Prints one JSON line. For the config's task (train_size, eval_size, seed):

* `task_build_s`: building the task in memory (`data.make_task`; both paths do this, the task
  object scores completions).
* `tfds_write_s`: writing its TFDS dataset (array_record) from that task into an empty data dir;
  `tfds_reuse_s`: opening it again (what every later run of the grain path pays);
  `tfds_read_all_s`: reading every train record back (`tfds_builders.examples`).
* `draw_us`: microseconds per batch of indices, for the SFT batch size and the RL prompts per
  step: the memory path's `host_rng(tag, step).choice` against the grain loader's next batch.
"""

from __future__ import annotations

import json
import tempfile
import time

import numpy as np
from absl import app, flags
from ml_collections import config_flags

from rl_jax import data, seeds
from rl_jax import experiment
from rl_jax.data import grain_source, tfds_builders

_CONFIG = config_flags.DEFINE_config_file("config", "experiments/configs/default.py",
                                          "experiment config")
_DRAWS = flags.DEFINE_integer("draws", 2000, "batches drawn per path and batch size")
_WORKERS = flags.DEFINE_integer("worker_count", 0, "grain worker processes")
_THREADS = flags.DEFINE_integer("read_threads", 0, "grain read-ahead threads")


def _seconds(fn):
  t0 = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - t0


def _draw_us(draw, n: int) -> float:
  draw(0)  # The first grain batch starts its iterator.
  t0 = time.perf_counter()
  for step in range(1, n + 1):
    draw(step)
  return (time.perf_counter() - t0) / n * 1e6


def main(argv):
  del argv
  config = _CONFIG.value
  tc = config.task
  seed = experiment.task_seed(config)
  task, build_s = _seconds(lambda: data.make_task(
      tc.name, tc.options.to_dict(), seed, tc.train_size, tc.eval_size,
      answer_extraction=tc.answer_extraction))
  spec = tfds_builders.task_spec(tc.name, tc.options.to_dict(), seed, tc.train_size, tc.eval_size,
                                 tc.answer_extraction)
  with tempfile.TemporaryDirectory() as data_dir:
    _, write_s = _seconds(lambda: tfds_builders.prepare_task(spec, data_dir, task=task))
    sources, reuse_s = _seconds(lambda: tfds_builders.prepare_task(spec, data_dir))
    train = sources["train"]
    _, read_s = _seconds(lambda: tfds_builders.examples(train))
    n = len(task.train)
    draws = {}
    for name, size in (("sft", config.sft.batch_size), ("rl", config.rl.prompts_per_step)):
      # Experiment.host_rng(tag, step): a fresh numpy generator per (seed, tag, step).
      memory = _draw_us(lambda step: np.random.default_rng([config.seed, seeds.SFT, step]).choice(
          n, size, replace=False), _DRAWS.value)
      stream = grain_source.ProblemStream(train, size, seed=grain_source.sampler_seed(0, seeds.SFT),
                                          worker_count=_WORKERS.value,
                                          read_threads=_THREADS.value)
      grain = _draw_us(lambda step: stream.next_indices(), _DRAWS.value)
      draws[name] = {"batch": size, "memory_us": round(memory, 1), "grain_us": round(grain, 1)}
  print(json.dumps({
      "task": tc.name, "train_size": n, "heldout_size": len(task.heldout),
      "task_build_s": round(build_s, 3), "tfds_write_s": round(write_s, 3),
      "tfds_reuse_s": round(reuse_s, 3), "tfds_read_all_s": round(read_s, 3),
      "draw_us": draws, "draws": _DRAWS.value, "worker_count": _WORKERS.value,
      "read_threads": _THREADS.value}))


if __name__ == "__main__":
  app.run(main)
