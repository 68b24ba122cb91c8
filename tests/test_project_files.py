"""The files of the ecosystem's conventions agree with the package and the code: LICENSE is the
Apache License 2.0 that setup.py names; CITATION.cff parses and carries setup.py's version and
license; CHANGELOG.md keeps the Keep a Changelog layout with the released version on top;
CONTRIBUTING.md's paths exist, its registries are defined where it says, and its test command is
the one CI runs."""

import ast
import datetime
import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _setup_keywords() -> dict:
  """The literal keyword arguments of setup.py's `setuptools.setup(...)` call."""
  tree = ast.parse((ROOT / "setup.py").read_text())
  calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
           and isinstance(n.func, ast.Attribute) and n.func.attr == "setup"]
  assert len(calls) == 1
  return {k.arg: k.value.value for k in calls[0].keywords if isinstance(k.value, ast.Constant)}


def test_license_is_the_apache_license_2_0_that_setup_names():
  text = (ROOT / "LICENSE").read_text()
  assert _setup_keywords()["license"] == "Apache-2.0"
  assert re.match(r"\s*Apache License\s+Version 2\.0, January 2004\s", text)
  sections = re.findall(r"^\s+(\d)\. (\w+)", text, re.M)
  assert [s[0] for s in sections] == [str(i) for i in range(1, 10)], sections
  assert "END OF TERMS AND CONDITIONS" in text
  assert "APPENDIX: How to apply the Apache License to your work." in text


def test_citation_parses_and_matches_setup():
  cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
  setup = _setup_keywords()
  assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
  assert cff["title"] == setup["name"] and cff["message"].strip()
  assert str(cff["version"]) == setup["version"] and cff["license"] == setup["license"]
  datetime.date.fromisoformat(str(cff["date-released"]))
  assert cff["authors"] and all(a.get("name") or a.get("family-names") for a in cff["authors"])


def test_changelog_keeps_its_layout_with_the_released_version_on_top():
  """`## [Unreleased]` first, then `## [X.Y.Z] - DATE` newest first, the newest being setup.py's
  version released on CITATION.cff's date; only Keep a Changelog's categories under them."""
  text = (ROOT / "CHANGELOG.md").read_text()
  headings = re.findall(r"^## \[([^\]]+)\](?: - (\S+))?$", text, re.M)
  assert headings[0] == ("Unreleased", "")
  released = headings[1:]
  cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
  assert released[0] == (_setup_keywords()["version"], str(cff["date-released"]))
  versions = [tuple(int(x) for x in v.split(".")) for v, _ in released]
  assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
  for _, date in released:
    datetime.date.fromisoformat(date)
  categories = set(re.findall(r"^### (.+)$", text, re.M))
  assert categories <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_contributing_names_paths_and_registries_that_exist():
  """Every repository path in a code span exists (placeholders in capitals aside); each row of
  the 'where a new method goes' table names a registry defined in the modules it lists; the
  test-suite command is the one `.ci/run` runs."""
  text = (ROOT / "CONTRIBUTING.md").read_text()
  spans = re.findall(r"`([^`\s]+)`", text)
  paths = [s for s in spans if re.match(r"(\.ci|rl_jax|kernels|experiments|tests|colab|"
                                        r"benchmarks)/", s) and not re.search(r"[A-Z*]", s)]
  assert len(paths) > 10
  missing = [p for p in paths if not (ROOT / p).exists()]
  assert not missing, missing
  rows = [l for l in text.splitlines() if re.match(r"\| [a-z].*\| `[A-Z_]+` \|", l)]
  assert len(rows) >= 9, rows
  for row in rows:
    where, registry = row.split("|")[2], re.search(r"`([A-Z_]+)`", row.split("|")[3]).group(1)
    files = [f for p in re.findall(r"`([^`]+)`", where)
             for f in ((ROOT / p).rglob("*.py") if (ROOT / p).is_dir() else [ROOT / p])]
    assert any(re.search(rf"^{registry}\b[^=\n]*= *(Registry\(|\{{)", f.read_text(), re.M)
               for f in files), (registry, where)
  ci = (ROOT / ".ci" / "run").read_text()
  test_command = re.search(r"^python3 -m venv .*pytest.*$", text, re.M).group(0)
  assert test_command in ci
