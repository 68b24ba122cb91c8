"""Shared test setup: 8 host CPU devices in every test process, and the smoke config.

The environment is set here, at import time, because pytest imports this file before any test
module (and so before `jax`); XLA reads `XLA_FLAGS` once, when the backend starts. Under
pytest-xdist every worker process imports this file too.
"""

from __future__ import annotations

import os
import tempfile

_DEVICE_FLAG = "--xla_force_host_platform_device_count=8"

if _DEVICE_FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICE_FLAG}".strip()
os.environ["JAX_PLATFORMS"] = "cpu"
# Runs turn on the persistent compilation cache (config.compile_cache_dir); the tests' runs, and
# the runs they start as subprocesses, use one temporary directory per session, not ~/.cache.
if "RL_JAX_COMPILE_CACHE_DIR" not in os.environ:
  os.environ["RL_JAX_COMPILE_CACHE_DIR"] = tempfile.mkdtemp(prefix="rl_jax_test_jax_cache_")

import ml_collections  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from experiments.configs import default  # pylint: disable=g-import-not-at-top


def make_smoke_config() -> ml_collections.ConfigDict:
  """A fresh, locked copy of `default.py:smoke` (fields may change; new fields are errors)."""
  config = default.get_config("smoke").copy_and_resolve_references()
  config.lock()  # The copy keeps the lock today; make sure a test typo still fails.
  return config


@pytest.fixture
def smoke_config() -> ml_collections.ConfigDict:
  """The `default.py:smoke` config, a private copy each test may modify."""
  return make_smoke_config()


@pytest.fixture(scope="module")
def fast_compiles():
  """XLA optimizations off for a module's tests: tests that compare two programs on tiny shapes
  spend most of their time compiling (use with `pytest.mark.usefixtures("fast_compiles")`)."""
  import jax  # pylint: disable=g-import-not-at-top
  before = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  yield
  jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture(scope="session")
def smoke_config_factory():
  """`make_smoke_config`, for fixtures wider than one test (each call is a fresh copy)."""
  return make_smoke_config
