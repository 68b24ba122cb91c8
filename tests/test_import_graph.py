"""The house stands (docs/design.md §2): the import graph of rl_jax/ and kernels/, read with `ast`
(imports inside functions included), has no circle between modules or between rl_jax's
subpackages, no import against the layer order, no import of experiments/ or benchmarks/ from
the library, and no library file over 600 lines."""

from __future__ import annotations

import ast
import collections
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_LINES = 600

# docs/design.md §2's layers, top (1) to bottom: a module imports only from its own layer or above.
LAYERS = {
    1: ("kernels", "rl_jax.models", "rl_jax.registry", "rl_jax.types", "rl_jax.parallel",
        "rl_jax.tokenizers", "rl_jax.metrics", "rl_jax.checkpoint", "rl_jax.chips",
        "rl_jax.seeds", "rl_jax.workdir", "rl_jax.train_state", "rl_jax.compile_cache",
        "rl_jax.fingerprint", "rl_jax.platforms", "rl_jax.hostmem"),
    2: ("rl_jax.sampling", "rl_jax.data", "rl_jax.rewards", "rl_jax._reward_worker"),
    3: ("rl_jax.experiment",),
    4: ("rl_jax.rl",),
    5: ("rl_jax.value",),
    6: ("rl_jax.rollout",),
    7: ("rl_jax.train",),
    8: ("rl_jax.evals", "rl_jax.tools"),
}
OUTSIDE = ("experiments", "benchmarks")


def _modules() -> dict[str, pathlib.Path]:
  out = {}
  for pkg in ("rl_jax", "kernels"):
    for path in sorted((ROOT / pkg).rglob("*.py")):
      parts = list(path.relative_to(ROOT).with_suffix("").parts)
      if parts[-1] == "__init__":
        parts = parts[:-1]
      out[".".join(parts)] = path
  return out


def _imports(name: str, path: pathlib.Path, modules) -> set[str]:
  """Modules of the library (and experiments/benchmarks) that `name` imports anywhere."""
  is_pkg = path.name == "__init__.py"
  found = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        pkg = name.split(".") if is_pkg else name.split(".")[:-1]
        pkg = pkg[:len(pkg) - node.level + 1]
        base = ".".join(pkg + ([base] if base else []))
      # `from pkg import sub` needs the submodule; `from pkg import name`, the package itself.
      targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                 for a in node.names]
    else:
      continue
    for target in targets:
      if target.split(".")[0] in OUTSIDE:
        found.add(target)
        continue
      parts = target.split(".")
      for k in range(len(parts), 0, -1):  # the longest prefix that is a module
        candidate = ".".join(parts[:k])
        if candidate in modules:
          if candidate != name:
            found.add(candidate)
          break
  return found


def _graph():
  modules = _modules()
  return modules, {m: _imports(m, p, modules) for m, p in modules.items()}


def _layer(module: str) -> int:
  best, depth = 0, -1
  for layer, prefixes in LAYERS.items():
    for p in prefixes:
      if (module == p or module.startswith(p + ".")) and len(p) > depth:
        best, depth = layer, len(p)
  return best


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components with more than one node (Tarjan)."""
  index, low, stack, on, out = {}, {}, [], set(), []
  counter = [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges.get(v, ()):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        out.append(sorted(comp))

  for v in sorted(edges):
    if v not in index:
      visit(v)
  return out


def _subpackage(module: str) -> str:
  parts = module.split(".")
  return ".".join(parts[:2]) if parts[0] == "rl_jax" and len(parts) > 1 else parts[0]


def test_every_library_module_has_a_layer():
  modules, _ = _graph()
  assert [m for m in modules if m not in ("rl_jax",) and _layer(m) == 0] == []


def test_no_circle_between_modules():
  _, edges = _graph()
  assert _cycles(edges) == []


def test_no_circle_between_subpackages():
  _, edges = _graph()
  pkg = collections.defaultdict(set)
  for a, targets in edges.items():
    for b in targets:
      if b.split(".")[0] not in OUTSIDE and _subpackage(a) != _subpackage(b):
        pkg[_subpackage(a)].add(_subpackage(b))
  assert _cycles(pkg) == []


def test_imports_follow_the_layer_order():
  _, edges = _graph()
  wrong = sorted(f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
                 for a, targets in edges.items() for b in targets
                 if b.split(".")[0] not in OUTSIDE and b != "rl_jax" and _layer(b) > _layer(a))
  assert wrong == []


def test_library_imports_no_entry_point():
  _, edges = _graph()
  assert sorted(f"{a} imports {b}" for a, targets in edges.items() for b in targets
                if b.split(".")[0] in OUTSIDE) == []


def test_no_library_file_over_600_lines():
  modules, _ = _graph()
  long = {str(p.relative_to(ROOT)): n for p in modules.values()
          if (n := len(p.read_text().splitlines())) > MAX_LINES}
  assert long == {}


@pytest.mark.parametrize("source, want", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_the_cycle_finder_finds_cycles(source, want):
  assert _cycles(source) == want
