"""Shared test setup: 8 host CPU devices in every test process, and the smoke config.

The environment is set here, at import time, because pytest imports this file before any test
module (and so before `jax`); XLA reads `XLA_FLAGS` once, when the backend starts. Under
pytest-xdist every worker process imports this file too.
"""

from __future__ import annotations

import os

_DEVICE_FLAG = "--xla_force_host_platform_device_count=8"
# One XLA CPU thread per test process: pytest-xdist runs one worker per core and tests start
# runs as subprocesses beside them. Every entry must be an `--xla_...` flag: XLA stops reading
# XLA_FLAGS at the first token that is not one.
_THREAD_FLAGS = ("--xla_cpu_multi_thread_eigen=false",)
# Faster XLA:CPU compiles (most of the suite's time): the legacy elemental fusion emitter and one
# LLVM module a program. Neither changes what a program computes.
_COMPILE_FLAGS = ("--xla_cpu_use_fusion_emitters=false",
                  "--xla_cpu_parallel_codegen_split_count=1")

for _flag in (_DEVICE_FLAG,) + _THREAD_FLAGS + _COMPILE_FLAGS:
  if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_flag}".strip()
os.environ["JAX_PLATFORMS"] = "cpu"
# XLA optimizations off by default, in the test processes and the runs they start: the suite's
# programs are tiny and compiling them is most of its time. Tests whose time is running many
# steps ask for `optimized_compiles`; `JAX_DISABLE_MOST_OPTIMIZATIONS=0 python -m pytest ...`
# runs the whole suite optimized (it passes either way).
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# No persistent compilation cache in the tests' runs: each program compiles once, and the
# shared, size-bounded cache directory only slowed the workers down.
# tests/test_compile_cache.py turns it on where it is the subject.
os.environ.setdefault("RL_JAX_COMPILE_CACHE_DIR", "")

import ml_collections  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from experiments.configs import default  # pylint: disable=g-import-not-at-top


def make_smoke_config() -> ml_collections.ConfigDict:
  """A fresh, locked copy of `default.py:smoke` (fields may change; new fields are errors)."""
  config = default.get_config("smoke").copy_and_resolve_references()
  config.lock()  # The copy keeps the lock today; make sure a test typo still fails.
  return config


# The longest test files, longest first (docs/research/test-suite-timings.md has their times):
# `pytest -n 2` hands out whole files in collection order (pytest.ini), so these start first and
# the two workers end close together. Only the order changes.
LONGEST_FIRST = (
    "models/test_scan_layers.py",
    "test_benchmarks_scan_layers.py",
    "test_learning.py",
    "test_benchmarks_faults.py",
    "train/test_resume.py",
    "test_sweeps.py",
    "test_colab.py",
    "test_multihost.py",
    "evals/test_eval_run.py",
    "train/test_aot.py",
    "test_recipes.py",
    "sampling/test_decode.py",
    "train/test_precision.py",
    "train/test_sharding.py",
    "sampling/test_echo_rollout.py",
    "test_ladder_config.py",
    "train/test_scan_layers_resume.py",
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
