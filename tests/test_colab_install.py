"""The notebooks' install cell on a fresh runtime: a new virtualenv without rl_jax, a working
directory holding a clone named `rl_jax` (the trap: that folder imports as a namespace package),
the cell taken from colab/quickstart.ipynb (tests/test_colab.py checks the three notebooks share
it), pip pointed at the clone through RL_JAX_SOURCE. Then what the notebooks' next cells import
must import, from the installed package.

Offline and fast: the virtualenv sees this interpreter's installed packages through a folder of
links (every entry of this site-packages except rl_jax's own), named in a `.pth` line, so pip
finds every dependency installed and downloads nothing (PIP_NO_INDEX); rl_jax itself is neither
importable nor known to importlib.metadata there until the cell installs it.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import sysconfig

import test_colab  # tests/test_colab.py

ROOT = pathlib.Path(test_colab.ROOT)
# This checkout's own entries in site-packages: its dist-info, its editable finder and .pth, and
# the package folders a non-editable install would leave.
OWN = re.compile(r"^(__editable__[._]+)?rl_jax[-_.]|^(rl_jax|kernels|experiments)$")


def _clone(dest: pathlib.Path) -> None:
  """Copies this checkout's files that git tracks or would track (not ignored) into `dest`."""
  files = subprocess.run(
      ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
      check=True, capture_output=True).stdout.decode().split("\0")
  for name in filter(None, files):
    src = ROOT / name
    if src.is_file():  # a tracked file deleted in the working tree is not copied
      (dest / name).parent.mkdir(parents=True, exist_ok=True)
      (dest / name).write_bytes(src.read_bytes())


def _fresh_venv(tmp: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
  """A virtualenv whose sys.path ends with links to this interpreter's packages, rl_jax's left
  out. Returns (its python, its site-packages)."""
  deps = tmp / "deps"
  deps.mkdir()
  for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
    for entry in os.scandir(site):
      if not OWN.match(entry.name) and not (deps / entry.name).exists():
        (deps / entry.name).symlink_to(entry.path)
  venv = tmp / "venv"
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
  python = venv / "bin" / "python"
  site = pathlib.Path(subprocess.run(
      [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
      check=True, capture_output=True, text=True).stdout.strip())
  (site / "deps.pth").write_text(f"{deps}\n")  # a path line: deps' own .pth files are not run
  return python, site


def _next_cell_imports() -> list[str]:
  """The import lines of each notebook's second code cell (what runs after the install cell)."""
  out = []
  for path in test_colab.NOTEBOOKS:
    cell = test_colab.code_cells(path)[1]
    out += [l for l in cell.splitlines() if re.match(r"(import|from) \w", l) and l not in out]
  return out


def test_install_cell_installs_rl_jax_beside_a_clone_named_rl_jax(tmp_path):
  """Before: no rl_jax distribution, and `import rl_jax` yields the clone folder as a namespace
  package without its modules. The cell without REPO_URL or RL_JAX_SOURCE stops with an error
  naming REPO_URL. With RL_JAX_SOURCE=rl_jax (the clone) it pip-installs the clone; then the next
  cells' imports work and come from the venv's site-packages, with every module of the clone's
  packages installed. Run again, it installs nothing."""
  work = tmp_path / "content"  # Colab's working directory
  clone = work / "rl_jax"
  _clone(clone)
  python, site = _fresh_venv(tmp_path)
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("PIP_", "RL_JAX_SOURCE", "PYTHONPATH"))}
  env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
             PIP_CACHE_DIR=str(tmp_path / "pip_cache"),
             # pip's boolean variables set the option's destination: "0" turns isolation off, so
             # the build uses the setuptools the venv sees instead of downloading one.
             PIP_NO_BUILD_ISOLATION="0")

  def run(code, **extra_env):
    return subprocess.run([python, "-c", code], cwd=work, env={**env, **extra_env},
                          capture_output=True, text=True, timeout=300)

  before = run("import importlib.metadata, json, rl_jax\n"
               "try:\n  dist = importlib.metadata.version('rl_jax')\n"
               "except importlib.metadata.PackageNotFoundError:\n  dist = None\n"
               "try:\n  from rl_jax import experiment\n  modules = True\n"
               "except ImportError:\n  modules = False\n"
               "import absl, jax\n"  # the dependencies are there
               "print(json.dumps(dict(dist=dist, file=rl_jax.__file__, path=list(rl_jax.__path__),"
               " modules=modules)))")
  assert before.returncode == 0, before.stderr
  assert json.loads(before.stdout) == dict(dist=None, file=None, path=[str(clone)], modules=False)

  cell = test_colab.code_cells(str(ROOT / "colab" / "quickstart.ipynb"))[0]
  unset = run(cell)
  assert unset.returncode != 0 and "set REPO_URL" in unset.stderr, unset.stderr

  probe = "\n".join(
      [cell] + _next_cell_imports() +
      ["import absl, experiments, experiments.configs.default, importlib.metadata, json, rl_jax",
       "dist = importlib.metadata.distribution('rl_jax')",
       "print(json.dumps(dict(rl_jax=rl_jax.__file__, experiments=experiments.__file__,",
       "    config=experiments.configs.default.__file__, absl=absl.__file__,",
       "    url=json.loads(dist.read_text('direct_url.json'))['url'],",
       "    files=[str(f) for f in dist.files])))"])
  installed = run(probe, RL_JAX_SOURCE="rl_jax")
  assert installed.returncode == 0, installed.stderr
  printed, values = installed.stdout.strip().splitlines()[-2:]
  values = json.loads(values)
  assert printed == f"rl_jax 0.1.0 from {site / 'rl_jax'}"
  assert values["url"] == clone.as_uri()  # installed from the clone
  for key in ("rl_jax", "experiments", "config"):
    assert pathlib.Path(values[key]).is_relative_to(site), (key, values[key])
  assert not pathlib.Path(values["absl"]).is_relative_to(site)  # a dependency: not reinstalled
  packaged = {str(p.relative_to(clone)) for pkg in ("rl_jax", "kernels", "experiments")
              for p in (clone / pkg).rglob("*.py")}
  assert packaged and packaged <= set(values["files"]), sorted(packaged - set(values["files"]))

  again = run(cell, RL_JAX_SOURCE=str(tmp_path / "nonexistent"))  # pip would fail on it
  assert again.returncode == 0, again.stderr
  assert again.stdout.strip() == printed
