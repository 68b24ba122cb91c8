"""Metrics: a JSONL + TensorBoard writer, a progress bar and training-curve plots.

`workdir/metrics.jsonl` is the source of truth: one JSON object per line,
`{"step": int, "phase": str, <metric>: number, ..., "time": unix seconds}`.
TensorBoard scalars go to `workdir/tb/` under the tag `f"{phase}/{name}"`.

Example::

    writer = MetricsWriter(workdir)
    writer.truncate("rl", after_step=resumed_step)  # drop records a crash left
    writer.write(step, {"reward_mean": 0.4}, phase="rl")
    writer.close()
    plot_curves(workdir)  # -> workdir/curves.png
"""

from __future__ import annotations

import json
import numbers
import os
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Mapping

import numpy as np
import tqdm
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rl_jax import workdir as workdir_lib

TB_DIR = "tb"
_RESERVED = ("step", "phase", "time")
_PHASE_ORDER = {"sft": 0, "rl": 1, "sft_more": 2}


def _summary_writer_class() -> type:
  """tensorboardX's `SummaryWriter`, imported without PyTorch.

  tensorboardX's writer module imports torch whenever torch is installed (only to accept torch
  tensors, which we never pass; the test and hf extras install torch), and that import was
  about 2.8 s of every run's start on a 2-core CPU. Marking torch absent in `sys.modules` for
  the one import (Python's documented way to make an import raise ImportError) takes
  tensorboardX's own no-torch path; the mark is removed at once, so torch stays importable.
  A process that has already imported torch or tensorboardX imports it as usual.
  """
  if "torch" in sys.modules or "tensorboardX" in sys.modules:
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
    return SummaryWriter
  sys.modules["torch"] = None  # type: ignore[assignment]
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
  finally:
    del sys.modules["torch"]
  return SummaryWriter


def _scalar(name: str, value: Any) -> int | float:
  """Turns a Python/NumPy/JAX scalar into a JSON-ready int or float."""
  array = np.asarray(value)
  if array.size != 1:
    raise ValueError(f"metric {name!r} must be a scalar, got shape {array.shape}")
  item = array.reshape(()).item()
  if isinstance(item, numbers.Integral) and not isinstance(item, bool):
    return int(item)
  return float(item)


class MetricsWriter:
  """Appends metrics to `workdir/metrics.jsonl` and TensorBoard (`workdir/tb/`).

  Every `write` is flushed to disk, so a crash loses at most the record being
  written. On multi-host runs construct it with `enabled=(jax.process_index() == 0)`;
  a disabled writer does nothing.
  """

  def __init__(self, workdir: str | os.PathLike, *, enabled: bool = True,
               on_write: Callable[[], None] | None = None):
    self.workdir = os.fspath(workdir)
    self.path = os.path.join(self.workdir, workdir_lib.METRICS_FILE)
    self.enabled = enabled
    self._on_write = on_write  # Called after every record (the run's wall-clock ledger).
    self._tb = None
    if enabled:
      os.makedirs(self.workdir, exist_ok=True)
      self._tb = _summary_writer_class()(logdir=os.path.join(self.workdir, TB_DIR))

  def write(self, step: int, metrics: Mapping[str, Any], phase: str) -> None:
    """Records `metrics` at `step` of `phase` (e.g. 'sft', 'rl', 'eval')."""
    if not self.enabled:
      return
    clash = [k for k in metrics if k in _RESERVED]
    if clash:
      raise ValueError(f"metric names {clash} are reserved ({_RESERVED})")
    values = {k: _scalar(k, v) for k, v in metrics.items()}
    record = {"step": int(step), "phase": phase, **values, "time": time.time()}
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps(record) + "\n")
    for name, value in values.items():
      self._tb.add_scalar(f"{phase}/{name}", value, global_step=int(step))
    self._tb.flush()
    if self._on_write is not None:
      self._on_write()

  def truncate(self, phase: str, after_step: int) -> int:
    """Drops records of `phase` with step > `after_step`; returns how many.

    Call it when resuming from a checkpoint at `after_step`, so steps a crashed
    run logged after its last checkpoint are not duplicated. The file is
    rewritten atomically (temp file + `os.replace`). TensorBoard event files
    are append-only and are left as they are.
    """
    if not self.enabled or not os.path.exists(self.path):
      return 0
    records = read_metrics(self.workdir)
    kept = [r for r in records
            if not (r.get("phase") == phase and r.get("step", 0) > after_step)]
    fd, tmp = tempfile.mkstemp(dir=self.workdir, prefix=workdir_lib.METRICS_FILE + ".")
    try:
      with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in kept)
        f.flush()
        os.fsync(f.fileno())
      os.replace(tmp, self.path)
    except BaseException:
      os.unlink(tmp)
      raise
    return len(records) - len(kept)

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
      self._tb = None

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def read_metrics(workdir: str | os.PathLike) -> list[dict]:
  """Reads `workdir/metrics.jsonl` into a list of records, in file order.

  A torn last line (a crash in the middle of a write) is skipped with a warning.
  """
  path = os.path.join(os.fspath(workdir), workdir_lib.METRICS_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no metrics file at {path}")
  with open(path, encoding="utf-8") as f:
    lines = [line for line in f.read().split("\n") if line.strip()]
  records = []
  for i, line in enumerate(lines):
    try:
      records.append(json.loads(line))
    except json.JSONDecodeError:
      if i != len(lines) - 1:
        raise ValueError(f"{path}: line {i + 1} is not JSON: {line[:80]!r}")
      warnings.warn(f"{path}: skipping a torn last line {line[:80]!r}")
  return records


def _series(records: list[dict], phase: str | None, key: str):
  """(steps, values) of `key`, for one phase or (phase=None) any phase."""
  points = sorted((r["step"], r[key]) for r in records
                  if key in r and (phase is None or r.get("phase") == phase))
  return [s for s, _ in points], [v for _, v in points]


def plot_curves(workdir: str | os.PathLike, out_png: str = "curves.png",
                starts: Mapping[str, Mapping[str, float]] | None = None) -> str:
  """Plots training curves from `workdir/metrics.jsonl`; returns the PNG path.

  Panels, each drawn only when its metrics exist: RL train reward (`rl` /
  `reward_mean`), one held-out panel per phase (`heldout_accuracy`,
  `heldout_sampled_accuracy`, `heldout_step_error_rate` against that phase's own
  steps), and SFT loss (`sft` / `loss`). `starts`: {phase: {metric: value}} of a phase's step 0
  (RL's is the SFT policy's evaluation), drawn at step 0 of that phase's held-out panel. A
  relative `out_png` is taken inside `workdir`. Uses
  matplotlib's object API with the Agg canvas, so no GUI backend or global
  `matplotlib.use` is involved (safe in notebooks).
  """
  workdir = os.fspath(workdir)
  panels = curve_panels(read_metrics(workdir), starts)
  fig = Figure(figsize=(5 * max(len(panels), 1), 3.6), layout="constrained")
  FigureCanvasAgg(fig)
  if not panels:
    fig.text(0.5, 0.5, "no curves to plot yet", ha="center", va="center")
  axes = fig.subplots(1, len(panels), squeeze=False)[0] if panels else []
  for ax, (title, ylabel, lines) in zip(axes, panels):
    for label, steps, values in lines:
      ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=label)
    ax.set(title=title, xlabel="step", ylabel=ylabel)
    ax.grid(alpha=0.3)
    if len(lines) > 1:
      ax.legend(fontsize="small")
  out = os.path.join(workdir, out_png)
  fig.savefig(out, dpi=100)
  return out


def curve_panels(records: list[dict], starts: Mapping[str, Mapping[str, float]] | None = None
                 ) -> list[tuple[str, str, list]]:
  """The panels `plot_curves` draws: (title, y label, [(label, steps, values), ...])."""
  starts = starts or {}
  panels = []
  steps, values = _series(records, "rl", "reward_mean")
  if steps:
    panels.append(("RL train reward", "reward_mean", [("rl", steps, values)]))
  # One held-out panel per phase: each phase counts its own steps from 1, so SFT's and RL's
  # curves on one step axis would overlap.
  keys = ("heldout_accuracy", "heldout_sampled_accuracy", "heldout_step_error_rate")
  for phase in sorted({r.get("phase") for r in records if any(k in r for k in keys)},
                      key=lambda p: (_PHASE_ORDER.get(p, len(_PHASE_ORDER)), p)):
    lines = [(key, *_series(records, phase, key)) for key in keys]
    lines = [line for line in lines if line[1]]
    start = starts.get(phase, {})
    lines = [(key, [0] + steps, [start[key]] + values) if key in start and steps[0] != 0
             else (key, steps, values) for key, steps, values in lines]
    panels.append((f"Held-out, {phase} steps", "accuracy / rate", lines))
  steps, values = _series(records, "sft", "loss")
  if steps:
    panels.append(("SFT loss", "loss", [("sft", steps, values)]))
  return panels


def _isatty(stream) -> bool:
  try:
    return stream.isatty()
  except (AttributeError, ValueError):
    return False


class ProgressBar:
  """Progress on stderr: `bar.update(1, loss=0.3)`.

  On a terminal, a tqdm bar. Otherwise (a log file, a pipe, a notebook's captured stderr) one
  plain line every `every` steps and at the last step (`rl 50/200 (25%) loss=0.31 12.3s`), so a
  log holds a few lines instead of a carriage-return stream; `every` 0 = about 20 lines a phase.
  """

  def __init__(self, total: int | None, desc: str = "", initial: int = 0,
               disable: bool = False, every: int = 0, stream=None):
    stream = sys.stderr if stream is None else stream
    self._lines = not disable and not _isatty(stream)
    self._stream, self._desc, self._total, self._n = stream, desc, total, initial
    self._every = every or max(1, (total or 20) // 20)
    self._postfix: dict = {}
    self._t0 = time.monotonic()
    self._bar = None if self._lines else tqdm.tqdm(
        total=total, desc=desc, initial=initial, file=stream, disable=disable,
        dynamic_ncols=True)

  def update(self, n: int = 1, **postfix: Any) -> None:
    """Advances by `n` steps and shows `postfix` (numbers, arrays or strings)."""
    shown = {k: v if isinstance(v, str) else f"{_scalar(k, v):.4g}" for k, v in postfix.items()}
    if self._bar is not None:
      if shown:
        self._bar.set_postfix(shown, refresh=False)
      self._bar.update(n)
      return
    if not self._lines:
      return
    before, self._n = self._n, self._n + n
    self._postfix.update(shown)
    if self._n // self._every > before // self._every or self._n == self._total:
      total = f"/{self._total} ({100 * self._n / self._total:.0f}%)" if self._total else ""
      extra = "".join(f" {k}={v}" for k, v in self._postfix.items())
      print(f"{self._desc} {self._n}{total}{extra} {time.monotonic() - self._t0:.1f}s",
            file=self._stream, flush=True)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()

  def __enter__(self) -> ProgressBar:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
