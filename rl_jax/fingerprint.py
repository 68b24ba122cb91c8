"""A work dir belongs to one configuration: the fingerprint of a config's results-affecting fields.

The first run in a work dir records its fields in `WORKDIR/config_fingerprint.json` (`record`);
every later run there (a resume) must have the same values (`mismatch` names the fields that
differ), so checkpoints are never continued under settings they were not trained with.
`experiments.eval` / `export` read the run's own config and refuse a `--config` that differs.

One change is a continuation, not another configuration: more RL steps (`rl.steps` raised) when
the steps the run has taken do not depend on the total (`continuation`): a constant learning rate
after a warmup the run has finished, and a more-SFT control whose steps are not derived from
`rl.steps`. The longer run's first steps are then the shorter run's, so the work dir's run goes on
from its last checkpoint (`train.loop` recomputes the final evaluations and records the new
fields).

`IGNORED` lists the fields that cannot change a run's results and may differ between runs of one
work dir; every other field counts. Keep it explicit: a field belongs here only if a resumed
run with another value reproduces the same metrics and checkpoints (`model.scan_layers`: up to
float32 rounding).

Pure functions over ConfigDicts / dicts, plus the two small file helpers at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Mapping, Optional

FINGERPRINT_FILE = "config_fingerprint.json"

# Fields (paths from the config root; a path covers its sub-fields) that do not change results.
IGNORED = (
    "progress",                   # progress bar or log lines
    "interrupt_at",               # a test hook: stop after a step (the re-run resumes it)
    "compile_cache_dir",          # where compiled programs are cached
    "compile_cache_min_seconds",
    "compile_cache_max_gb",
    "checkpoint.every",           # a resumed run reproduces the uninterrupted one
    "checkpoint.max_to_keep",
    "rl.reward_max_logged",       # how many reward errors are logged
    "rl.reward_max_failed_steps",  # when broken rewards stop a run (a finished run is the same)
    "data.worker_count",          # grain reader processes / threads: same order of examples
    "data.read_threads",
    "aot.prompt_len",             # experiments.aot only
    # The decoder's parameter layout: scanned == unrolled up to float32 rounding, and checkpoints
    # convert on restore (tests/train/test_scan_layers_resume.py), so a run may switch it.
    "model.scan_layers",
)


def _ignored(path: str) -> bool:
  return any(path == p or path.startswith(p + ".") for p in IGNORED)


def flatten(config: Any, prefix: str = "") -> dict[str, str]:
  """Nested ConfigDict / dict -> {'rl.optim.lr': canonical JSON of the value} (leaves only;
  tuples and lists compare alike, NaN equals NaN)."""
  if hasattr(config, "to_dict"):
    config = config.to_dict()
  out = {}
  for key, value in config.items():
    path = f"{prefix}{key}"
    if hasattr(value, "to_dict"):
      value = value.to_dict()
    if isinstance(value, Mapping) and value:
      out.update(flatten(value, path + "."))
    else:
      out[path] = json.dumps(value, sort_keys=True, default=str)
  return out


def results_fields(config: Any) -> dict[str, str]:
  """`flatten(config)` without the `IGNORED` fields."""
  return {k: v for k, v in flatten(config).items() if not _ignored(k)}


def fingerprint(fields: Mapping[str, str]) -> str:
  """SHA-256 of the results-affecting fields (from `results_fields`)."""
  return hashlib.sha256(json.dumps(dict(fields), sort_keys=True).encode()).hexdigest()


def diff(stored: Mapping[str, str], current: Mapping[str, str]) -> list[tuple[str, str, str]]:
  """(path, stored value, current value) for each field both hold with different values.

  A field only one side holds (a field added or removed by a newer version of the code) is not
  compared: it was not a choice of either run. Nor are the RL fields (`rl.*`) of an SFT-only run
  (`rl.steps` 0 on both sides, a sweep's shared SFT): no RL step reads them."""
  sft_only = stored.get("rl.steps") == current.get("rl.steps") == "0"
  return [(k, stored[k], current[k]) for k in sorted(stored.keys() & current.keys())
          if stored[k] != current[k] and not (sft_only and k.startswith("rl."))]


def describe(changes: list[tuple[str, str, str]], limit: int = 8) -> str:
  """`config.rl.optim.lr: 0.0001 -> 0.0005, config.rl.kl_coef: 0.02 -> 0.0` (one line)."""
  parts = [f"config.{k}: {a} -> {b}" for k, a, b in changes[:limit]]
  if len(changes) > limit:
    parts.append(f"... ({len(changes) - limit} more)")
  return ", ".join(parts)


def _int(fields: Mapping[str, str], path: str, default: int = 0) -> int:
  try:
    return int(json.loads(fields.get(path, str(default))))
  except (TypeError, ValueError):
    return default


def continuation(stored: Mapping[str, str], current: Mapping[str, str]) -> tuple[
    Optional[tuple[int, int]], str]:
  """((old, new) RL steps, '') when `current` continues the run `stored` records to more RL steps
  (module docstring); (None, why not) when `rl.steps` differs but the change is not a continuation;
  (None, '') when `rl.steps` is the same. Other fields are not compared here."""
  old, new = _int(stored, "rl.steps"), _int(current, "rl.steps")
  if "rl.steps" not in stored or "rl.steps" not in current or old == new:
    return None, ""
  if new < old:
    return None, "a run cannot be shortened (its later steps are taken)"
  if json.loads(current.get("rl.optim.schedule", '""')) != "constant":
    return None, ("the learning-rate schedule reads rl.steps (continuing needs "
                  "rl.optim.schedule='constant')")
  if _int(current, "rl.optim.warmup_steps") >= old * max(_int(current, "rl.num_iterations", 1), 1):
    return None, "the run ended inside its warmup, whose length reads rl.steps"
  if (json.loads(current.get("control.enabled", "false"))
      and not _int(current, "control.steps")):
    return None, "the more-SFT control's steps derive from rl.steps (set control.steps)"
  return (old, new), ""


class ConfigMismatch(ValueError):
  """A work dir holds a run of another configuration (the message names the fields)."""


def stored_fields(workdir: str, legacy_config: Optional[Mapping] = None) -> Optional[dict]:
  """The fields recorded in `workdir` (None: no record). `legacy_config`: the config a run made
  before fingerprints existed stored (its run_config.json), used when there is no record."""
  path = os.path.join(workdir, FINGERPRINT_FILE)
  if os.path.isfile(path):
    try:
      with open(path) as f:
        return json.load(f)["fields"]
    except (ValueError, KeyError) as e:
      raise ValueError(f"{path} is corrupt ({e}); delete it to adopt the current config") from e
  if legacy_config is not None:
    return results_fields(legacy_config)
  return None


def check(workdir: str, config: Any, legacy_config: Optional[Mapping] = None,
          what: str = "this run", continuable: bool = False) -> Optional[tuple[int, int]]:
  """Raises ConfigMismatch if `workdir` belongs to a configuration other than `config`.

  continuable: a run that goes on (`train.loop.run`): a raised `rl.steps` that is a
  `continuation` is accepted, and (old, new) steps are returned; else None."""
  stored = stored_fields(workdir, legacy_config)
  if stored is None:
    return None
  current = results_fields(config)
  changes = diff(stored, current)
  steps, why = continuation(stored, current) if continuable else (None, "")
  if steps is not None:
    changes = [c for c in changes if c[0] != "rl.steps"]
  if changes:
    raise ConfigMismatch(
        f"{workdir} holds a run of another configuration than {what}: {describe(changes)}"
        + (f" (not a continuation to more RL steps: {why})" if why else "")
        + "; use a new --workdir (fields that cannot change results may differ: "
        "rl_jax/fingerprint.py IGNORED)")
  return steps


def record(workdir: str, config: Any, replace: bool = False) -> None:
  """Writes `workdir`'s record of `config` unless one exists (the first run's config stays);
  `replace`: writes it anyway (a run continued to more RL steps records its new length)."""
  path = os.path.join(workdir, FINGERPRINT_FILE)
  if os.path.exists(path) and not replace:
    return
  fields = results_fields(config)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump({"fingerprint": fingerprint(fields), "fields": fields}, f, indent=1,
              sort_keys=True)
  os.replace(tmp, path)
