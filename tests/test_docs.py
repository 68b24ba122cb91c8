"""The docs site builds and the code's references into it hold.

(a) `mkdocs build --strict` succeeds: every page in mkdocs.yml's nav exists and every link between
pages (anchors included) resolves. (b) Every `docs/<page>.md` named in the code, tests, notebooks
and root Markdown files exists, and a section it names (` §N`, ` §N.M` or `#anchor`) is a heading
of that page. (c) No file outside docs/ cites the design files that used to live outside the
repository (their names are built below, so this file does not contain them). (d) The AOT table
of docs/scaling.md is the one `experiments.aot_table` generates from experiments/aot_results/.
(e) Every `python -m experiments...` or `benchmarks...` command the pages show names a module that
exists and flags it defines, and each `--config.a.b` override is a field of its `--config=FILE`.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys

from markdown.extensions import toc
import pytest

from experiments import aot_table
from experiments.sweeps import launch

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCANNED_DIRS = ("rl_jax", "kernels", "experiments", "benchmarks", "tests", "colab")
SCANNED_SUFFIXES = (".py", ".md", ".ipynb", ".json", ".yml", ".yaml", ".toml", ".cfg", ".txt", "")
# `docs/<path>.md`, then optional sections (` §5`, ` §5.1`, a list or range such as
# ` §3.0, §3.2-§3.4`) or `#anchor`. A `docs/` inside a longer path or URL
# (`.../blob/main/docs/x.md`) is someone else's and is not matched.
_SECTION = r"§\d+(?:\.\d+)?"
_REFERENCE = re.compile(
    r"(?<![\w/.-])docs/(?P<page>[\w./-]+?\.md)"
    rf"(?:(?P<sections> {_SECTION}(?:(?:, ?|-|–| ?/ ?){_SECTION})*)|#(?P<anchor>[\w-]+))?")


def section_numbers(match: re.Match) -> list[str]:
  """The section numbers a reference names (`['3.0', '3.2', '3.4']`), [] for none."""
  return re.findall(r"§(\d+(?:\.\d+)?)", match["sections"] or "")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _tracked_files() -> list[pathlib.Path]:
  """The repository's files (tracked, or new and not ignored), as absolute paths."""
  out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                       cwd=ROOT, capture_output=True, check=True).stdout.decode()
  return [ROOT / name for name in out.split("\0") if name and (ROOT / name).is_file()]


def _read_text(path: pathlib.Path) -> str | None:
  try:
    return path.read_text(encoding="utf-8")
  except (UnicodeDecodeError, OSError):
    return None


def headings(markdown_text: str) -> list[str]:
  """The text of every Markdown heading line of a page, outside fenced code blocks."""
  found, in_fence = [], False
  for line in markdown_text.splitlines():
    if _FENCE.match(line):
      in_fence = not in_fence
      continue
    match = None if in_fence else _HEADING.match(line)
    if match:
      found.append(match.group(2))
  return found


def heading_has_number(heading: str, number: str) -> bool:
  """Whether a heading's text starts with section `number` (`5` matches `5. Process rewards`,
  `5.1` matches `5.1 PAV`; `5` does not match `5.1 PAV`, `5.1` does not match `5.10 X`)."""
  return re.match(re.escape(number) + r"\.?(\s|$)", heading) is not None


def heading_anchor(heading: str) -> str:
  """mkdocs' id of a heading (Python-Markdown's toc slug of its text, code marks removed)."""
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
  return toc.slugify(text, "-")


def references() -> list[tuple[str, str, list[str], str | None]]:
  """(where, page, section numbers, anchor) for every `docs/<page>.md` reference in the scanned
  files."""
  files = [p for p in _tracked_files()
           if (p.relative_to(ROOT).parts[0] in SCANNED_DIRS and p.suffix in SCANNED_SUFFIXES)
           or (p.parent == ROOT and p.suffix == ".md")]
  found = []
  for path in files:
    text = _read_text(path)
    if text is None:
      continue
    for lineno, line in enumerate(text.splitlines(), 1):
      for m in _REFERENCE.finditer(line):
        found.append((f"{path.relative_to(ROOT)}:{lineno}", m["page"], section_numbers(m),
                      m["anchor"]))
  return found


def test_heading_helpers_on_examples():
  page = "# Title\n\n## 5. Process rewards\n\n```\n## 9. inside a fence\n```\n### 5.1 PAV `x`\n"
  assert headings(page) == ["Title", "5. Process rewards", "5.1 PAV `x`"]
  assert heading_has_number("5. Process rewards", "5")
  assert heading_has_number("5.1 PAV", "5.1")
  assert not heading_has_number("5.1 PAV", "5")
  assert not heading_has_number("5.10 X", "5.1")
  assert heading_anchor("5.1 PAV `x`") == "51-pav-x"
  m = _REFERENCE.search("see docs/design.md §7.")
  assert (m["page"], section_numbers(m)) == ("design.md", ["7"])
  assert section_numbers(_REFERENCE.search("(docs/algorithms.md §5.1)")) == ["5.1"]
  assert section_numbers(_REFERENCE.search("docs/algorithms.md §3.0, §3.2-§3.4.")) == [
      "3.0", "3.2", "3.4"]
  assert section_numbers(_REFERENCE.search("docs/algorithms.md has no rule")) == []
  assert _REFERENCE.search("docs/quickstart.md#resume")["anchor"] == "resume"
  assert _REFERENCE.search("github.com/o/r/blob/main/docs/x.md") is None


def test_mkdocs_builds_strict(tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
  assert result.returncode == 0, result.stdout + result.stderr
  assert (tmp_path / "site" / "index.html").is_file()


def test_docs_references_name_existing_pages_and_headings():
  refs = references()
  # The code cites the design and algorithms pages by section; a scan that finds none is broken.
  assert len(refs) > 50, refs
  problems = []
  for where, page, numbers, anchor in refs:
    path = ROOT / "docs" / page
    if not path.is_file():
      problems.append(f"{where}: docs/{page} does not exist")
      continue
    page_headings = headings(path.read_text(encoding="utf-8"))
    for number in numbers:
      if not any(heading_has_number(h, number) for h in page_headings):
        problems.append(f"{where}: docs/{page} has no heading numbered {number}")
    if anchor and anchor not in {heading_anchor(h) for h in page_headings}:
      problems.append(f"{where}: docs/{page} has no heading with anchor #{anchor}")
  assert not problems, "\n".join(problems)


@pytest.mark.parametrize("stem", ["DESIGN", "ALGORITHMS"])
def test_no_citation_of_files_outside_the_repository(stem):
  name = stem + ".md"
  citing = []
  for path in _tracked_files():
    rel = path.relative_to(ROOT)
    if rel.parts[0] == "docs":
      continue
    text = _read_text(path)
    if text is not None and name in text:
      lines = [i for i, line in enumerate(text.splitlines(), 1) if name in line]
      citing.append(f"{rel}: lines {lines}")
  assert not citing, f"{name} is cited outside docs/:\n" + "\n".join(citing)


def test_aot_table_is_generated_from_the_results():
  page = aot_table.PAGE.read_text(encoding="utf-8")
  assert aot_table.rewrite(page, aot_table.table()) == page, (
      "docs/scaling.md's AOT table differs from experiments/aot_results/; run "
      "python -m experiments.aot_table")
  # Every results file has its rows in the table, each phase line once.
  for path in sorted(aot_table.RESULTS_DIR.glob("*.jsonl")):
    phases = [line for line in path.read_text().splitlines() if '"phase": "setup"' not in line
              and line.strip()]
    assert page.count(f"| `{path.name}` |") == len(phases), path.name


def test_aot_table_rows_follow_the_data(tmp_path):
  (tmp_path / "m_v5e-8.jsonl").write_text(
      '{"phase": "setup", "topology": "v5e:2x4", "mesh": {"data": 1, "fsdp": 8, "tensor": 1}, '
      '"params": 1500000000, "dtype": "bfloat16", "param_dtype": "float32", '
      '"num_minibatches": 16}\n'
      '{"phase": "generate", "fits": true, "per_device_total_bytes": 5000000000, '
      '"hbm_bytes": 16000000000, "roofline_seconds": 2.5}\n'
      '{"phase": "rl_step", "fits": false, "error": "RESOURCE_EXHAUSTED: Ran out of memory"}\n')
  lines = aot_table.table(tmp_path).splitlines()
  assert lines[2] == ("| `m_v5e-8.jsonl` | v5e:2x4 | (1, 8, 1) | 1.50 B | bfloat16 / float32 | 16 "
                      "| generate | yes | 5.00 (of 16.0) | 2.50 |")
  assert "| rl_step | no: does not compile (RESOURCE_EXHAUSTED) | - | - |" in lines[3]
  with pytest.raises(ValueError, match="markers"):
    aot_table.rewrite("no markers here", "table")


# ---------------------------------------------------------------------------------------------
# (e) Every `python -m experiments.X` / `benchmarks.X` command the pages show names a module that
# exists, and every `--flag` it passes is one that module (or a module it imports from
# experiments/ or benchmarks/, or experiments/cli.py) defines. The research log is history and
# may show flags since renamed; it is not read.
_COMMAND = re.compile(r"python3? -m ((?:experiments|benchmarks)[\w.]*)((?: +[^\s`|&;)]+)*)")
_DEFINED = re.compile(r"DEFINE_\w+\(\s*\"(\w+)\"|add_argument\(\s*\"--([\w-]+)\"")
_ABSL_FLAGS = {"help", "helpfull", "helpshort", "verbosity", "v", "logtostderr", "flagfile",
               "alsologtostderr", "only_check_args", "undefok"}


def _module_file(module: str) -> pathlib.Path | None:
  for rel in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__main__.py"):
    if (ROOT / rel).is_file():
      return ROOT / rel
  return None


def defined_flags(module: str) -> set[str] | None:
  """The flag names a module's file and its in-repository imports define; None: no module."""
  path = _module_file(module)
  if path is None:
    return None
  sources = [path, ROOT / "experiments" / "cli.py"]
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("experiments",
                                                                             "benchmarks")):
      sources += [p for p in [_module_file(node.module)]
                  + [_module_file(f"{node.module}.{a.name}") for a in node.names] if p]
  names = set(_ABSL_FLAGS)
  for source in sources:
    for m in _DEFINED.finditer(source.read_text()):
      names.add((m.group(1) or m.group(2)).replace("-", "_"))
  return names


def command_errors(text: str) -> list[str]:
  """What is wrong with the commands in a page's text (lines joined at a trailing backslash)."""
  errors = []
  for m in _COMMAND.finditer(text.replace("\\\n", " ")):
    module, args = m.group(1), m.group(2)
    names = defined_flags(module)
    if names is None:
      errors.append(f"no module {module}")
      continue
    for flag in re.findall(r"(?<!\S)--(\w+)", args):
      bare = flag[2:] if flag.startswith("no") and flag[2:] in names else flag
      if bare not in names:
        errors.append(f"{module} has no flag --{flag}")
  return errors


def override_errors(text: str) -> list[str]:
  """`--config.a.b=...` overrides of a command whose `--config=FILE` exists that name no field."""
  errors = []
  for m in _COMMAND.finditer(text.replace("\\\n", " ")):
    spec = re.search(r"--config=([^\s\"']+)", m.group(2))
    if not spec or not (ROOT / spec.group(1).partition(":")[0]).is_file():
      continue  # no config, or a placeholder such as FILE
    config = launch.config_file(str(ROOT / spec.group(1)))
    for field in re.findall(r"--config\.([\w.]+)", m.group(2)):
      if field.rsplit(".", 1)[-1] not in _fields(config, field):
        errors.append(f"{spec.group(1)} has no field config.{field}")
  return errors


def _fields(config, field: str) -> set[str]:
  """The keys of the ConfigDict that would hold `field` (a field set to None is still a field)."""
  node = config
  for key in field.split(".")[:-1]:
    node = node.get(key) if hasattr(node, "get") else None
  return set(node.keys()) if hasattr(node, "keys") else set()


def test_command_check_finds_a_wrong_module_and_flag():
  assert command_errors("python -m experiments.run --config=x --workdir=y --debug") == []
  assert command_errors("python -m experiments.nope --x=1") == ["no module experiments.nope"]
  assert command_errors("python -m experiments.eval \\\n  --workdr=runs/x") == [
      "experiments.eval has no flag --workdr"]
  good = ("python -m experiments.run --config=experiments/configs/default.py "
          "--config.rl.clip_high=0.28")
  assert override_errors(good) == []
  assert override_errors(good.replace("rl.clip_high", "rl.clip_higher")) == [
      "experiments/configs/default.py has no field config.rl.clip_higher"]


def test_every_documented_command_names_a_module_and_flags_that_exist():
  pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "experiments" / "README.md"]
  pages += [p for p in (ROOT / "docs").rglob("*.md") if "research" not in p.parts]
  seen = 0
  for page in pages:
    text = page.read_text()
    seen += len(_COMMAND.findall(text))
    assert command_errors(text) + override_errors(text) == [], page.relative_to(ROOT)
  assert seen >= 30  # the pages do show commands
