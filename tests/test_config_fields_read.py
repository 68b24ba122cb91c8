"""Every field of the config tree is read by some code.

The tree: `experiments/configs/common.py` `base()`, and the fields the other configs
(`experiments/configs/*.py` `get_config`, each recipe's presets) add to it. A leaf `a.b.name` is
read when `name` appears in rl_jax/ or experiments/ outside the config files as an attribute
(`.name`), a subscript (`["name"]`) or a `get("name")` call, read with `ast` (comments and
docstrings do not count). Static, so a false "read" is possible (another object's attribute of
the same name), a false "unread" is not. The free-form dicts of `PASSED_WHOLE` go whole to
another library (reasoning-gym's task options, the sentencepiece trainer, the chat template):
the dict itself must be read, its keys are that library's.
"""

from __future__ import annotations

import ast
import importlib
import pathlib

import ml_collections

from experiments.configs import common
from experiments.configs.recipes import base as recipes_base

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "experiments" / "configs"
CONFIGS = ("default", "ladder", "ladder2", "scale", "smollm2", "smollm2_learns")
PASSED_WHOLE = ("task.options", "tokenizer.options", "tokenizer.template_kwargs")
RECIPES = sorted(p.stem for p in (CONFIG_DIR / "recipes").glob("*.py")
                 if p.stem not in ("__init__", "base"))


def _leaves(node, prefix=()) -> set[tuple[str, ...]]:
  """Leaf paths of a ConfigDict (a ConfigDict with no fields, or one of `PASSED_WHOLE`, is a
  leaf: a free-form dict)."""
  if (isinstance(node, ml_collections.ConfigDict) and len(node)
      and ".".join(prefix) not in PASSED_WHOLE):
    out = set()
    for key in node:
      out |= _leaves(node[key], prefix + (key,))
    return out
  return {prefix}


def _trees() -> dict[str, ml_collections.ConfigDict]:
  trees = {"common.base": common.base()}
  for name in CONFIGS:
    trees[name] = importlib.import_module(f"experiments.configs.{name}").get_config()
  for name in RECIPES:
    module = importlib.import_module(f"experiments.configs.recipes.{name}")
    for preset in recipes_base.PRESETS:
      trees[f"recipes.{name}:{preset}"] = module.get_config(preset)
  return trees


def _read_names() -> set[str]:
  """Names read as `.name`, `[\"name\"]` or `get(\"name\")` outside the config files."""
  names = set()
  files = [p for d in ("rl_jax", "experiments") for p in (ROOT / d).rglob("*.py")
           if CONFIG_DIR not in p.parents]
  for path in files:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Attribute):
        names.add(node.attr)
      elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        names.add(node.slice.value)
      elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant)):
        names.add(node.args[0].value)
  return names


def unread_fields() -> list[str]:
  """Leaf paths (`rl.v05.alpha`) of any config tree whose last name no code reads."""
  read = _read_names()
  paths = set()
  for tree in _trees().values():
    paths |= _leaves(tree)
  return sorted(".".join(p) for p in paths if p[-1] not in read)


def test_every_config_field_is_read():
  assert unread_fields() == []


def test_the_scan_finds_an_unread_field(monkeypatch):
  """The check can fail: a field no code reads is listed."""
  make = common.base

  def with_stray_field():
    c = make()
    c.rl.never_read_anywhere_xq = 1
    return c

  monkeypatch.setattr(common, "base", with_stray_field)
  assert "rl.never_read_anywhere_xq" in unread_fields()
