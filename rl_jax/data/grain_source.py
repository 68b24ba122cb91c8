"""Training batches of problem indices from a TFDS data source, through grain.

`ProblemStream` is a `grain.DataLoader` over a random-access source (a `tfds_builders` split):
an `IndexSampler` shuffles the records every epoch (seeded), shards them by JAX process
(`ShardByJaxProcess`: each process reads its own 1/num_processes of every epoch) and repeats
forever; each process reads the `index` field of `batch_size / num_processes` records of its own
shard, and `next_indices` all-gathers them into the global batch (process 0's part first), since
the loop builds the global batch on every process and places each process's rows. The loop looks
the indices up in the task's encoded arrays (`Experiment.train_prompts`), which are tokenized once
at build time because the tokenizer is trained on the whole train set.

The stream's position is grain iterator state: `Checkpointer(..., data_iterator=stream.iterator)`
saves it beside the train state (grain's orbax handler, one JSON file per process) and restores it,
so a resumed run reads the same problems in the same order as an uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import grain
import jax
import numpy as np

from rl_jax import parallel


class _Index(grain.transforms.Map):
  """record -> its `index` field (the problem's position in the task's list)."""

  def map(self, element):
    return np.int64(element["index"])


def sampler_seed(*parts: int) -> int:
  """A seed in [0, 2**31) for grain's sampler from integers (run seed, phase tag)."""
  return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, np.uint32)[0] >> 1)


class ProblemStream:
  """An endless, shuffled, process-sharded stream of index batches over `source`.

  Args:
    source: a random-access source whose records have an int `index` field (len and getitem).
    batch_size: global batch size (all processes together); must divide by the process count
      and fit in one process's shard.
    seed: the sampler's seed (each epoch's order depends on it alone).
    worker_count: grain worker processes (0: read in this process; the records are tiny).
    read_threads: threads that read records ahead (grain `ReadOptions.num_threads`); 0 reads
      each record when the batch needs it, which on a 2-core CPU was the fastest (see
      benchmarks/data_path.py).
    shuffle: shuffle every epoch (False: records in stored order).
  """

  def __init__(self, source: Any, batch_size: int, *, seed: int, worker_count: int = 0,
               read_threads: int = 0, shuffle: bool = True):
    processes = jax.process_count()
    if batch_size <= 0 or batch_size % processes:
      raise ValueError(f"batch_size={batch_size} must be a positive multiple of the number of "
                       f"JAX processes ({processes})")
    self.batch_size = batch_size
    per_process = batch_size // processes
    if per_process > len(source) // processes:
      raise ValueError(f"batch_size={batch_size} is larger than the {len(source)} records of "
                       f"{source!r} ({processes} process shard(s))")
    for name, value in (("worker_count", worker_count), ("read_threads", read_threads)):
      if value < 0:
        raise ValueError(f"{name} (config.data.{name}) must be >= 0, got {value}")
    sampler = grain.samplers.IndexSampler(
        num_records=len(source), shard_options=grain.sharding.ShardByJaxProcess(
            drop_remainder=True), shuffle=shuffle, num_epochs=None, seed=seed)
    self.loader = grain.DataLoader(
        data_source=source, sampler=sampler, worker_count=worker_count,
        read_options=grain.ReadOptions(num_threads=read_threads,
                                       prefetch_buffer_size=4 * per_process * (read_threads > 0)),
        operations=[_Index(), grain.transforms.Batch(per_process, drop_remainder=True)])
    self.iterator = iter(self.loader)

  def next_local_indices(self) -> np.ndarray:
    """This process's part of the next batch: int64 [batch_size / num_processes] record indices
    from its own shard."""
    return np.asarray(next(self.iterator), np.int64)

  def next_indices(self) -> np.ndarray:
    """The next global batch: int64 [batch_size] record indices, the processes' parts in process
    order (every process gets the same array; one all-gather of the indices when there are
    several processes)."""
    return parallel.gather_chunks(self.next_local_indices(), self.batch_size)
