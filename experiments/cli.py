"""What the `experiments.*` entry points share: one-line errors, a quiet CPU, the config list.

    if __name__ == "__main__":
      cli.run(main)

* Errors: a bad flag, a mistyped `--config.x` field, a missing config file, a bad config value, a
  bad work dir and any exception the command raises are printed as ONE line on stderr,
  `error: ...`, with exit status 2 (flags) or 1 (the rest). `--debug` or the environment
  variable `RL_JAX_DEBUG=1` shows the traceback instead.
* Platforms: `rl_jax.platforms.quiet_default()` before JAX starts (no TPU start-up errors on a
  machine without TPU chips when libtpu is installed).
* `configs_help()`: the shipped configs (`experiments/configs/*.py`) and their docstrings' first
  lines, for `--help`.
"""

from __future__ import annotations

import ast
import glob
import os
import re
import sys
from typing import Callable

from absl import app, flags, logging

from rl_jax import platforms

DEBUG_ENV = "RL_JAX_DEBUG"
CONFIGS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
_NOT_CONFIGS = ("__init__.py", "common.py")

flags.DEFINE_bool("debug", False, f"Show the traceback of an error (also {DEBUG_ENV}=1).")


def debug() -> bool:
  """`--debug` on the command line or RL_JAX_DEBUG=1 (known before flags are parsed)."""
  return (os.environ.get(DEBUG_ENV, "") not in ("", "0")
          or any(a in ("--debug", "--debug=true", "--debug=True") for a in sys.argv[1:]))


def one_line(e: BaseException) -> str:
  """An exception as one line: its message with newlines folded; the type named unless it is an
  error of the user's input (ValueError, OSError, KeyError, flag errors)."""
  text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
  text = " ".join(str(text).split())
  if isinstance(e, (ValueError, OSError, KeyError, flags.Error, app.UsageError)):
    return text or type(e).__name__
  return f"{type(e).__name__}: {text} ({DEBUG_ENV}=1 shows the traceback)"


def start(argv, quiet: bool = True) -> None:
  """What an entry point's `main` does first: no positional arguments (a usage error naming
  them) and, when `quiet`, absl's INFO lines off unless `--verbosity` is given."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if quiet and not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)


def fail(message: str, status: int = 1):
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(status)


def configs_help() -> str:
  """The shipped configs, one line each (`FILE: first docstring line`)."""
  lines = ["", "Shipped configs (--config=FILE[:variant]; add --print_config to list the fields "
           "a config holds, with overrides applied):"]
  for path in sorted(glob.glob(os.path.join(CONFIGS_DIR, "*.py"))):
    if os.path.basename(path) in _NOT_CONFIGS:
      continue
    with open(path) as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ""
    summary = doc.strip().splitlines()[0] if doc.strip() else ""
    lines.append(f"  experiments/configs/{os.path.basename(path)}: {summary}")
  return "\n".join(lines) + "\n"


def _config_path(argv) -> str | None:
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      return a.split("=", 1)[1]
    if a == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _flag_error(e: BaseException, argv) -> str:
  """A flag-parsing error as one line; a mistyped `--config.a.b` field is named with the
  closest field ml_collections suggests."""
  raw = str(e.args[0] if e.args else e)
  if "Traceback (most recent call last)" in raw:  # A config file raised: keep its last line.
    head = raw.split("Traceback (most recent call last)")[0]
    raw = f"{head} {[l for l in raw.splitlines() if l.strip()][-1].strip()}"
  text = " ".join(raw.split())
  m = re.search(r"'(\w+)'.*Did you mean \"(\w+)\"", text.replace("\\'", "'"))
  if m:
    bad, good = m.groups()
    for a in argv:
      if a.startswith("--config.") and re.search(rf"\.{bad}(=|\.|$)", a.split("=", 1)[0]):
        return f"{a}: the config has no field {bad!r}; did you mean {good!r}?"
    return f"the config has no field {bad!r}; did you mean {good!r}?"
  if isinstance(e, (KeyError, AttributeError)):
    bad = [a for a in argv if a.startswith("--config.")]
    return f"unknown config field {text} (overrides: {' '.join(bad)})"
  return text


def _parse(argv):
  config = _config_path(argv)
  if config is not None:
    path = config.split(":", 1)[0]
    if not os.path.isfile(path):
      fail(f"--config={config}: no such file {path!r}; the shipped configs are "
           f"{sorted(os.path.relpath(p) for p in _shipped())} (--help describes them)", 2)
  try:
    return flags.FLAGS(argv)
  except Exception as e:  # pylint: disable=broad-except (every flag error becomes one line)
    if debug():
      raise
    fail(_flag_error(e, argv), 2)


def _shipped():
  return [p for p in glob.glob(os.path.join(CONFIGS_DIR, "*.py"))
          if os.path.basename(p) not in _NOT_CONFIGS]


def config_value(config_flag):
  """`config_flag.value`, with a config file that failed to load (it raised) reported as one
  line naming the file and the cause."""
  try:
    return config_flag.value
  except OSError as e:
    if debug():
      raise
    cause = e.__cause__ or e.__context__ or e
    fail(f"--config={flags.FLAGS['config'].serialize().split('=', 1)[-1]}: "
         f"{one_line(cause) if cause is not e else one_line(e)}")


def run_config(config_flag, workdir: str):
  """The config of the run in `workdir` (its run_config.json). A `--config` given as well must
  agree with it on every results-affecting field (`rl_jax.fingerprint`); without a stored
  config (a run older than run_config.json, or `--phase=init` of a new dir) `--config` is used.
  """
  # pylint: disable=g-import-not-at-top (run.py does not need the eval stack)
  from rl_jax import fingerprint
  from rl_jax import workdir as workdir_lib
  given = config_value(config_flag) if flags.FLAGS[config_flag.name].present else None
  if not os.path.isfile(os.path.join(workdir, workdir_lib.RUN_CONFIG_FILE)):
    return given if given is not None else workdir_lib.load_config(workdir)
  stored = workdir_lib.load_config(workdir)
  if given is None:
    return stored
  fingerprint.check(workdir, given, stored.to_dict(), what="--config")
  return given


def warn(message: str) -> None:
  print(f"warning: {message}", file=sys.stderr, flush=True)


def run(main: Callable, required: tuple[str, ...] = ()) -> None:
  """`app.run(main)` with one-line errors (module docstring) and the quiet CPU default.

  `required` names the flags the command cannot run without. They are marked here, when the
  module runs as a command, not at import: a module imported beside another (a test, a sweep
  driver) must not make a later `flags.FLAGS(argv)` in the same process fail on a flag it never
  used.
  """
  if required:
    flags.mark_flags_as_required(list(required))
  platforms.quiet_default()

  def wrapped(argv):
    try:
      return main(argv)
    except (SystemExit, KeyboardInterrupt):
      raise
    except Exception as e:  # pylint: disable=broad-except (one line unless --debug)
      if debug():
        raise
      fail(one_line(e) + (" (--help lists the flags)" if isinstance(e, app.UsageError) else ""))

  app.run(wrapped, flags_parser=_parse)
