"""colab/*.ipynb: every code cell not tagged `colab-only` runs, in order, in one namespace."""

import glob
import json
import os

import matplotlib
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "colab", "*.ipynb")))


def code_cells(path: str) -> list[str]:
  """Sources of the code cells the tests run; a shell or magic line outside `colab-only` cells
  is an error (exec cannot run it)."""
  with open(path) as f:
    nb = json.load(f)
  if nb.get("nbformat") != 4:
    raise ValueError(f"{path}: nbformat {nb.get('nbformat')!r}, expected 4")
  out = []
  for i, cell in enumerate(nb["cells"]):
    if cell["cell_type"] != "code" or "colab-only" in cell["metadata"].get("tags", []):
      continue
    src = "".join(cell["source"])
    for line in src.splitlines():
      if line.lstrip().startswith(("!", "%")):
        raise ValueError(f"{path}: cell {i} has a shell/magic line {line!r}; tag the cell "
                         "'colab-only' or write it in Python")
    out.append(src)
  return out


def test_there_is_a_notebook():
  assert NOTEBOOKS, "colab/ has no notebooks"


def test_magic_lines_outside_colab_only_cells_are_an_error(tmp_path):
  nb = {"nbformat": 4, "cells": [{"cell_type": "code", "metadata": {}, "source": ["!ls\n"]}]}
  path = tmp_path / "bad.ipynb"
  path.write_text(json.dumps(nb))
  with pytest.raises(ValueError, match="colab-only"):
    code_cells(str(path))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs(path, tmp_path, monkeypatch):
  matplotlib.use("Agg")
  monkeypatch.chdir(ROOT)
  monkeypatch.setenv("RL_JAX_WORKDIR", str(tmp_path / "run"))
  namespace = {"__name__": "__notebook__"}
  for src in code_cells(path):
    exec(compile(src, path, "exec"), namespace)  # pylint: disable=exec-used
  if "summary" in namespace:  # the quickstart: the experiment ran to its summary
    summary = namespace["summary"]
    assert 0.0 <= summary["rl_accuracy"] <= 1.0 and summary["rl_steps"] > 0
    assert os.path.exists(tmp_path / "run" / "curves.png")
