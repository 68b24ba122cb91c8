"""Multi-host: `experiments.run` in 2 processes (`jax.distributed`, one CPU device each, gloo
collectives over 127.0.0.1) equals the same run in one process with 2 devices.

Both runs use a (1, 2, 1) fsdp mesh, so parameters and optimizer moments are split across the
processes. The 2-process run must produce the single-process metrics (SFT steps and one RL step
with a non-zero gradient), evaluations and checkpoint, with only process 0 writing metrics,
plots and the summary. The hostname must resolve to a local address (gloo connects through it);
every process is bounded by a timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 420
# The smoke config cut to 2 SFT steps and 1 RL step. DAPO's overlong shaping makes rewards vary
# with completion length, so the RL step has a gradient even when no answer is right yet.
ARGS = ["--config=experiments/configs/default.py:smoke", "--config.sft.steps=2",
        "--config.rl.steps=1", "--config.rl.overlong_buffer=4", "--config.control.enabled=False",
        "--config.eval.temperatures=()", "--config.sft.eval_every=0", "--config.rl.eval_every=0",
        "--config.mesh.shape=(1,2,1)", "--config.task.eval_size=16", "--config.eval.batch_size=16",
        "--config.eval.num_samples=2"]
IGNORED = ("time", "step_seconds")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(workdir, devices: int, *extra) -> subprocess.Popen:
  # XLA optimizations off: the runs are compared with each other, and compiling dominates.
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
             JAX_DISABLE_MOST_OPTIMIZATIONS="1",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
  return subprocess.Popen([sys.executable, "-m", "experiments.run", *ARGS,
                           f"--workdir={workdir}", *extra], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(procs) -> list[str]:
  outs = []
  try:
    for p in procs:
      outs.append(p.communicate(timeout=TIMEOUT_S)[0])
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-4000:]
  return outs


def _records(workdir) -> list[dict]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [{k: v for k, v in json.loads(line).items() if k not in IGNORED} for line in f]


def _restore(workdir, phase: str, step: int):
  """The checkpointed train state, every array restored whole onto this process's first device."""
  path = os.path.join(workdir, "checkpoints", phase, str(step), "state")
  one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  with ocp.StandardCheckpointer() as ckpt:
    target = jax.tree_util.tree_map(
        lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one),
        ckpt.metadata(path).item_metadata.tree)
    return ckpt.restore(path, target)


def test_two_processes_equal_one(tmp_path):
  port = _free_port()
  multi, single = tmp_path / "multi", tmp_path / "single"
  dist = [f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2"]
  procs = [_start(multi, 1, *dist, f"--process_id={i}") for i in range(2)]
  procs.append(_start(single, 2))
  out0, out1, out_single = _finish(procs)

  # Only process 0 prints the summary; both runs agree on it.
  summary = json.loads(out0[out0.index("{"):])
  assert "{" not in out1
  single_summary = json.loads(out_single[out_single.index("{"):])
  for key in ("sft_accuracy", "rl_accuracy", "sft_sampled_accuracy", "rl_sampled_accuracy"):
    assert summary[key] == single_summary[key], key

  # One metrics file, written once (by process 0), equal to the single process's.
  got, want = _records(multi), _records(single)
  assert [(r["phase"], r["step"]) for r in got] == [("sft", 1), ("sft", 2), ("rl", 1)]
  assert [(r["phase"], r["step"]) for r in want] == [(r["phase"], r["step"]) for r in got]
  for g, w in zip(got, want):
    assert set(g) == set(w)
    assert g["phase"] == w["phase"]
    for k in set(w) - {"phase"}:
      np.testing.assert_allclose(g[k], w[k], rtol=1e-5, atol=1e-6, err_msg=f"{g['phase']} {k}")
  assert got[-1]["grad_norm"] > 0 and got[-1]["adv_abs_mean"] > 0
  assert (multi / "curves.png").exists() and (multi / "summary.json").exists()

  # The checkpoint written by both processes together holds the single process's state.
  restored, expected = _restore(multi, "rl", 1), _restore(single, "rl", 1)
  leaves, ref_leaves = (jax.tree_util.tree_leaves(t) for t in (restored, expected))
  assert len(leaves) == len(ref_leaves) > 0
  for a, b in zip(leaves, ref_leaves):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)



def test_coordinator_without_process_flags_is_a_usage_error(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "experiments.run", *ARGS, f"--workdir={tmp_path}",
                         "--coordinator_address=127.0.0.1:1"], cwd=REPO, capture_output=True,
                        text=True, timeout=120, check=False)
  assert proc.returncode != 0
  assert "--coordinator_address=127.0.0.1:1 needs --num_processes and --process_id" in proc.stderr
  assert not os.listdir(tmp_path)


HELPERS = """
import sys
import numpy as np
from rl_jax import parallel
parallel.initialize_distributed(sys.argv[1], 2, int(sys.argv[2]))
i = int(sys.argv[2])
# A host value (e.g. a wall time) that differs per process: process 0's wins everywhere.
print("broadcast", parallel.broadcast(7 if i == 0 else 3))
part = parallel.process_chunk(5)
print("chunk", part.start, part.stop)
print("gathered", parallel.gather_chunks(np.arange(5)[part] * 10, 5).tolist())
parallel.sync("test")
print("primary", parallel.is_primary())
"""


def test_host_helpers_across_two_processes():
  """`broadcast`, `process_chunk`/`gather_chunks` and `sync` (used by the loop's control phase
  and the rollouts' scoring) agree across processes."""
  address = f"127.0.0.1:{_free_port()}"
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
             XLA_FLAGS="--xla_force_host_platform_device_count=1")
  procs = [subprocess.Popen([sys.executable, "-c", HELPERS, address, str(i)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(2)]
  outs = [{line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines()
           if line.split(" ", 1)[0] in ("broadcast", "chunk", "gathered", "primary")}
          for out in _finish(procs)]
  assert [o["broadcast"] for o in outs] == ["7", "7"]
  assert [o["chunk"] for o in outs] == ["0 3", "3 5"]
  assert [o["gathered"] for o in outs] == ["[0, 10, 20, 30, 40]"] * 2
  assert [o["primary"] for o in outs] == ["True", "False"]


GRAIN = """
import sys
import numpy as np
from rl_jax import parallel
parallel.initialize_distributed(sys.argv[1], 2, int(sys.argv[2]))
from rl_jax.checkpoint import Checkpointer
from rl_jax.data.grain_source import ProblemStream
source = [{"index": i} for i in range(20)]
stream = ProblemStream(source, 4, seed=3)
with Checkpointer(sys.argv[3], save_every=1, data_iterator=stream.iterator) as ckpt:
  first = [stream.next_indices() for _ in range(2)]
  ckpt.maybe_save(2, {"w": np.zeros(2, np.float32)})
  after = [stream.next_indices() for _ in range(3)]
print("global", [b.tolist() for b in first + after])
# A new stream restored from the checkpoint goes on where the saved one stopped.
stream2 = ProblemStream(source, 4, seed=3)
with Checkpointer(sys.argv[3], save_every=1, data_iterator=stream2.iterator) as ckpt:
  ckpt.restore(2, {"w": np.zeros(2, np.float32)})
  print("resumed", [stream2.next_indices().tolist() for _ in range(3)])
print("local", stream2.next_local_indices().tolist())
"""


def test_grain_stream_across_two_processes(tmp_path):
  """config.data.source='grain' under 2 processes: each process reads its own shard, every
  process gets the same global batch (the parts in process order), and the iterator's state is
  checkpointed by both processes together and restored."""
  address = f"127.0.0.1:{_free_port()}"
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
             XLA_FLAGS="--xla_force_host_platform_device_count=1")
  procs = [subprocess.Popen([sys.executable, "-c", GRAIN, address, str(i), str(tmp_path / "ck")],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True) for i in range(2)]
  outs = [{line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1]) for line in out.splitlines()
           if line.split(" ", 1)[0] in ("global", "resumed", "local")} for out in _finish(procs)]
  assert outs[0]["global"] == outs[1]["global"]
  batches = np.asarray(outs[0]["global"])  # [5 steps, 4]
  # Process p's half of every batch comes from its shard (records 10p .. 10p + 9).
  assert (batches[:, :2] < 10).all() and (batches[:, 2:] >= 10).all()
  # Within an epoch (5 batches of 2 per process = 10 records) a shard is read once.
  assert sorted(batches[:, :2].ravel().tolist()) == list(range(10))
  assert [o["resumed"] for o in outs] == [outs[0]["global"][2:]] * 2
  assert all(i < 10 for i in outs[0]["local"]) and all(i >= 10 for i in outs[1]["local"])
  assert len(outs[0]["local"]) == len(outs[1]["local"]) == 2
