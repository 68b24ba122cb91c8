"""The XLA flags conftest.py sets for the suite reach XLA: every one is an `--xla_...` flag (XLA
stops reading XLA_FLAGS at the first token that is not one)."""

from __future__ import annotations

import os

import jax

import conftest  # tests/conftest.py


def test_every_suite_flag_is_an_xla_flag_and_in_the_environment():
  flags = os.environ["XLA_FLAGS"].split()
  assert all(f.startswith("--xla_") for f in flags), flags
  suite = (conftest._DEVICE_FLAG,) + conftest._THREAD_FLAGS + conftest._COMPILE_FLAGS  # pylint: disable=protected-access
  for flag in suite:
    assert any(f.split("=")[0] == flag.split("=")[0] for f in flags), (flag, flags)


def test_the_device_count_flag_acts():
  assert jax.device_count() == 8
