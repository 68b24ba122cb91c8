"""Shared test setup: 8 host CPU devices in every test process, and the smoke config.

The environment is set here, at import time, because pytest imports this file before any test
module (and so before `jax`); XLA reads `XLA_FLAGS` once, when the backend starts. Under
pytest-xdist every worker process imports this file too.
"""

from __future__ import annotations

import os

_DEVICE_FLAG = "--xla_force_host_platform_device_count=8"
# One XLA CPU thread per test process: pytest-xdist runs one worker per core, and tests start
# runs as subprocesses beside them, so XLA's own thread pools only oversubscribed the cores
# (their spin-waiting cost a fifth of the suite's CPU time on 2 cores). Results do not depend on
# it; the runs and benchmarks outside the tests keep XLA's defaults. (Every entry must be an
# `--xla_...` flag: XLA stops reading XLA_FLAGS at the first token that is not one, so a bare
# `intra_op_parallelism_threads=1` here once silently dropped every flag after it.)
_THREAD_FLAGS = ("--xla_cpu_multi_thread_eigen=false",)
# XLA:CPU's compile time, which is most of the suite's time (its programs are tiny): the legacy
# elemental fusion emitter instead of the MLIR fusion emitters, and one LLVM module a program
# instead of several (split for parallel codegen, which one thread a process cannot use). On
# tests/train/test_resume.py the compiles took 25 s instead of 82 s (`JAX_LOG_COMPILES=1`).
# Neither changes what a program computes. On optimized programs the legacy emitter's code runs
# slower (tests/test_learning.py: 98 s against 86 s); the suite's programs mostly run once.
_COMPILE_FLAGS = ("--xla_cpu_use_fusion_emitters=false",
                  "--xla_cpu_parallel_codegen_split_count=1")

for _flag in (_DEVICE_FLAG,) + _THREAD_FLAGS + _COMPILE_FLAGS:
  if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_flag}".strip()
os.environ["JAX_PLATFORMS"] = "cpu"
# XLA optimizations off by default (`jax_disable_most_optimizations`), in the test processes and
# the runs they start as subprocesses: the suite's programs are tiny, and compiling them, not
# running them, is most of its time (tests/test_run_cli.py, test_oracle_prior.py and
# test_length_buckets.py: 85 s instead of 171 s). The whole suite passes either way. Tests whose
# time is running many steps ask for `optimized_compiles` (tests/test_learning.py: 168 s
# unoptimized).
# `JAX_DISABLE_MOST_OPTIMIZATIONS=0 python -m pytest ...` runs the whole suite optimized.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# Runs turn on the persistent compilation cache (config.compile_cache_dir), and it stays on in
# their process: in a test worker every later compile of every later test file would write to
# it. The suite compiles thousands of programs once each, so the cache gained nothing, and its
# size-bounded directory (scanned and locked on each write, shared by the workers) made the
# files after the first run 3 to 5 times slower. The tests' runs, and the runs they start as
# subprocesses, run without it; tests/test_compile_cache.py turns it on where it is the subject.
os.environ.setdefault("RL_JAX_COMPILE_CACHE_DIR", "")

import ml_collections  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from experiments.configs import default  # pylint: disable=g-import-not-at-top


def make_smoke_config() -> ml_collections.ConfigDict:
  """A fresh, locked copy of `default.py:smoke` (fields may change; new fields are errors)."""
  config = default.get_config("smoke").copy_and_resolve_references()
  config.lock()  # The copy keeps the lock today; make sure a test typo still fails.
  return config


# The longest test files (seconds on one of 2 CPU cores), longest first; every other file follows
# in its usual order. `pytest -n 2` hands out whole files in collection order (pytest.ini), so
# these start first and the two workers end close together, not one running a minute-long file
# alone at the end. Only the order changes; re-measure with --durations when it drifts.
LONGEST_FIRST = (
    "models/test_scan_layers.py",  # 181 (2026-11-27, suite run of 22 minutes)
    "test_benchmarks_scan_layers.py",  # 151, six processes one after another
    "test_learning.py",  # 131, optimized: 920 steps
    "test_benchmarks_faults.py",  # 103, four processes one after another
    "train/test_resume.py",  # 100
    "test_sweeps.py",  # 100
    "test_colab.py",  # 99
    "test_multihost.py",  # 98, three processes at once
    "evals/test_eval_run.py",  # 82
    "train/test_aot.py",  # 72
    "test_recipes.py",  # 65 (2026-11-29, the file alone): six runs one after another
    "sampling/test_decode.py",  # 64
    "train/test_precision.py",  # 64
    "train/test_sharding.py",  # 63
    "sampling/test_echo_rollout.py",  # 63
    "test_ladder_config.py",  # 62
    "train/test_scan_layers_resume.py",  # 57
)


def pytest_collection_modifyitems(config, items):
  """Moves the files of `LONGEST_FIRST` to the front, in that order (a stable sort)."""
  del config
  tests_dir = os.path.dirname(os.path.abspath(__file__))
  rank = {os.path.join(tests_dir, path): i for i, path in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(str(item.path), len(rank)))


@pytest.fixture
def smoke_config() -> ml_collections.ConfigDict:
  """The `default.py:smoke` config, a private copy each test may modify."""
  return make_smoke_config()


def _most_optimizations_disabled(disabled: bool):
  """Sets `jax_disable_most_optimizations` for the body of a fixture, then restores it."""
  import jax  # pylint: disable=g-import-not-at-top
  before = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", disabled)
  yield
  jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture(scope="module")
def optimized_compiles():
  """XLA optimizations on for a module's tests: those that run many steps (their time is running
  programs, not compiling them) or check what the optimizer does
  (use with `pytest.mark.usefixtures("optimized_compiles")`)."""
  yield from _most_optimizations_disabled(False)


@pytest.fixture(scope="module")
def fast_compiles():
  """XLA optimizations off for a module's tests even when the suite runs optimized
  (`JAX_DISABLE_MOST_OPTIMIZATIONS=0`): tests that compare two programs on tiny shapes spend most
  of their time compiling (use with `pytest.mark.usefixtures("fast_compiles")`)."""
  yield from _most_optimizations_disabled(True)


@pytest.fixture(scope="session")
def smoke_config_factory():
  """`make_smoke_config`, for fixtures wider than one test (each call is a fresh copy)."""
  return make_smoke_config
