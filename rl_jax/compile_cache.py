"""JAX's persistent compilation cache, on by default for runs (`config.compile_cache_dir`).

A run compiles the same programs every time it starts (the sampler, the log-prob passes, the SFT
and RL steps, the evaluations); with the cache, a later start with the same shapes reads the
executables from disk instead of compiling them. `configure` is called once by the entry point
(`rl_jax.train.loop.run`) before anything compiles.

The cache is process-wide (JAX keeps one), keyed by the program, the compile options, the
backend and the JAX version, so one directory serves every config. It is size-bounded (least
recently used entries evicted), which makes JAX lock the directory around reads and writes: runs
that share it concurrently never read a half-written entry. As JAX's documentation warns, the
cache is trusted code: do not point it at a directory others may write to.
"""

from __future__ import annotations

import os

import jax
from jax.experimental.compilation_cache import compilation_cache as _jax_cache


ENV = "RL_JAX_COMPILE_CACHE_DIR"


def default_dir() -> str:
  """`$RL_JAX_COMPILE_CACHE_DIR` when set ('' = off), else `$XDG_CACHE_HOME/rl_jax/jax_cache`
  (`~/.cache/rl_jax/jax_cache` without XDG_CACHE_HOME). The tests point the variable at a
  temporary directory of their session."""
  if ENV in os.environ:
    return os.environ[ENV]
  root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(root, "rl_jax", "jax_cache")


def configure(cache_dir: str, min_compile_seconds: float = 0.0, max_gb: float = 4.0) -> str:
  """Turns the persistent compilation cache on at `cache_dir`, or off for ''.

  Args:
    cache_dir: directory of the cache (created; `~` expanded); '' turns the cache off.
    min_compile_seconds: only programs that took at least this long to compile are written
      (JAX's `jax_persistent_cache_min_compile_time_secs`; JAX's default, 1 s, would skip most
      programs of a small run, each of which still costs a compile on every start).
    max_gb: size bound of the directory (> 0); least recently used entries are evicted.

  Returns:
    The directory in use ('' when off). Calling it again with another directory (or '') switches
    the process's cache: JAX's cache object is reset, so the next compile opens the new one.
  """
  if min_compile_seconds < 0:
    raise ValueError(f"config.compile_cache_min_seconds must be >= 0, got {min_compile_seconds}")
  if not max_gb > 0:
    raise ValueError(f"config.compile_cache_max_gb must be > 0, got {max_gb}")
  path = os.path.abspath(os.path.expanduser(cache_dir)) if cache_dir else ""
  max_bytes = int(max_gb * 2**30)
  changed = (path != current_dir()
             or (path and max_bytes != jax.config.jax_compilation_cache_max_size))
  if path:
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_compilation_cache_max_size", max_bytes)
  if changed:
    jax.config.update("jax_compilation_cache_dir", path or None)
    jax.config.update("jax_enable_compilation_cache", bool(path))
    _jax_cache.reset_cache()
  return path


def current_dir() -> str:
  """The cache directory in use ('' when the cache is off)."""
  if not jax.config.jax_enable_compilation_cache:
    return ""
  return jax.config.jax_compilation_cache_dir or ""


# JAX's monitoring events -> CompileStats fields (seconds summed; the counts count events).
_DURATIONS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    # The backend's part: XLA's compile on a miss, the cache read (+ load) on a hit.
    "/jax/core/compile/backend_compile_duration": "compile_s",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_read_s",
}
_COUNTS = {
    "/jax/compilation_cache/compile_requests_use_cache": "cache_requests",
    "/jax/compilation_cache/cache_hits": "cache_hits",
}


class CompileStats:
  """Where a program's start-up time goes, from JAX's own monitoring events, while active.

      with compile_cache.CompileStats() as stats:
        first_step()
      stats.as_dict()  # {'trace_s', 'lower_s', 'compile_s', 'cache_read_s', 'cache_requests',
                       #  'cache_hits'}

  `compile_s` is the backend's time for every program made inside the block: XLA's compile on
  a cache miss, reading and loading the executable on a hit (`cache_read_s` is the hit's share).
  On XLA:CPU a hit on a large program is far from free (jax 0.10.2: SmolLM2's `rl_step` read
  back in 9.2 s against a 22.8 s compile, 17.6 s beside another compile job), so `cache_hits`
  alone does not say how much time was saved; docs/research/compile-cache.md (the first-step
  ratio to tunix and TRL) has the numbers. Events of other threads in the same process are counted too.
  """

  def __init__(self):
    self._totals = dict.fromkeys(list(_DURATIONS.values()) + list(_COUNTS.values()), 0.0)
    self._active = False

  def _on_duration(self, event: str, seconds: float, **kwargs) -> None:
    del kwargs
    if event in _DURATIONS:
      self._totals[_DURATIONS[event]] += float(seconds)

  def _on_event(self, event: str, **kwargs) -> None:
    del kwargs
    if event in _COUNTS:
      self._totals[_COUNTS[event]] += 1

  def start(self) -> "CompileStats":
    """Starts counting (no-op when already counting)."""
    if not self._active:
      jax.monitoring.register_event_duration_secs_listener(self._on_duration)
      jax.monitoring.register_event_listener(self._on_event)
      self._active = True
    return self

  def stop(self) -> None:
    """Stops counting (no-op when not counting); the totals stay."""
    if self._active:
      jax.monitoring.unregister_event_duration_listener(self._on_duration)
      jax.monitoring.unregister_event_listener(self._on_event)
      self._active = False

  def __enter__(self) -> "CompileStats":
    return self.start()

  def __exit__(self, *exc) -> None:
    self.stop()

  def as_dict(self) -> dict[str, float]:
    """Seconds rounded to ms; counts as ints."""
    return {k: (int(v) if k in _COUNTS.values() else round(v, 3))
            for k, v in self._totals.items()}
