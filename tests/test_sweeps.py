"""Sweeps: the launcher's commands, `config.init_from`, and the report on real smoke work dirs.

One smoke SFT is trained (in memory and checkpointed); two RL runs start from it through
`config.init_from`, as the sweep launcher arranges, and the report summarizes them.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import jax
import numpy as np
import pytest

from experiments import report
from experiments.sweeps import estimators, launch
from rl_jax import experiment, fingerprint, models
from rl_jax.metrics import MetricsWriter
from rl_jax.train import init_from, loop, phases

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# XLA optimizations off: compiling the smoke phases is most of these runs' time; what is checked
# (restored params, bit-equal SFTs of one program, the report's structure) holds either way.
pytestmark = pytest.mark.usefixtures("fast_compiles")


def test_launcher_dry_run_prints_commands_and_skips_finished_runs(tmp_path):
  done = tmp_path / "estimators" / "grpo_seed0"
  done.mkdir(parents=True)
  (done / "summary.json").write_text("{}")
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.sweeps.launch", "--sweep=estimators",
       "--base_config=experiments/configs/default.py", f"--workdir_root={tmp_path}", "--dry_run"],
      cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  assert len(lines) == 2 + len(estimators.get_sweep())  # One SFT per seed first.
  assert "_sft/seed0" in lines[0] and "--config.rl.steps=0" in lines[0]
  assert "done, skipped" in lines[2] and "grpo_seed0" in lines[2]
  gdpo = shlex.split(next(line for line in lines if "gdpo_format_seed1" in line))
  assert "--config.rl.advantage=gdpo" in gdpo
  assert f"--config.init_from={tmp_path}/estimators/_sft/seed1" in gdpo
  assert "--config.rl.rewards=('task_score', 'format')" in gdpo
  assert not any((tmp_path / "estimators").glob("*_seed1"))  # Nothing ran.


_PRINT_CONFIG = """
import functools, json, sys
from absl import app
from ml_collections import config_flags
config = config_flags.DEFINE_config_file("config", None, "", lock_config=True)
keys = sys.argv[1].split(",")
app.run(lambda _: print(json.dumps(
    {k: functools.reduce(getattr, k.split("."), config.value) for k in keys})),
    argv=[sys.argv[0]] + sys.argv[2:])
"""


def _script(code: str) -> list:
  return [sys.executable, "-c", code]


def test_launcher_jobs_run_after_the_shared_sft_and_side_by_side(tmp_path):
  """--jobs=2: the SFT-only step finishes before any run starts; two runs are in flight at once
  (run a waits for a file that run b writes, so one-after-another would fail); a run's output
  goes to its launch.log; a failed run raises naming its work dir after the others end."""
  d = {n: tmp_path / n for n in ("sft", "a", "b", "c")}
  wait_for_b = (f"import os, sys, time\nfor _ in range(600):\n  if os.path.exists("
                f"{str(d['b'] / 'mark')!r}): sys.exit(0)\n  time.sleep(0.05)\nsys.exit(3)")
  steps = [
      (str(d["sft"]), _script(f"import os; os.makedirs({str(d['sft'])!r}); "
                              f"open({str(d['sft'] / 'summary.json')!r}, 'w').write('{{}}')")
       + ["--config.rl.steps=0"]),
      (str(d["a"]), _script(f"import os; assert os.path.exists({str(d['sft'] / 'summary.json')!r})"
                            f"\n{wait_for_b}\n")),
      (str(d["b"]), _script(f"print('hello from b'); open({str(d['b'] / 'mark')!r}, 'w')")),
  ]
  launch.execute(steps, jobs=2)
  assert (d["b"] / "launch.log").read_text() == "hello from b\n"
  assert (d["a"] / "launch.log").exists()
  steps = [(str(d["c"]), _script("import sys; sys.exit(5)")), (str(d["b"]), _script("pass"))]
  with pytest.raises(RuntimeError, match=r"run .*c exited with status 5"):
    launch.execute(steps, jobs=2)


def test_launcher_runs_a_finished_run_again_when_its_sweep_entry_changed(tmp_path, capsys):
  """A finished run (summary.json) is skipped while its recorded config is the sweep entry's; once
  the entry changes (here rl.steps raised, which `experiments.run` continues), it runs again."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  flags_ = [f"--config={REPO}/experiments/configs/default.py:smoke", "--config.rl.kl_coef=0.5"]
  fingerprint.record(str(workdir), launch.run_config(flags_))
  (workdir / "summary.json").write_text("{}")
  mark = workdir / "ran"
  script = _script(f"open({str(mark)!r}, 'w')")
  launch.execute([(str(workdir), script + flags_)])
  assert not mark.exists() and "done, skipped" in capsys.readouterr().out
  launch.execute([(str(workdir), script + flags_ + ["--config.rl.steps=9"])])
  assert mark.exists()
  assert ("finished with other settings (config.rl.steps: 4 -> 9): run again"
          in capsys.readouterr().out)


def test_launcher_flags_parse_back_to_the_overrides(tmp_path):
  """The formatted `--config.k=v` flags give the sweep's values in the loaded config."""
  run = next(r for r in estimators.get_sweep() if r["name"] == "gdpo_format_seed1")
  args = launch.command("experiments/configs/default.py:smoke", str(tmp_path), run)
  keys = "rl.rewards,rl.advantage,seed,control.enabled"
  proc = subprocess.run(
      [sys.executable, "-c", _PRINT_CONFIG, keys, *[a for a in args if a.startswith("--config")]],
      cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  assert got == {"rl.rewards": ["task_score", "format"], "rl.advantage": "gdpo", "seed": 1,
                 "control.enabled": False}


def _rl_config(make, source, **rl):
  config = make()
  config.control.enabled = False
  config.init_from = str(source)
  config.rl.update(steps=2, eval_every=1, **rl)
  config.eval.temperatures = (1.0,)  # The sampled eval's temperature: no extra sampler compile.
  return config


@pytest.fixture(scope="module")
def sft_source(tmp_path_factory, smoke_config_factory, fast_compiles):
  """A work dir holding a finished smoke SFT, and its final params (from memory)."""
  del fast_compiles  # Requested first: the SFT compiles as the tests' SFTs do.
  workdir = str(tmp_path_factory.mktemp("sft"))
  config = smoke_config_factory()
  exp = experiment.build(config, workdir)
  with MetricsWriter(workdir) as writer:
    result = phases.sft(exp, "sft", phases.init_params(exp), config.sft.steps, writer)
  return workdir, jax.device_get(result.params)


def test_init_from_restores_the_sft_params(sft_source, smoke_config, tmp_path):
  source, params = sft_source
  smoke_config.init_from = source
  init_from.prepare(source, str(tmp_path))
  exp = experiment.build(smoke_config, str(tmp_path))
  init_from.check_same_data(source, str(tmp_path))
  loaded = init_from.load_sft(exp, source)
  assert loaded.steps == smoke_config.sft.steps
  for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(loaded.params)):
    np.testing.assert_array_equal(a, b)


def test_init_from_an_unrolled_sft_restores_scanned(sft_source, smoke_config, tmp_path):
  """`model.scan_layers` may differ from the source's: its checkpoint converts on restore."""
  source, params = sft_source
  smoke_config.init_from = source
  smoke_config.model.scan_layers = True
  init_from.prepare(source, str(tmp_path))
  exp = experiment.build(smoke_config, str(tmp_path))
  loaded = init_from.load_sft(exp, source)
  assert exp.model_cfg.scan_layers and "layers" in loaded.params
  jax.tree_util.tree_map(np.testing.assert_array_equal, jax.device_get(loaded.params),
                         models.stack_layers(params))


def test_init_from_errors(sft_source, smoke_config, tmp_path):
  missing = str(tmp_path / "nowhere")
  smoke_config.init_from = missing
  with pytest.raises(FileNotFoundError, match=os.path.join(missing, "checkpoints", "sft")):
    loop.run(smoke_config, str(tmp_path / "a"))
  smoke_config.init_from = sft_source[0]
  smoke_config.seed = 1  # Other task data than the source's.
  with pytest.raises(ValueError, match="different task, seed"):
    loop.run(smoke_config, str(tmp_path / "b"))


def test_report_from_two_smoke_runs(sft_source, smoke_config_factory, tmp_path):
  source, _ = sft_source
  for name, rl in (("grpo_seed0", {}), ("rloo_seed0", {"advantage": "rloo"})):
    summary = loop.run(_rl_config(smoke_config_factory, source, **rl), str(tmp_path / name))
    assert summary["init_from"] == source
    assert not os.path.exists(tmp_path / name / "checkpoints" / "sft")  # SFT was not rerun.
  runs = report.find_runs([str(tmp_path / "*")])
  assert [r["name"] for r in runs] == ["grpo_seed0", "rloo_seed0"]
  for r in runs:
    assert r["rollout_tokens"] > 0
    assert [p[0] for p in r["curve"]] == [0, 1, 2]
    tokens = [p[1] for p in r["curve"]]
    assert tokens == sorted(tokens) and tokens[-1] == r["rollout_tokens"]  # Cumulative.
  text = report.markdown(runs)
  assert "| grpo | 1 |" in text and "| rloo | 1 |" in text and "| rloo_seed0 | 0 |" in text
  png = report.plot(runs, str(tmp_path / "out" / "report.png"))
  with open(png, "rb") as f:
    assert f.read(8) == PNG_MAGIC


def _sft_params(config, workdir):
  exp = experiment.build(config, workdir)
  with MetricsWriter(workdir) as writer:
    return jax.device_get(phases.sft(exp, "sft", phases.init_params(exp), config.sft.steps,
                                     writer).params)


def test_pinned_sft_seed_gives_every_training_seed_the_same_sft(sft_source, smoke_config_factory,
                                                                tmp_path):
  """`sft.seed=0` with `seed=1` trains seed 0's SFT bit for bit (and may start RL from it);
  without the pin, seed 1 trains another SFT on the same problems."""
  source, params = sft_source
  pinned = smoke_config_factory()
  pinned.seed, pinned.sft.seed, pinned.task.seed = 1, 0, 0  # The source's problems (seed 0).
  for a, b in zip(jax.tree_util.tree_leaves(params),
                  jax.tree_util.tree_leaves(_sft_params(pinned, str(tmp_path / "pinned")))):
    np.testing.assert_array_equal(a, b)
  init_from.prepare(source, str(tmp_path / "rl"))
  experiment.build(pinned, str(tmp_path / "rl"))
  init_from.check_same_data(source, str(tmp_path / "rl"))  # Same demonstrations and tokenizer.
  own = smoke_config_factory()
  own.seed, own.task.seed = 1, 0
  leaves = zip(jax.tree_util.tree_leaves(params),
               jax.tree_util.tree_leaves(_sft_params(own, str(tmp_path / "own"))))
  assert any(not np.array_equal(a, b) for a, b in leaves)


def test_sft_seed_is_checked(smoke_config, tmp_path):
  smoke_config.sft.seed = -2
  with pytest.raises(ValueError, match=r"sft\.seed.*expected"):
    loop.run(smoke_config, str(tmp_path))


def test_launcher_shares_one_sft_when_the_base_config_pins_it(tmp_path):
  assert launch.base_sft_seed("experiments/configs/ladder.py") == 0
  assert launch.base_sft_seed("experiments/configs/default.py:smoke") == -1
  runs = [{"name": f"grpo_seed{s}", "seed": s} for s in (0, 1, 2)]
  pinned = launch.plan(runs, "experiments/configs/ladder.py", str(tmp_path), True, sft_seed=0)
  assert [w for w, _ in pinned][:2] == [str(tmp_path / "_sft" / "seed0"),
                                       str(tmp_path / "grpo_seed0")]  # One SFT, then the runs.
  assert all(f"--config.init_from={tmp_path}/_sft/seed0" in args for _, args in pinned[1:])
  assert {f"--config.seed={s}" for s in (0, 1, 2)} <= {a for _, args in pinned for a in args}
  own = launch.plan(runs, "experiments/configs/default.py", str(tmp_path), True)
  assert [w for w, _ in own][:3] == [str(tmp_path / "_sft" / f"seed{s}") for s in (0, 1, 2)]


