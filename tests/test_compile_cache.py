"""The persistent compilation cache: written where the config says, read back, off for ''."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import compile_cache
from rl_jax.train import config_check


@pytest.fixture
def restore_cache():
  before = compile_cache.current_dir()
  yield
  compile_cache.configure(before)


def _entries(path, name):
  return [f for f in os.listdir(path) if f.startswith(f"jit_{name}-") and f.endswith("-cache")]


# Programs no other test compiles (the cache is keyed by the program).
def _prog_sin(x):
  return jnp.sin(x) * 3.0 + 17.25


def _prog_cos(x):
  return jnp.cos(x) - 11.5


def _prog_tan(x):
  return jnp.tan(x) + 0.125


def test_cache_written_to_configured_dir_and_switched_off(tmp_path, restore_cache):
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  x = np.ones(3, np.float32)
  assert compile_cache.configure(a) == a and compile_cache.current_dir() == a
  jax.jit(_prog_sin)(x).block_until_ready()
  assert len(_entries(a, "_prog_sin")) == 1
  # Another directory: the next program goes there, not into the first.
  compile_cache.configure(b)
  jax.jit(_prog_cos)(x).block_until_ready()
  assert not _entries(a, "_prog_cos") and len(_entries(b, "_prog_cos")) == 1
  assert compile_cache.configure("") == "" and compile_cache.current_dir() == ""
  jax.jit(_prog_tan)(x).block_until_ready()
  assert not _entries(a, "_prog_tan") and not _entries(b, "_prog_tan")
  # A fresh start (JAX's in-memory caches cleared) reads the entry back instead of compiling.
  compile_cache.configure(a)
  jax.clear_caches()
  seen = []
  listener = lambda name, **kw: seen.append(name)  # noqa: E731
  jax.monitoring.register_event_listener(listener)
  try:
    jax.jit(_prog_sin)(x).block_until_ready()
  finally:
    jax.monitoring.unregister_event_listener(listener)
  assert "/jax/compilation_cache/cache_hits" in seen
  assert len(_entries(a, "_prog_sin")) == 1


def test_min_seconds_skips_fast_programs(tmp_path, restore_cache):
  compile_cache.configure(str(tmp_path), min_compile_seconds=1e6)
  jax.jit(_prog_cos)(np.ones(4, np.float32)).block_until_ready()
  assert not _entries(tmp_path, "_prog_cos")


def test_bad_values_name_the_field(smoke_config):
  with pytest.raises(ValueError, match="compile_cache_min_seconds must be >= 0"):
    compile_cache.configure("/tmp/x", min_compile_seconds=-1.0)
  smoke_config.compile_cache_max_gb = 0.0
  with pytest.raises(config_check.ConfigError, match=r"config.compile_cache_max_gb=0.0"):
    config_check.check(smoke_config)


def test_default_dir_under_user_cache(monkeypatch):
  monkeypatch.setenv(compile_cache.ENV, "")
  assert compile_cache.default_dir() == ""
  monkeypatch.delenv(compile_cache.ENV)
  monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere/cache")
  assert compile_cache.default_dir() == "/somewhere/cache/rl_jax/jax_cache"
  monkeypatch.delenv("XDG_CACHE_HOME")
  assert compile_cache.default_dir() == os.path.expanduser("~/.cache/rl_jax/jax_cache")


def _prog_stats(x):
  return jnp.tanh(x) * 0.375 - 2.5


def test_compile_stats_split_a_miss_from_a_hit(tmp_path, restore_cache):
  """CompileStats counts a compile on a miss and a read on a hit, only while active."""
  compile_cache.configure(str(tmp_path))
  x = np.ones(5, np.float32)
  with compile_cache.CompileStats() as miss:
    jax.jit(_prog_stats)(x).block_until_ready()
  m = miss.as_dict()
  assert m["cache_requests"] >= 1 and m["cache_hits"] == 0 and m["cache_read_s"] == 0.0
  assert m["compile_s"] > 0 and m["trace_s"] > 0
  jax.clear_caches()  # A fresh start: the program comes from the cache.
  hit = compile_cache.CompileStats().start()
  jax.jit(_prog_stats)(x).block_until_ready()
  hit.stop()
  hit.stop()  # Idempotent.
  h = hit.as_dict()
  assert h["cache_hits"] >= 1 and h["cache_read_s"] > 0
  assert h["compile_s"] >= h["cache_read_s"]  # The backend's time includes the read.
  # Stopped: nothing more is counted.
  jax.clear_caches()
  jax.jit(_prog_stats)(x).block_until_ready()
  assert hit.as_dict() == h
