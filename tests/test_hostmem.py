"""rl_jax.hostmem: freed heap memory goes back to the OS, and a checkpoint save leaves no copy of
the state in the resident set (each in a fresh subprocess, so the suite's own heap is not read)."""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc/self/status; malloc_trim is glibc's")

_RSS = """
def rss_mb():
  for line in open("/proc/self/status"):
    if line.startswith("VmRSS"):
      return int(line.split()[1]) / 1024
"""


def _run(body: str) -> dict:
  code = textwrap.dedent(_RSS) + textwrap.dedent(body)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       timeout=300)
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_release_free_heap_returns_freed_small_blocks():
  # 3,000 blocks of 64 KiB (under glibc's mmap threshold, so on the heap), the last kept alive so
  # the heap cannot shrink from its top: freeing the rest leaves ~190 MB resident until trimmed.
  got = _run("""
    import json
    from rl_jax import hostmem
    before = rss_mb()
    blocks = [b"x" * 65536 for _ in range(3000)]
    keep = blocks[-1]
    del blocks
    held = rss_mb()
    made = hostmem.release_free_heap()
    print(json.dumps(dict(before=before, held=held, after=rss_mb(), made=made)))
  """)
  assert got["made"] is True
  assert got["held"] - got["before"] > 150, got
  assert got["after"] - got["before"] < 50, got


def test_checkpoint_save_leaves_no_copy_resident(tmp_path):
  # A 384 MB state of random numbers in 32 leaves (the written file is not compressed away):
  # orbax copies it into host buffers to write it; after `maybe_save` the resident set is back
  # where it was (without the trim about 220 MB of those buffers stayed resident).
  got = _run(f"""
    import json
    import jax
    from rl_jax.checkpoint import Checkpointer
    keys = jax.random.split(jax.random.key(0), 32)
    state = {{str(i): jax.random.normal(k, (3_000_000,)) for i, k in enumerate(keys)}}
    jax.block_until_ready(state)
    ckpt = Checkpointer({str(tmp_path)!r}, save_every=1)
    before = rss_mb()
    assert ckpt.maybe_save(1, state, {{}})
    print(json.dumps(dict(before=before, after=rss_mb())))
  """)
  assert got["after"] - got["before"] < 80, got
