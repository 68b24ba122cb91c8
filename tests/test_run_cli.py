"""The command line end to end (`python -m experiments.run`), and its errors on bad input.

The full pipeline runs once, as the README's command does, on the `:smoke` variant. Errors that
come from the config itself are checked in-process (`loop.run`), which is much faster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from experiments.configs import default
from rl_jax import workdir as workdir_lib
from rl_jax.train import loop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = "--config=experiments/configs/default.py:smoke"
ACCURACIES = ("sft_accuracy", "rl_accuracy", "sft_sampled_accuracy", "rl_sampled_accuracy",
              "sft_more_accuracy", "sft_best_temperature_accuracy")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _cli(*args, timeout=300, env=None):
  return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=REPO,
                        capture_output=True, text=True, timeout=timeout, check=False, env=env)


def test_smoke_run_writes_every_output(tmp_path):
  workdir = tmp_path / "run"
  # As a user's shell has it: no JAX_PLATFORMS (the tests set cpu); libtpu (the [test] extra)
  # must not print its start-up errors on this TPU-less machine.
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  proc = _cli(SMOKE, f"--workdir={workdir}", env=env)
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert "TPU" not in proc.stderr and "libtpu" not in proc.stderr, proc.stderr[-4000:]

  with open(workdir / workdir_lib.SUMMARY_FILE) as f:
    summary = json.load(f)
  for key in ACCURACIES:
    assert isinstance(summary[key], float), (key, summary[key])
    assert 0.0 <= summary[key] <= 1.0, (key, summary[key])
  assert summary["rl_steps"] == default.get_config("smoke").rl.steps
  assert summary["sft_more_steps"] >= 1
  assert isinstance(summary["wall_seconds"], float) and summary["wall_seconds"] > 0
  # The command prints the summary (without the per-eval details) as its last output.
  printed = json.loads(proc.stdout[proc.stdout.index("{"):])
  assert printed == {k: v for k, v in summary.items() if k != "evals"}

  assert (workdir / "metrics.jsonl").stat().st_size > 0
  assert any(name.startswith("events.out.tfevents") for name in os.listdir(workdir / "tb"))
  assert (workdir / "curves.png").read_bytes()[:8] == PNG_MAGIC
  assert sorted(os.listdir(workdir / "checkpoints")) == ["rl", "sft", "sft_more"]


def test_mistyped_override_names_the_field(tmp_path):
  proc = _cli(SMOKE, "--config.rl.stepz=3", f"--workdir={tmp_path}")
  assert proc.returncode != 0
  assert "stepz" in proc.stderr
  assert not os.listdir(tmp_path)  # Failed before writing anything.


def test_unknown_variant_names_it(tmp_path):
  proc = _cli("--config=experiments/configs/default.py:nope", f"--workdir={tmp_path}")
  assert proc.returncode != 0
  assert "'nope'" in proc.stderr
  with pytest.raises(ValueError, match="unknown variant 'nope'"):
    default.get_config("nope")


@pytest.mark.parametrize("section, field, value, match", [
    pytest.param("task", "train_size", 0, r"config\.task\.train_size=0: expected an integer >= 1",
                 id="empty_dataset"),
    pytest.param("task", "name", "chain_sumz",
                 r"task name 'chain_sumz' is not a reasoning-gym dataset", id="unknown_task"),
    # 8 tokens of context minus sampling.max_new_tokens=5 leaves 3 for the prompt.
    pytest.param("model", "max_seq_len", 8, r"prompt '.*' is \d+ tokens long; expected at most 3",
                 id="prompt_longer_than_context"),
])
def test_bad_config_raises_a_clear_error(smoke_config, tmp_path, section, field, value, match):
  setattr(smoke_config[section], field, value)
  with pytest.raises(ValueError, match=match):
    loop.run(smoke_config, str(tmp_path))


@pytest.mark.parametrize("error,status", [
    ("preempted", 128 + 15), ("config", 1), ("nonfinite", 1)])
def test_stops_and_errors_become_exit_statuses(monkeypatch, capsys, error, status):
  """A signal's stop exits 128 + its number (the run wrote a checkpoint: re-run to resume); a
  config value out of range or a non-finite streak exits 1 with a one-line message."""
  from experiments import run as run_cli  # pylint: disable=g-import-not-at-top
  from rl_jax.train import config_check, phases, signals  # pylint: disable=g-import-not-at-top
  raised = {"preempted": signals.Preempted("SIGTERM received; stopped after rl step 3", 15),
            "config": config_check.ConfigError("config.rl.steps=-1: expected an integer >= 0"),
            "nonfinite": phases.NonFiniteError("rl steps 1-5: 5 steps in a row")}[error]

  def fake_run(config, workdir):
    raise raised

  monkeypatch.setattr(loop, "run", fake_run)
  monkeypatch.setattr(run_cli, "_CONFIG", type("C", (), {"value": None})())
  monkeypatch.setattr(run_cli, "_WORKDIR", type("W", (), {"value": "unused"})())
  for name, value in (("_DISTRIBUTED", False), ("_COORDINATOR", None), ("_NUM_PROCESSES", None),
                      ("_PRINT_CONFIG", False),
                      ("_PROCESS_ID", None)):  # Single process: no jax.distributed.
    monkeypatch.setattr(run_cli, name, type("F", (), {"value": value})())
  with pytest.raises(SystemExit) as info:
    run_cli.main(["run"])
  assert info.value.code == status
  assert str(raised) in capsys.readouterr().err
