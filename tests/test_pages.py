"""The generated pages (experiments/pages.py): committed == regenerated, every number of the
README's results block is at its cited key, and a README without markers is a one-line error."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from experiments import pages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUTS = ("README.md", "docs/results.md", "docs/benchmarks.md")


def _copy_inputs(dst):
  """The generator's inputs (README, report and benchmark JSON) copied under `dst`."""
  shutil.copy(os.path.join(ROOT, "README.md"), dst / "README.md")
  for sub in (pages.SWEEPS, pages.BENCH):
    os.makedirs(dst / sub)
    for name in os.listdir(os.path.join(ROOT, sub)):
      if name.endswith(".json"):
        shutil.copy(os.path.join(ROOT, sub, name), dst / sub / name)


def _block(readme: str) -> str:
  return readme.split(pages.BEGIN + "\n", 1)[1].split(pages.END, 1)[0]


def test_regenerating_gives_the_committed_pages(tmp_path):
  """Run as a user would, into a copy: a changed JSON or spec without regenerating fails here."""
  _copy_inputs(tmp_path)
  proc = subprocess.run([sys.executable, "-m", "experiments.pages", f"--root={tmp_path}"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  for rel in OUTPUTS:
    with open(os.path.join(ROOT, rel)) as f:
      committed = f.read()
    assert (tmp_path / rel).read_text() == committed, (
        f"{rel} differs from its JSON: run `python -m experiments.pages`")


def test_a_changed_number_changes_the_pages(tmp_path):
  """The comparison above can fail: one edited value in a cited report changes the README."""
  _copy_inputs(tmp_path)
  path = tmp_path / pages.SWEEPS / pages.M
  data = json.loads(path.read_text())
  v05 = next(v for v in data["variants"] if v["name"] == "v05_v0_eq")  # a headline row
  v05["paired_delta"]["grpo_g4"][0] += 0.1
  path.write_text(json.dumps(data))
  before = pages.render(ROOT)["README.md"]
  after = pages.render(str(tmp_path))["README.md"]
  assert before != after and "+0.013 ± 0.038" in _block(after)


def _numbers(text):
  """(value, decimals shown) of each decimal number in `text`."""
  return [(float(x), len(x.split(".")[1])) for x in re.findall(r"[-+]?\d+\.\d+", text)]


def _seed_ids(data, variant):
  v = pages.lookup(data, f"variants[{variant}]")
  return set(v["seed_ids"])


def _expected(data, keys):
  """(numbers the cell shows, pairs it counts, SFT draws, verdict or None) at a source's keys."""
  if keys.startswith("registered.comparisons["):
    c = pages.lookup(data, keys)
    shown = [c[k] for k in ("mean", "ci", "ci_corrected", "p_holm") if c[k] is not None]
    verdict = {True: "replicated", False: "not replicated", None: "not judged yet"}[
        c["replicated"]]
    return shown, c["units"], c["sfts"], verdict
  if keys.startswith("registered.shares["):
    s = pages.lookup(data, keys)
    shown = [x for x in [s["share"]] + (list(s["fieller95"]) if s["bounded"] else [])
             if x is not None]
    return shown, s["replicates"], len(pages.lookup(data, "registered.sft_draws_complete")), None
  variant = re.match(r"variants\[([^\]]+)\]", keys).group(1)
  if " -> " in keys:  # before -> after
    expected = [pages.lookup(data, k) for k in keys.split(" -> ")]
    return expected, pages.lookup(data, f"variants[{variant}].seeds"), 1, None
  got = pages.lookup(data, keys)
  expected = got if isinstance(got, list) else [got, pages.lookup(data, keys + "_ci95")]
  if keys.endswith(".recovered_share"):
    n = pages.lookup(data, f"variants[{variant}].recovered.seeds")
  else:
    baseline = keys.rsplit(".", 1)[1]
    n = len(_seed_ids(data, variant) & _seed_ids(data, baseline))
  return expected, n, 1, None


def _check_block(root, block):
  """Every number of a README results block is at the key its row cites, with its seeds, its
  SFT draws and (a registered comparison) its verdict."""
  rows = [l for l in block.splitlines() if l.startswith("| ") and not l.startswith("| ---")][1:]
  assert 6 <= len(rows) <= 10
  for row in rows:
    cells = [c.strip() for c in row.strip("|").split(" | ")]
    value, seeds, sft, source = cells[-4:]
    report, keys = source.strip("`").split(": ", 1)
    with open(os.path.join(root, pages.SWEEPS, report)) as f:
      data = json.load(f)
    expected, n, draws, verdict = _expected(data, keys)
    # The table says how many SFT draws each finding rests on.
    assert sft.endswith("(one draw)" if draws == 1 else f"({draws} draws)"), row
    if verdict is not None:
      assert value.endswith(": " + verdict), row
    shown = _numbers(value)
    assert len(shown) == len(expected), row
    for (s, digits), e in zip(shown, expected):
      assert abs(s - e) <= 0.5 * 10 ** -digits + 1e-12, (row, s, e)
    assert int(seeds) == n, row


def test_every_number_of_the_readme_block_is_at_its_cited_key():
  with open(os.path.join(ROOT, "README.md")) as f:
    _check_block(ROOT, _block(f.read()))


def test_readme_without_markers_is_a_one_line_error(tmp_path):
  _copy_inputs(tmp_path)
  (tmp_path / "README.md").write_text("# rl_jax\n\nNo markers here.\n")
  proc = subprocess.run([sys.executable, "-m", "experiments.pages", f"--root={tmp_path}"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: README.md needs one line "
                                                 + pages.BEGIN), proc.stderr
  assert not (tmp_path / "docs").exists()  # nothing written


def test_key_paths():
  data = {"variants": [{"name": "a.b", "x": {"y": [0.1, 0.02]}, "s": 0.5, "s_ci95": 0.1}],
          "gates": [{"value": 3}]}
  assert pages.lookup(data, "variants[a.b].x.y") == [0.1, 0.02]
  assert pages.value_pair(data, "variants[a.b].s") == (0.5, 0.1)
  assert pages.lookup(data, "gates[0].value") == 3
  with pytest.raises(KeyError, match="no 'z'"):
    pages.lookup(data, "variants[a.b].z")
  with pytest.raises(KeyError, match="0 entries named 'c'"):
    pages.lookup(data, "variants[c].x")


def test_every_finding_reads_and_the_headline_is_short():
  """The spec is data: each row resolves, ids are unique, the README table has 6-10 rows."""
  ids = [f.id for f in pages.FINDINGS]
  assert len(ids) == len(set(ids))
  assert 6 <= len(pages.HEADLINE) <= 10
  for f in pages.FINDINGS:
    c = pages.cell(ROOT, f)
    assert c.seeds >= 1 and f.report in c.source and f.sft_draws >= 1


def test_research_log_pages_open_with_a_status_and_are_indexed():
  """Every docs/research/ page states its status first (superseded ones link their successor,
  which exists), and the index links every page."""
  folder = os.path.join(ROOT, "docs", "research")
  with open(os.path.join(folder, "index.md")) as f:
    index = f.read()
  pages_ = sorted(n for n in os.listdir(folder) if n.endswith(".md") and n != "index.md")
  assert len(pages_) >= 10
  for name in pages_:
    with open(os.path.join(folder, name)) as f:
      body = [l for l in f.read().splitlines() if l.strip()]
    assert body[0].startswith("# "), name
    status = body[1]
    m = re.fullmatch(r"Status: (current|in progress|superseded by \[[^\]]+\]\(([a-z0-9-]+\.md)\))", status)
    assert m, (name, status)
    if m.group(2):
      assert os.path.exists(os.path.join(folder, m.group(2))), (name, m.group(2))
    assert f"]({name})" in index, name


def test_registered_rows_come_first_and_the_rest_is_exploratory(tmp_path, monkeypatch):
  """With a pre-registered study's rows in FINDINGS (the toy registration of
  test_report_registered.py), the results page opens with them and calls the other tables
  exploratory; the README's sentence says how many draws each row rests on."""
  import test_report_registered as toy  # pylint: disable=import-outside-toplevel
  from experiments import report_registered  # pylint: disable=import-outside-toplevel
  _copy_inputs(tmp_path)
  runs = toy._sweep(tmp_path / "runs")
  data = report_registered.registered(runs, toy.REG, "rl_test_accuracy", str(tmp_path / "r.json"))
  (tmp_path / pages.SWEEPS / "toy_report.json").write_text(json.dumps(dict(registered=data)))
  rows = (pages.Finding("toy_o", "process reward", "toy oracle", "Δ vs grpo", "toy_report.json",
                        "O", "registered", sft="toy draws"),
          pages.Finding("toy_share", "process reward", "toy method", "share", "toy_report.json",
                        "method", "registered_share", sft="toy draws"))
  monkeypatch.setattr(pages, "FINDINGS", pages.FINDINGS + rows)
  monkeypatch.setattr(pages, "HEADLINE", ("toy_o", "toy_share") + pages.HEADLINE[2:])
  out = pages.render(str(tmp_path))
  results = out["docs/results.md"]
  first, headline = results.index("## Pre-registered replication"), results.index("## Headline")
  assert first < headline
  section = results[first:headline]
  assert "toy oracle: Δ vs grpo" in section and ": replicated |" in section
  assert "| 6 | toy draws (3 draws) |" in section and "toy method: share" in section
  # Where the rows come from: the registration, its commit (the toy file has none) and the report.
  assert "registered in no commit" in section and "SFT draws judged: 1, 2, 3." in section
  assert f"`{pages.SWEEPS}/toy_report.md`" in section
  assert "## Every method, by family (exploratory)" in results
  assert "every other finding rests on one SFT draw and is exploratory" in results
  # The toy rows are in the replication section, not again among the exploratory families.
  assert results.count("toy oracle: Δ vs grpo") == 2  # the replication section and the headline
  assert "a pre-registered comparison over several draws" in _block(out["README.md"])
  assert "the rows on one draw are exploratory." in _block(out["README.md"])
  _check_block(str(tmp_path), _block(out["README.md"]))  # the registered rows' numbers too
