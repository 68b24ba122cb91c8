"""The generated pages: README.md's results block, docs/results.md and docs/benchmarks.md, from
committed JSON only.

    python -m experiments.pages [--root=DIR]

In: the report JSONs of `experiments/sweeps/` (experiments.report / merge_reports layout: a
`variants` list of objects with `name`) and the benchmark readings of `benchmarks/results/*.json`
(`benchmark`, `date`, `machine`, `command`, optional `status`, `result` and `rows`).
Out: README.md with the lines between `<!-- results:begin -->` and `<!-- results:end -->`
replaced (an error, one line, if either marker is missing), docs/results.md, docs/benchmarks.md.
Nothing else is read, so regenerating from the same JSON gives the same bytes
(tests/test_pages.py checks the committed pages against a fresh render).

Every number names its source as `FILE: KEY`. KEY is a path into FILE's JSON: dots separate keys,
`variants[NAME]` is the variant whose `name` is NAME, `rows[NAME]` the row whose `name` is NAME
(an entry without a `name` is named by its `id`, else its `method`: `registered.comparisons[F1]`),
`gates[I]` the I-th gate. A KEY that holds a list [mean, ci95] prints as `mean ± ci95`; a KEY
that holds a number x whose sibling `x_ci95` exists prints as `x ± x_ci95`.

What the rows are is data, not text (experiments/findings.py): FINDINGS (one `Finding` per number
of the method tables) and HEADLINE (which of them make the README's table). A pre-registered study
over several SFT draws adds Findings of the `registered` kinds: the results page puts them first
and calls the other tables exploratory, and the README's sentence on SFT draws follows its
headline rows.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re

from absl import flags

from experiments import cli
from experiments.findings import E, FINDINGS, G, HEADLINE, M, REGISTERED_KINDS, Finding

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
SWEEPS = "experiments/sweeps"
BENCH = "benchmarks/results"




# ---------------------------------------------------------------------------------------------
# Reading JSON by key path.

_PART = re.compile(r"([^.\[\]]+)(?:\[([^\]]+)\])?")


def split_key(key: str) -> list[tuple[str, str | None]]:
  """'variants[a.b].paired_delta.x' -> [('variants', 'a.b'), ('paired_delta', None), ('x', None)]."""
  parts, i = [], 0
  while i < len(key):
    m = _PART.match(key, i)
    if not m:
      raise ValueError(f"bad key path {key!r}")
    parts.append((m.group(1), m.group(2)))
    i = m.end() + 1  # the dot
  return parts


def _entry_name(x):
  """An entry's name for `[NAME]`: its `name`, else its `id`, else its `method`."""
  if not isinstance(x, dict):
    return None
  for k in ("name", "id", "method"):
    if k in x:
      return x[k]
  return None


def lookup(data, key: str):
  """The value at `key` (module docstring's syntax) in `data`; KeyError naming the key."""
  node = data
  for name, index in split_key(key):
    if not isinstance(node, dict) or name not in node:
      raise KeyError(f"{key}: no {name!r}")
    node = node[name]
    if index is not None:
      if index.isdigit() and isinstance(node, list) and not any(
          _entry_name(x) == index for x in node):
        node = node[int(index)]
      else:
        hits = [x for x in node if _entry_name(x) == index]
        if len(hits) != 1:
          raise KeyError(f"{key}: {len(hits)} entries named {index!r}")
        node = hits[0]
  return node


def value_pair(data, key: str) -> tuple[float, float | None]:
  """(value, ci95) at `key`: a [mean, ci95] list, or a number and its `_ci95` sibling."""
  v = lookup(data, key)
  if isinstance(v, list):
    return float(v[0]), (None if v[1] is None else float(v[1]))
  head, _, last = key.rpartition(".")
  sibling = f"{head}.{last}_ci95" if head else f"{last}_ci95"
  try:
    ci = lookup(data, sibling)
  except KeyError:
    ci = None
  return float(v), (None if ci is None else float(ci))


def load(root: str, name: str) -> dict:
  path = os.path.join(root, SWEEPS, name)
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"cannot read {SWEEPS}/{name} ({e})") from None


# ---------------------------------------------------------------------------------------------
# One finding -> its cells.

@dataclasses.dataclass(frozen=True)
class Cell:
  text: str  # the value as printed
  seeds: int  # runs paired (seeds; for a registered comparison, SFT draw x seed pairs)
  source: str  # `FILE: KEY`
  sft_draws: int | None = None  # read from the report (registered kinds), else the Finding's


def _seed_ids(data, variant):
  v = lookup(data, f"variants[{variant}]")
  return set(v.get("seed_ids") or [int(s) for s in v.get("test_accuracy_by_seed", {})])


def _num(x, spec: str) -> str:
  """`x` formatted by `spec`; 'n/a' for a value the report could not estimate (null)."""
  return "n/a" if x is None else format(x, spec)


def cell(root: str, f: Finding) -> Cell:
  """The printed value, its number of seeds and its source, read from f.report."""
  data = load(root, f.report)
  base = f"variants[{f.variant}]"
  if f.kind == "delta":
    key = f"{base}.paired_delta.{f.baseline}"
    mean, ci = value_pair(data, key)
    seeds = len(_seed_ids(data, f.variant) & _seed_ids(data, f.baseline))
    return Cell(f"{mean:+.3f} ± {ci:.3f}", seeds, f"{f.report}: {key}")
  if f.kind == "share":
    key = f"{base}.recovered_share"
    share, ci = value_pair(data, key)
    seeds = int(lookup(data, f"{base}.recovered.seeds"))
    text = f"{share:.2f} ± {ci:.2f}" if ci is not None else f"{share:.2f}, not resolved"
    return Cell(text, seeds, f"{f.report}: {key}")
  if f.kind == "from_to":
    a, b = (lookup(data, f"{base}.{k}") for k in f.keys)
    keys = " -> ".join(f"{base}.{k}" for k in f.keys)
    return Cell(f"{a:.3f} -> {b:.3f}", int(lookup(data, f"{base}.seeds")),
                f"{f.report}: {keys}")
  if f.kind == "registered":
    key = f"registered.comparisons[{f.variant}]"
    c = lookup(data, key)
    verdict = {True: "replicated", False: "not replicated", None: "not judged yet"}[
        c["replicated"]]
    text = (f"{_num(c['mean'], '+.3f')} ± {_num(c['ci'], '.3f')} (Holm-corrected ± "
            f"{_num(c['ci_corrected'], '.3f')}; Holm p {_num(c['p_holm'], '.3f')}): {verdict}")
    return Cell(text, int(c["units"]), f"{f.report}: {key}", sft_draws=int(c["sfts"]))
  if f.kind == "registered_share":
    key = f"registered.shares[{f.variant}]"
    s = lookup(data, key)
    low, high = s["fieller95"]
    text = (f"{_num(s['share'], '.2f')}, Fieller [{_num(low, '.2f')}, {_num(high, '.2f')}]"
            if s["bounded"] else f"{_num(s['share'], '.2f')}, Fieller interval unbounded")
    draws = len(lookup(data, "registered.sft_draws_complete"))
    return Cell(text, int(s["replicates"]), f"{f.report}: {key}", sft_draws=draws)
  raise ValueError(f"finding {f.id}: unknown kind {f.kind!r}")


def _sft(f: Finding, c: Cell) -> str:
  n = f.sft_draws if c.sft_draws is None else c.sft_draws
  draws = "one draw" if n == 1 else f"{n} draws"
  return f"{f.sft} ({draws})"


def _row(cells):
  return "| " + " | ".join(cells) + " |"


def findings_table(root: str, findings, wording: bool) -> list[str]:
  head = ["finding", "value (± 95% interval)", "seeds", "SFT", "source"]
  lines = [_row(head), _row(["---"] * len(head))]
  for f in findings:
    c = cell(root, f)
    name = f"{f.method}: {f.measure}" + (f"; {f.wording}" if wording and f.wording else "")
    lines.append(_row([name, c.text, str(c.seeds), _sft(f, c), f"`{c.source}`"]))
  return lines


def by_id(ids):
  table = {f.id: f for f in FINDINGS}
  missing = [i for i in ids if i not in table]
  if missing:
    raise ValueError(f"HEADLINE names no finding {missing}")
  return [table[i] for i in ids]


# ---------------------------------------------------------------------------------------------
# The three outputs.

def _draws_sentence(root: str, findings) -> str:
  """How many SFT draws the findings rest on, as the table's reader needs it said."""
  several = [f for f in findings if (cell(root, f).sft_draws or f.sft_draws) > 1]
  if not several:
    return "Every finding rests on ONE SFT draw; the column says which."
  one = [f for f in findings if f not in several]
  return ("The SFT column says how many SFT draws each finding rests on; a pre-registered "
          "comparison over several draws treats the draw as the unit (its interval and Holm "
          "p-value are over draws) and says whether the finding replicated"
          + ("; the rows on one draw are exploratory." if one else "."))


def readme_block(root: str) -> str:
  """The lines between the README's markers (markers excluded), ending in a newline."""
  lines = ["", "What helps on the proving ground (test accuracy, paired over seeds; ± is the 95% "
           "interval). " + _draws_sentence(root, by_id(HEADLINE)), ""]
  lines += findings_table(root, by_id(HEADLINE), wording=True)
  lines += ["", "Generated by `python -m experiments.pages` from the cited report JSON; every "
            "method, every SFT draw and the benchmarks: [docs/results.md](docs/results.md), "
            "[docs/benchmarks.md](docs/benchmarks.md).", ""]
  return "\n".join(lines) + "\n"


def splice(readme: str, block: str) -> str:
  """`readme` with the text between its marker lines replaced by `block`."""
  lines = readme.splitlines(keepends=True)
  starts = [i for i, l in enumerate(lines) if l.strip() == BEGIN]
  ends = [i for i, l in enumerate(lines) if l.strip() == END]
  if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
    raise ValueError(f"README.md needs one line {BEGIN} and, after it, one line {END} "
                     f"(found {len(starts)} and {len(ends)})")
  return "".join(lines[:starts[0] + 1]) + block + "".join(lines[ends[0]:])


def _report_status(root: str) -> list[str]:
  lines = [_row(["report", "status"]), _row(["---", "---"])]
  for path in sorted(glob.glob(os.path.join(root, SWEEPS, "*_report.json"))):
    name = os.path.basename(path)
    data = load(root, name)
    status = data.get("status", "not marked")
    if data.get("superseded_by"):
      status += f" by `{SWEEPS}/{data['superseded_by']}`"
    lines.append(_row([f"`{SWEEPS}/{name}`", status]))
  return lines


def _acc(root: str, report: str, variant: str = "grpo_g4") -> str:
  """A variant's mean test accuracy with its source, as prose."""
  key = f"variants[{variant}].test_accuracy"
  return f"{lookup(load(root, report), key):.3f} (`{report}: {key}`)"


def _registration_lines(root: str, findings) -> list[str]:
  """For each report the registered rows read: its registration file and commit, the runs'
  commits, whether the registration precedes them, the SFT draws judged, the full report."""
  out = []
  for name in dict.fromkeys(f.report for f in findings):
    data = lookup(load(root, name), "registered")
    prov = data["provenance"]
    reg = prov["registered"]
    commits = sorted({e["commit"][:10] for e in prov["launches"] if e.get("commit")})
    precedes = {True: "yes", False: "**no**", None: "unknown"}[prov["registration_precedes_runs"]]
    out.append(
        f"- `{data['file']}`: registered in "
        + (f"commit {reg[0][:10]} ({reg[1]})" if reg else "no commit")
        + f"; runs launched from {', '.join(commits) or 'no recorded commit'}; the registration "
        f"precedes every run: {precedes}. SFT draws judged: "
        f"{', '.join(map(str, data['sft_draws_complete'])) or 'none'}. The whole report (per-draw "
        f"spread, sign tests, what each mechanism did): `{SWEEPS}/{name[:-len('.json')]}.md`.")
  return out


def results_page(root: str) -> str:
  registered = [f for f in FINDINGS if f.kind in REGISTERED_KINDS]
  out = ["# Results", "",
         "<!-- Generated by `python -m experiments.pages` from committed JSON; do not edit. -->",
         "",
         "Each number is read from the report named in its row, at the key named there "
         "(`variants[NAME]` is the variant called NAME). ± is the 95% t interval over seeds; "
         "a share is (method − G = 4) / (oracle − G = 4) with its delta-method interval. "
         "The proving ground, its oracles and how each table was measured: "
         "[the research log](research/index.md).", "",
         ("**The pre-registered replication comes first; every other finding rests on one SFT "
          "draw and is exploratory.**" if registered else
          "**Every finding here rests on one SFT draw.**") +
         " The runs of a row start from one SFT "
         "policy, and a second SFT draw (the \"retrained\" one, made by the same code on "
         f"another machine) moved GRPO G = 4's test accuracy from {_acc(root, M)} to "
         f"{_acc(root, E)}. The \"first\" SFT is ground v2's (the ground_v2 and "
         "methods_v2 tables); the \"retrained\" one is the engines' table's. PAV, the oracle "
         "process reward and LATR over 64 prompts were measured from both, separately; no "
         "difference is ever taken across the two.", ""]
  if registered:
    out += ["## Pre-registered replication", "",
            "Each row is a comparison its registration file declared before the runs, judged on "
            "fresh SFT draws with the draw as the unit: the estimate ± its 95% interval over "
            "draws, the Holm-corrected interval and p-value over the declared comparisons, and "
            "whether the finding replicated (Holm p below 0.05).", ""]
    out += _registration_lines(root, registered) + [""]
    out += findings_table(root, registered, wording=True)
    out.append("")
  out += ["## Headline", ""]
  out += findings_table(root, by_id(HEADLINE), wording=True)
  rest = [f for f in FINDINGS if f.kind not in REGISTERED_KINDS]
  families = list(dict.fromkeys(f.family for f in rest))
  out += ["", "## Every method, by family" + (" (exploratory)" if registered else ""), ""]
  for family in families:
    out += [f"### {family[0].upper() + family[1:]}", ""]
    out += findings_table(root, [f for f in rest if f.family == family], wording=True)
    out.append("")
  gates = load(root, G).get("gates", [])
  out += ["## The proving ground's gates (ground v2)", "",
          _row(["gate", "measured", "seeds", "met", "source"]), _row(["---"] * 5)]
  for i, g in enumerate(gates):
    v = g["value"]
    text = f"{v[0]:+.3f} ± {v[1]:.3f}" if isinstance(v, list) else f"{v:.3f}"
    out.append(_row([g["gate"], text, str(g["seeds"]), "yes" if g["met"] else "**no**",
                     f"`{G}: gates[{i}].value`"]))
  out += ["", "## Reports and their status", ""] + _report_status(root) + [""]
  return "\n".join(out)


def _fmt(v) -> str:
  if isinstance(v, bool):
    return "yes" if v else "no"
  if isinstance(v, float):
    return f"{v:.6g}"
  if isinstance(v, list):
    return ", ".join(_fmt(x) for x in v)
  return str(v)


def _flatten(d, prefix=""):
  for k, v in d.items():
    path = f"{prefix}.{k}" if prefix else k
    if isinstance(v, dict):
      yield from _flatten(v, path)
    elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
      for i, x in enumerate(v):
        yield from _flatten(x, f"{path}[{i}]")
    else:
      yield path, v


def benchmarks_page(root: str) -> str:
  out = ["# Benchmarks", "",
         "<!-- Generated by `python -m experiments.pages` from committed JSON; do not edit. -->",
         "",
         "One section per measured reading, transcribed from the benchmark's printed JSON line "
         "or table into `benchmarks/results/`. Absolute CPU times on a shared 2-core machine "
         "mean little; read the ratios, which come from one run. Every value is the file's key "
         "named in its row or column (`rows[NAME].COLUMN`).", ""]
  paths = sorted(glob.glob(os.path.join(root, BENCH, "*.json")))
  for path in paths:
    name = os.path.basename(path)
    with open(path) as f:
      data = json.load(f)
    status = data.get("status", "current")
    if data.get("superseded_by"):
      status += f" by `{BENCH}/{data['superseded_by']}`"
    out += [f"## {data['benchmark']}: {name[:-5]}", "",
            f"- date: {data['date']}; status: {status}", f"- machine: {data['machine']}"]
    if data.get("code"):
      out.append(f"- code: {data['code']}")
    if data.get("note"):
      out.append(f"- note: {data['note']}")
    out += [f"- source: `{BENCH}/{name}`", "", "```", data["command"], "```", ""]
    if data.get("rows"):
      cols = list(dict.fromkeys(k for r in data["rows"] for k in r if k != "name"))
      out += [_row(["rows[NAME]"] + cols), _row(["---"] * (len(cols) + 1))]
      for r in data["rows"]:
        out.append(_row([r["name"]] + [_fmt(r[c]) if c in r else "" for c in cols]))
      out.append("")
    if data.get("result"):
      out += [_row(["key", "value"]), _row(["---", "---"])]
      for k, v in _flatten(data["result"]):
        out.append(_row([f"`result.{k}`", _fmt(v)]))
      out.append("")
  return "\n".join(out)


def render(root: str) -> dict[str, str]:
  """{relative path: text} of the three outputs, from the JSON under `root`."""
  readme_path = os.path.join(root, "README.md")
  try:
    with open(readme_path) as f:
      readme = f.read()
  except OSError as e:
    raise ValueError(f"cannot read README.md ({e})") from None
  return {"README.md": splice(readme, readme_block(root)),
          "docs/results.md": results_page(root),
          "docs/benchmarks.md": benchmarks_page(root)}


def main(argv):
  cli.start(argv, quiet=False)
  root = _ROOT.value
  pages = render(root)
  os.makedirs(os.path.join(root, "docs"), exist_ok=True)
  for rel, text in pages.items():
    with open(os.path.join(root, rel), "w") as f:
      f.write(text)
  print(" ".join(sorted(pages)))


if __name__ == "__main__":
  _ROOT = flags.DEFINE_string("root", ".", "The repository's root (pages are written there).")
  cli.run(main)
