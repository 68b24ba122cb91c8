"""Pre-registration files: a sweep's comparisons, written and committed before its runs.

A pre-registration (`experiments/preregistrations/NAME.json`) declares the study's rows (config
overrides), base config, metric and split, SFT draws and RL seeds, stopping rule, analysis and
the comparisons it will judge (`id`, `method`, `baseline`, `direction`). `load` checks the file
and raises a one-line error naming the field; `registration` finds the commit that added the
file and the last commit that changed it, so a report can print both and show that the file
did not change after the runs began (docs/research/index.md lists the studies).
"""

from __future__ import annotations

import json
import os
import subprocess

REQUIRED = ("study", "question", "registered", "base_config", "metric", "split", "rows",
            "sft_draws", "rl_seeds", "min_sft_draws", "stopping_rule", "analysis",
            "comparisons")
DIRECTIONS = ("greater", "less", "two-sided")


def load(path: str) -> dict:
  """The pre-registration at `path`, checked.

  Raises:
    FileNotFoundError: no such file.
    ValueError: one line naming the file and the field that is missing or malformed.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(f"--prereg={path!r}: no such file")
  with open(path) as f:
    try:
      data = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
  missing = [k for k in REQUIRED if k not in data]
  if missing:
    raise ValueError(f"{path}: missing field(s) {missing}; expected all of {list(REQUIRED)}")
  rows = data["rows"]
  if not isinstance(rows, dict) or not rows:
    raise ValueError(f"{path}: 'rows' must map row names to config overrides")
  for key in ("sft_draws", "rl_seeds"):
    v = data[key]
    if not (isinstance(v, list) and v and all(isinstance(x, int) and x >= 0 for x in v)
            and len(set(v)) == len(v)):
      raise ValueError(f"{path}: {key!r}={v!r}: expected a list of distinct integers >= 0")
  if not 1 <= data["min_sft_draws"] <= len(data["sft_draws"]):
    raise ValueError(f"{path}: min_sft_draws={data['min_sft_draws']!r}: expected 1 to "
                     f"{len(data['sft_draws'])} (the number of sft_draws)")
  ids = set()
  for i, c in enumerate(data["comparisons"]):
    for k in ("id", "method", "baseline", "direction"):
      if k not in c:
        raise ValueError(f"{path}: comparisons[{i}] has no {k!r}")
    if c["id"] in ids:
      raise ValueError(f"{path}: comparisons[{i}]: id {c['id']!r} is used twice")
    ids.add(c["id"])
    for k in ("method", "baseline"):
      if c[k] not in rows:
        raise ValueError(f"{path}: comparisons[{i}].{k}={c[k]!r} is not a row; expected one "
                         f"of {sorted(rows)}")
    if c["direction"] not in DIRECTIONS:
      raise ValueError(f"{path}: comparisons[{i}].direction={c['direction']!r}: expected one "
                       f"of {list(DIRECTIONS)}")
  for i, s in enumerate(data.get("shares", ())):
    for k in ("method", "oracle", "baseline"):
      if s.get(k) not in rows:
        raise ValueError(f"{path}: shares[{i}].{k}={s.get(k)!r} is not a row; expected one of "
                         f"{sorted(rows)}")
  return data


def _git(path: str, *args: str) -> str:
  out = subprocess.run(["git", *args], cwd=os.path.dirname(os.path.abspath(path)),
                       capture_output=True, text=True)
  return out.stdout.strip() if out.returncode == 0 else ""


def registration(path: str) -> dict:
  """{'added': (commit, ISO date), 'changed': (commit, ISO date)} of the file's first and last
  commits, or None for each where git knows none (an uncommitted file, no repository)."""
  name = os.path.basename(path)
  log = _git(path, "log", "--follow", "--format=%H %cI", "--", name).splitlines()
  if not log:
    return dict(added=None, changed=None)
  return dict(added=tuple(log[-1].split()), changed=tuple(log[0].split()))


def is_ancestor(path: str, commit: str, of: str) -> bool | None:
  """Whether `commit` is `of` or an ancestor of it (None where git cannot tell)."""
  out = subprocess.run(["git", "merge-base", "--is-ancestor", commit, of],
                       cwd=os.path.dirname(os.path.abspath(path)), capture_output=True)
  return {0: True, 1: False}.get(out.returncode)
