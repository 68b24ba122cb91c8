"""colab/*.ipynb: each notebook runs top to bottom in a fresh Jupyter kernel (nbclient, ipykernel
on this interpreter), install cell included, with its `colab-only` cells removed; what each
notebook computes is read back from the kernel and checked (quickstart, tree explorer, ablation)."""

import glob
import json
import os
import sys

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


# Per-notebook read-back: a cell appended to the in-memory notebook prints these values as one
# JSON line (after READBACK), evaluated in the notebook's kernel after its own cells.
READBACK = "@@rl_jax_notebook_values@@"
VALUES = {
    "quickstart.ipynb": "dict(summary=summary)",
    "tree_explorer.ipynb": """dict(
    nodes=sorted(nodes.items()), leaves=options.leaves, num_rewards=len(rewards),
    rewards_mean=float(rewards.mean()))""",
    "ablation.ipynb": "dict(runs=[dict(variant=r['variant'], seed=r['seed'], curve=r['curve']) "
                      "for r in runs])",
}


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory):
  """A kernelspec directory whose `python3` is ipykernel on this interpreter (sys.executable),
  whatever other `python3` kernelspecs the machine has (user or system Jupyter dirs)."""
  from ipykernel import kernelspec  # pylint: disable=g-import-not-at-top
  from jupyter_client import kernelspec as specs  # pylint: disable=g-import-not-at-top
  prefix = tmp_path_factory.mktemp("jupyter")
  kernelspec.install(kernel_name="python3", prefix=str(prefix))
  manager = specs.KernelSpecManager(kernel_dirs=[str(prefix / "share" / "jupyter" / "kernels")])
  assert manager.get_kernel_spec("python3").argv[0] == sys.executable
  return manager


def run_notebook(path, env, kernel_specs, timeout=600):  # pylint: disable=redefined-outer-name
  """Executes the notebook top to bottom in a fresh kernel, in ROOT, with `env` as its whole
  environment; `colab-only` cells are removed first. Returns VALUES[name] read back from it."""
  import nbclient  # pylint: disable=g-import-not-at-top
  import nbformat  # pylint: disable=g-import-not-at-top
  from jupyter_client import manager  # pylint: disable=g-import-not-at-top
  from jupyter_core.utils import run_sync  # pylint: disable=g-import-not-at-top
  with open(path) as f:
    nb = json.load(f)
  for i, cell in enumerate(nb["cells"]):  # nbformat 4.5 wants cell ids; the files carry none
    cell.setdefault("id", f"cell-{i}")
  nb = nbformat.reads(json.dumps(nb), as_version=4)
  nb.cells = [c for c in nb.cells if "colab-only" not in c.metadata.get("tags", [])]
  nb.cells.append(nbformat.v4.new_code_cell(
      f"import json as _json, sys as _sys, jax as _jax, rl_jax as _rl_jax\n"
      f"ROOT = {ROOT!r}\n"
      f"_values = {VALUES[os.path.basename(path)]}\n"
      f"_values['kernel'] = dict(executable=_sys.executable, rl_jax=_rl_jax.__file__,\n"
      f"    backend=_jax.default_backend(), devices=_jax.device_count(),\n"
      f"    no_optimizations=_jax.config.read('jax_disable_most_optimizations'))\n"
      f"print({READBACK!r} + _json.dumps(_values, default=float))"))
  km = manager.AsyncKernelManager(kernel_name="python3", kernel_spec_manager=kernel_specs)
  client = nbclient.NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3",
                                   resources={"metadata": {"path": ROOT}})
  try:
    client.execute(env=env)
  finally:  # nbclient shuts down only a kernel whose manager it made (`owns_km`)
    if km.has_kernel:
      run_sync(km.shutdown_kernel)(now=True)
  assert not run_sync(km.is_alive)()  # no kernel left running for the rest of the suite
  text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
  return json.loads(text.split(READBACK, 1)[1])


# XLA optimizations off (JAX_DISABLE_MOST_OPTIMIZATIONS, as `fast_compiles` does in-process): the
# notebooks' runs use tiny models, whose time is mostly compiling; what is checked (structure,
# bounds, equalities within a run) does not depend on it.
@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs(path, tmp_path, kernel_specs):  # pylint: disable=redefined-outer-name
  """Every cell, install cell included, runs top to bottom in a fresh Jupyter kernel (nbclient;
  ipykernel on this interpreter, in ROOT, where rl_jax is installed, so the install cell runs no
  pip). Cells tagged `colab-only` (Colab shell magics) are
  removed from the notebook before it runs. The kernel's environment: this process's (conftest's
  JAX_PLATFORMS=cpu and XLA_FLAGS), plus the work dirs, without RL_JAX_RUN/RL_JAX_SOURCE."""
  code_cells(path)  # no shell/magic line outside `colab-only` cells
  env = {k: v for k, v in os.environ.items() if k not in ("RL_JAX_RUN", "RL_JAX_SOURCE")}
  env.update(RL_JAX_WORKDIR=str(tmp_path / "run"),
             RL_JAX_SWEEP=str(tmp_path / "no_sweep" / "*"),  # the ablation's own sweep
             JAX_PLATFORMS="cpu", JAX_DISABLE_MOST_OPTIMIZATIONS="1")
  values = run_notebook(path, env, kernel_specs)
  kernel = values["kernel"]
  assert kernel["executable"] == sys.executable and kernel["backend"] == "cpu"
  assert kernel["rl_jax"].startswith(os.path.join(ROOT, "rl_jax"))  # this checkout's
  assert kernel["devices"] == 8 and kernel["no_optimizations"] is True  # conftest's XLA_FLAGS
  name = os.path.basename(path)
  if name == "quickstart.ipynb":  # the experiment ran to its summary
    summary = values["summary"]
    assert 0.0 <= summary["rl_accuracy"] <= 1.0 and summary["rl_steps"] > 0
    assert os.path.exists(tmp_path / "run" / "curves.png")
  elif name == "tree_explorer.ipynb":  # every leaf is under the root; values are mean rewards
    nodes, leaves = {n: d for n, d in values["nodes"]}, values["leaves"]
    assert nodes[0]["leaves"] == leaves == values["num_rewards"]
    assert all(d["parent"] in nodes and 0.0 <= d["value"] <= 1.0 for d in nodes.values())
    assert sum(d["leaves"] for n, d in nodes.items() if n and d["parent"] == 0) == leaves
    assert nodes[0]["value"] == values["rewards_mean"]
  elif name == "ablation.ipynb":  # two variants of two seeds, each with a curve over tokens
    runs = values["runs"]
    assert sorted((r["variant"], r["seed"]) for r in runs) == [
        ("grpo", 0), ("grpo", 1), ("rloo", 0), ("rloo", 1)]
    assert all(len(r["curve"]) >= 2 and r["curve"][-1][1] > 0 for r in runs)


def _cells(path, kind):
  with open(path) as f:
    return ["".join(c["source"]) for c in json.load(f)["cells"] if c["cell_type"] == kind]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_says_how_to_open_it_in_colab_and_documents_its_settings(path):
  """The first markdown cell says how to open the notebook in Colab from a copy of the repository
  (no URL with a placeholder owner); the first code cell is the install cell, with REPO_URL in
  its first line; every RL_JAX_* variable the code reads is documented."""
  import re  # pylint: disable=g-import-not-at-top
  name = os.path.basename(path)
  intro = _cells(path, "markdown")[0]
  assert "File > Open notebook > GitHub" in intro and f"`colab/{name}`" in intro
  text = "\n".join(_cells(path, "markdown") + _cells(path, "code"))
  assert "OWNER" not in text and not re.search(r"https?://\S*<", text)  # no placeholder URL
  install = code_cells(path)[0]
  settings = [l for l in install.splitlines() if l.strip() and not l.startswith("#")]
  assert settings[0].startswith("REPO_URL = "), settings[:2]
  docs = "\n".join(_cells(path, "markdown")) + install
  for var in set(re.findall(r"RL_JAX_\w+", "\n".join(code_cells(path)))):
    assert f"`{var}`" in docs or f"{var}:" in docs or f"variable {var}" in docs, (name, var)


def test_the_notebooks_share_one_install_cell():
  """The three install cells are the same text (tests/test_colab_install.py runs one of them)."""
  cells = {code_cells(path)[0] for path in NOTEBOOKS}
  assert len(cells) == 1, "the install cells differ; keep them one text"


def _run_install_cell(monkeypatch, installed, repo_url="", extra="", source=None):
  """Runs the install cell in this process with pip replaced by a recorder; `installed`: whether
  importlib.metadata finds the rl_jax distribution before pip runs. Returns pip's argv or None."""
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  calls = []
  version = importlib.metadata.version

  def fake_version(name):
    if name == "rl_jax" and not installed and not calls:
      raise importlib.metadata.PackageNotFoundError(name)
    return version(name)

  monkeypatch.setattr(importlib.metadata, "version", fake_version)
  monkeypatch.setattr(subprocess, "check_call", lambda argv: calls.append(argv))
  if source is None:
    monkeypatch.delenv("RL_JAX_SOURCE", raising=False)
  else:
    monkeypatch.setenv("RL_JAX_SOURCE", source)
  cell = code_cells(NOTEBOOKS[0])[0]
  cell = cell.replace('REPO_URL = ""', f"REPO_URL = {repo_url!r}", 1)
  cell = cell.replace('EXTRA = ""', f"EXTRA = {extra!r}", 1)
  exec(compile(cell, "install", "exec"), {"__name__": "__notebook__"})  # pylint: disable=exec-used
  assert len(calls) <= 1
  return calls[0] if calls else None


def test_install_cell_runs_no_pip_where_rl_jax_is_installed(monkeypatch, capsys):
  """Installed (this checkout's editable install): no pip, whatever REPO_URL or RL_JAX_SOURCE say;
  the cell prints where rl_jax comes from."""
  assert _run_install_cell(monkeypatch, True, "https://example.org/r.git", "gpu",
                           "/nonexistent/rl_jax") is None
  assert f"from {os.path.join(ROOT, 'rl_jax')}" in capsys.readouterr().out


def test_install_cell_pip_installs_a_url_a_directory_or_a_wheel(monkeypatch, tmp_path):
  """Not installed: pip installs `rl_jax[EXTRA] @ URL`; REPO_URL becomes a git+ URL, a local
  RL_JAX_SOURCE (a clone or a wheel, relative or not) a file:// URL, and RL_JAX_SOURCE wins."""
  import pathlib  # pylint: disable=g-import-not-at-top
  pip = lambda *args: _run_install_cell(monkeypatch, False, *args)
  argv = pip("https://example.org/r.git", "gpu")
  assert argv[:4] == [sys.executable, "-m", "pip", "install"]
  assert argv[-1] == "rl_jax[gpu] @ git+https://example.org/r.git"
  assert pip("git+https://example.org/r.git")[-1] == "rl_jax @ git+https://example.org/r.git"
  assert pip("https://example.org/r.git", "tpu", ROOT)[-1] == (
      f"rl_jax[tpu] @ {pathlib.Path(ROOT).as_uri()}")
  wheel = tmp_path / "dist" / "rl_jax-0.1.0-py3-none-any.whl"
  wheel.parent.mkdir()
  wheel.write_bytes(b"")
  monkeypatch.chdir(tmp_path)
  assert pip("", "", "dist/rl_jax-0.1.0-py3-none-any.whl")[-1] == f"rl_jax @ {wheel.as_uri()}"
  with pytest.raises(RuntimeError, match="set REPO_URL"):
    pip("")
