"""Method names stay in their boxes (docs/design.md §2): no registry name appears as a string
literal in rl_jax/ outside the modules that register it, the module of its registry and the
configs (experiments/configs/, not scanned), so rollout and train code ask a registry entry what
it needs instead of naming a method.

The registries are found by reading rl_jax/ with `ast` (module-level `X = Registry(...)`); their
names are collected at import time (every rl_jax module imported, so every entry registered).
A name's own modules are its registry's module and every module with a call
`<anything>.register("<name>", ...)`.

Some names are ordinary words ('mean', 'history', 'uniform', 'constant'), so a literal is flagged
only where it names a method by value, i.e. where it is compared with something:
* an operand of `==` or `!=`;
* an element of a tuple / list / set on the right of `in` / `not in` (`x in ("a", "b")`);
* an element of a tuple / list / set display of two or more strings that are all names of one
  registry (a table of methods, e.g. `MULTI_REWARD = ("gdpo", "gdpo_verl")`).
A literal on the left of `in` (`"v05" in config.rl`, a config section's key), a dict key, a
keyword value or a message is not flagged.
"""

from __future__ import annotations

import ast
import collections
import importlib
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Per registry (its `kind`), the config fields (their last name) whose values are its names.
FIELDS = {
    "advantage": ("advantage",),
    "rollout engine": ("rollout",),
    "allocator": ("allocator",),
    "prior": ("prior", "allocator_prior"),
    "round rule": ("round_rules",),
    "process advantage": ("process_reward",),
    "policy_loss": ("loss",),
    "sampling engine": ("engine",),
    "math task source": ("source",),
    "reward": ("rewards",),
    "v0 head": ("head",),
    "ARRoL keep rule": ("rule",),
    "run companion": (),  # Built when the config turns them on, never named by a field.
}


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _files() -> dict[str, tuple[pathlib.Path, ast.Module]]:
  out = {}
  for path in sorted((ROOT / "rl_jax").rglob("*.py")):
    out[_module_name(path)] = (path, ast.parse(path.read_text(), str(path)))
  return out


def _registries(files) -> dict[tuple[str, str], object]:
  """{(module, variable): the Registry object} of every module-level `X = Registry(...)`."""
  found = {}
  for module, (_, tree) in files.items():
    for node in tree.body:
      if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
          and isinstance(node.value.func, ast.Name) and node.value.func.id == "Registry"):
        for target in node.targets:
          if isinstance(target, ast.Name):
            found[(module, target.id)] = None
  for module in files:  # Every module, so that every entry is registered.
    importlib.import_module(module)
  return {(m, v): getattr(importlib.import_module(m), v) for m, v in found}


def _registering_modules(files) -> dict[str, set[str]]:
  """{name: modules with a call `*.register("name", ...)`}."""
  out = collections.defaultdict(set)
  for module, (_, tree) in files.items():
    for node in ast.walk(tree):
      if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr == "register" and node.args
          and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        out[node.args[0].value].add(module)
  return out


def _strings(node) -> list[ast.Constant]:
  if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
    return [e for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
  return []


def _last_name(node) -> str:
  """The last identifier of `rl.advantage` / `advantage` / `cfg.rl.rollout[0]`, else ''."""
  while isinstance(node, ast.Subscript):
    node = node.value
  if isinstance(node, ast.Attribute):
    return node.attr
  return node.id if isinstance(node, ast.Name) else ""


def _flagged(tree, fields: dict[str, set[str]], tables: list[set[str]]) -> list[ast.Constant]:
  """The string constants of `tree` that name a method by value (module docstring). `fields`:
  config field -> the names of the registry it selects; `tables`: every registry's names."""
  hits = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Compare):
      operands = [node.left] + list(node.comparators)
      for op, left, right in zip(node.ops, operands, operands[1:]):
        if isinstance(op, (ast.Eq, ast.NotEq)):
          for const, other in ((left, right), (right, left)):
            if (isinstance(const, ast.Constant) and isinstance(const.value, str)
                and const.value in fields.get(_last_name(other), ())):
              hits.append(const)
        elif isinstance(op, (ast.In, ast.NotIn)):
          named = fields.get(_last_name(left), ())
          hits += [c for c in _strings(right) if c.value in named]
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
      values = _strings(node)
      if len(values) >= 2 and len(values) == len(node.elts) and any(
          {v.value for v in values} <= table for table in tables):
        hits += values
  unique = {id(h): h for h in hits}.values()  # A table compared with `in` is found twice.
  return sorted(unique, key=lambda h: (h.lineno, h.col_offset))


def test_no_method_name_outside_its_modules():
  files = _files()
  registries = _registries(files)
  assert len(registries) >= 10, sorted(registries)  # The scan finds the registries.
  own = _registering_modules(files)
  names_of = collections.defaultdict(set)  # name -> modules allowed to hold it as a literal
  tables, fields = [], collections.defaultdict(set)
  assert {r.kind for r in registries.values()} == set(FIELDS), "map every registry's fields"
  for (module, _), registry in registries.items():
    table = set(registry.names())
    tables.append(table)
    for field in FIELDS[registry.kind]:
      fields[field] |= table
    for name in table:
      names_of[name] |= {module} | own[name]
  assert {"grpo", "iid", "uniform", "history", "v05"} <= set(names_of)
  found = []
  for module, (path, tree) in files.items():
    rel = str(path.relative_to(ROOT))
    for hit in _flagged(tree, fields, tables):
      if module not in names_of[hit.value]:
        found.append(f"{rel}:{hit.lineno}: {hit.value!r}")
  assert not found, "method names outside their registering modules:\n" + "\n".join(found)


def test_the_scan_flags_a_method_name_by_value():
  """The rules of the module docstring, on made-up code."""
  fields, tables = {"mode": {"alpha", "beta"}}, [{"alpha", "beta"}]
  code = ("if c.rl.mode == 'alpha': pass\n"            # flagged
          "if mode in ('beta', 'other'): pass\n"       # flagged: 'beta'
          "TABLE = ('alpha', 'beta')\n"                # flagged twice
          "if 'alpha' in config.rl: pass\n"            # a section key: not flagged
          "x = {'alpha': 1}\n"                         # a dict key: not flagged
          "f(mode='beta')\n"                           # a keyword value: not flagged
          "if kind == 'alpha': pass\n")                # another field: not flagged
  hits = _flagged(ast.parse(code), fields, tables)
  assert [(h.lineno, h.value) for h in hits] == [(1, "alpha"), (2, "beta"), (3, "alpha"),
                                                  (3, "beta")]
