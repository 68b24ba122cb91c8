"""colab/*.ipynb: every code cell not tagged `colab-only` runs, in order, in one namespace, and
what each notebook computes is checked (quickstart, tree explorer, ablation)."""

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


# XLA optimizations off (`fast_compiles`): the notebooks' runs use tiny models, whose time is mostly
# compiling; what is checked (structure, bounds, equalities within a run) does not depend on it.
@pytest.mark.usefixtures("fast_compiles")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs(path, tmp_path, monkeypatch):
  matplotlib.use("Agg")
  monkeypatch.chdir(ROOT)
  monkeypatch.setenv("RL_JAX_WORKDIR", str(tmp_path / "run"))
  monkeypatch.setenv("RL_JAX_SWEEP", str(tmp_path / "no_sweep" / "*"))  # the ablation's own sweep
  monkeypatch.delenv("RL_JAX_RUN", raising=False)
  monkeypatch.delenv("RL_JAX_SOURCE", raising=False)
  namespace = {"__name__": "__notebook__"}
  for src in code_cells(path):
    exec(compile(src, path, "exec"), namespace)  # pylint: disable=exec-used
  name = os.path.basename(path)
  if name == "quickstart.ipynb":  # the experiment ran to its summary
    summary = namespace["summary"]
    assert 0.0 <= summary["rl_accuracy"] <= 1.0 and summary["rl_steps"] > 0
    assert os.path.exists(tmp_path / "run" / "curves.png")
    # The install cell: it found this clone, and installs a clone, a wheel or a requirement.
    assert namespace["find_clone"](os.path.join(ROOT, "colab")) == ROOT
    args = namespace["install_args"]
    assert args(ROOT)[-2:] == ["-e", ROOT] and args(ROOT, "gpu")[-1] == f"{ROOT}[gpu]"
    assert args("dist/rl_jax-0.1.0-py3-none-any.whl", "tpu")[-1] == (
        "dist/rl_jax-0.1.0-py3-none-any.whl[tpu]")
    assert args("git+https://example.org/r.git", "gpu")[-1] == (
        "rl_jax[gpu] @ git+https://example.org/r.git")
  elif name == "tree_explorer.ipynb":  # every leaf is under the root; values are mean rewards
    nodes, leaves = namespace["nodes"], namespace["options"].leaves
    assert nodes[0]["leaves"] == leaves == len(namespace["rewards"])
    assert all(d["parent"] in nodes and 0.0 <= d["value"] <= 1.0 for d in nodes.values())
    assert sum(d["leaves"] for n, d in nodes.items() if n and d["parent"] == 0) == leaves
    assert nodes[0]["value"] == namespace["rewards"].mean()
  elif name == "ablation.ipynb":  # two variants of two seeds, each with a curve over tokens
    runs = namespace["runs"]
    assert sorted((r["variant"], r["seed"]) for r in runs) == [
        ("grpo", 0), ("grpo", 1), ("rloo", 0), ("rloo", 1)]
    assert all(len(r["curve"]) >= 2 and r["curve"][-1][1] > 0 for r in runs)


def _cells(path, kind):
  with open(path) as f:
    return ["".join(c["source"]) for c in json.load(f)["cells"] if c["cell_type"] == kind]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_opens_in_colab_installs_itself_and_documents_its_settings(path):
  """An 'Open in Colab' link to this notebook; the first code cell is the install cell with the
  repository URL in one variable at its top; every RL_JAX_* variable it reads is documented."""
  import re  # pylint: disable=g-import-not-at-top
  name = os.path.basename(path)
  intro = _cells(path, "markdown")[0]
  assert "colab-badge.svg" in intro
  assert re.search(r"https://colab\.research\.google\.com/github/[^)\s]+/blob/[^)\s]+/colab/"
                   + re.escape(name), intro)
  install = code_cells(path)[0]
  settings = [l for l in install.splitlines() if l.strip() and not l.startswith("#")]
  assert settings[0].startswith("REPO_URL = "), settings[:2]
  docs = "\n".join(_cells(path, "markdown")) + install
  for var in set(re.findall(r"RL_JAX_\w+", "\n".join(code_cells(path)))):
    assert f"`{var}`" in docs or f"{var}:" in docs or f"variable {var}" in docs, (name, var)


def test_install_cell_clones_the_repository_on_a_fresh_runtime(tmp_path, monkeypatch):
  """The install cell run outside any clone with REPO_URL set (here: this checkout) clones it
  and puts the clone on sys.path (rl_jax is importable already, so pip is not called)."""
  monkeypatch.chdir(tmp_path)
  monkeypatch.delenv("RL_JAX_SOURCE", raising=False)
  monkeypatch.setattr("sys.path", list(__import__("sys").path))
  install = code_cells(os.path.join(ROOT, "colab", "quickstart.ipynb"))[0]
  install = install.replace('REPO_URL = ""', f"REPO_URL = {ROOT!r}", 1)
  namespace = {"__name__": "__notebook__"}
  exec(compile(install, "install", "exec"), namespace)  # pylint: disable=exec-used
  clone = str(tmp_path / "rl_jax")
  assert namespace["SOURCE"] == clone and os.path.isfile(os.path.join(clone, "setup.py"))
  assert clone in __import__("sys").path
