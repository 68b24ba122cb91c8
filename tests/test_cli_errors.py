"""A user's mistakes end in ONE line on stderr, `error: ...`, before any compute (issue 34).

The command line is run as a user meets it (a subprocess of `python -m experiments.run`) for a
few cases; the config checks behind it are tested in-process over every registry-name field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import ml_collections
import pytest

from rl_jax import fingerprint
from rl_jax import workdir as workdir_lib
from rl_jax.train import config_check, loop
from rl_jax.train import store as store_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = "--config=experiments/configs/default.py:smoke"


def _cli(*args, module="experiments.run", timeout=120, **env):
  environ = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  environ.update(env)
  return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True,
                        text=True, timeout=timeout, check=False, env=environ)


def _one_error_line(proc) -> str:
  lines = proc.stderr.splitlines()
  assert proc.returncode != 0
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
  return lines[0]


@pytest.mark.parametrize("args, expected", [
    pytest.param([SMOKE, "--config.rl.advantage=grpoo"],
                 "config.rl.advantage='grpoo': expected one of [", id="registry_name"),
    pytest.param([SMOKE, "--config.rl.stepz=3"],
                 "--config.rl.stepz=3: the config has no field 'stepz'; did you mean 'steps'?",
                 id="mistyped_field"),
    pytest.param(["--config=experiments/configs/nope.py"], "no such file", id="missing_config"),
])
def test_a_users_mistake_is_one_line(tmp_path, args, expected):
  t0 = time.monotonic()
  proc = _cli(*args, f"--workdir={tmp_path / 'run'}")
  line = _one_error_line(proc)
  assert expected in line
  assert time.monotonic() - t0 < 30
  assert not (tmp_path / "run").exists()  # Failed before writing anything.
  if "grpoo" in expected:
    assert line.endswith("did you mean 'grpo'?")


@pytest.mark.parametrize("path, expected", [
    ("no-such-org/no-such-model", "config.model.path='no-such-org/no-such-model' is no local "
     "directory, and as a hub id: could not fetch Hugging Face hub model 'no-such-org/no-such-model' (HF_HUB_OFFLINE is set"),
    ("/nonexistent/checkpoint", "config.model.path='/nonexistent/checkpoint' does not exist"),
], ids=["hub_id_offline", "missing_dir"])
def test_a_model_path_that_loads_nothing_is_one_line(tmp_path, path, expected):
  proc = _cli(SMOKE, f"--workdir={tmp_path / 'run'}", f"--config.model.path={path}",
              "--config.tokenizer.kind=hf", HF_HUB_OFFLINE="1",
              HF_HUB_CACHE=str(tmp_path / "hub"))
  assert expected in _one_error_line(proc)


def test_workdir_that_is_a_file_and_the_debug_switch(tmp_path):
  path = tmp_path / "a_file"
  path.write_text("x")
  line = _one_error_line(_cli(SMOKE, f"--workdir={path}"))
  assert line == f"error: --workdir={path} is a file; expected a directory (or a new path)"
  debug = _cli(SMOKE, f"--workdir={path}", RL_JAX_DEBUG="1")
  assert debug.returncode != 0 and "Traceback (most recent call last)" in debug.stderr


def _field_paths():
  return sorted(config_check._registry_names())  # pylint: disable=protected-access


@pytest.mark.parametrize("path", _field_paths())
def test_every_registry_name_is_checked(smoke_config, path):
  *parents, leaf = path.split(".")
  node = smoke_config
  for p in parents:
    node = node[p]
  names = config_check._registry_names()[path]  # pylint: disable=protected-access
  good = [n for n in names if n][0]
  bad = good + "x"
  node[leaf] = (bad,) if isinstance(node[leaf], tuple) else bad
  with pytest.raises(config_check.ConfigError, match="expected one of") as info:
    config_check.check(smoke_config)
  assert f"did you mean {good!r}" in str(info.value) or "did you mean" in str(info.value)
  assert "\n" not in str(info.value)


@pytest.mark.parametrize("field, value, match", [
    ("model.n_heads", 3, r"d_model=32, config.model.n_heads=3: expected d_model to be a multiple"),
    ("rl.group_size", 1, r"group_size=1 with config.rl.advantage='grpo': a group-relative"),
])
def test_shape_and_group_checks(smoke_config, field, value, match):
  section, leaf = field.split(".")
  smoke_config[section][leaf] = value
  with pytest.raises(config_check.ConfigError, match=match):
    config_check.check(smoke_config)


def _math_task(config, **options):
  config.task.name = "math"
  config.task.options = ml_collections.ConfigDict(options)


def test_math_task_and_chat_template_checks(smoke_config, tmp_path):
  """The `math` task's options and the chat-template fields fail in one line naming the path,
  the file's fields or the option names."""
  missing = str(tmp_path / "nope.jsonl")
  _math_task(smoke_config, path=missing)
  with pytest.raises(config_check.ConfigError, match=f"task.options.path={missing!r} does not"):
    config_check.check(smoke_config)
  path = tmp_path / "m.jsonl"
  path.write_text(json.dumps({"problem": "1+1?", "solution": "\\boxed{2}"}) + "\n")
  _math_task(smoke_config, path=str(path))
  with pytest.raises(config_check.ConfigError, match=r"its fields are \['problem', 'solution'\]"):
    config_check.check(smoke_config)
  _math_task(smoke_config, path=str(path), question_key="problem", answer_key="solution")
  with pytest.raises(config_check.ConfigError, match="demo_noise=0.6: the 'math' task has no"):
    config_check.check(smoke_config)  # default.py:smoke's noisy chain_sum demonstrations
  smoke_config.task.demo_noise = 0.0
  config_check.check(smoke_config)
  smoke_config.tokenizer.system_prompt = "Be brief."
  with pytest.raises(config_check.ConfigError, match="set config.task.chat_template=True"):
    config_check.check(smoke_config)
  smoke_config.tokenizer.system_prompt = ""
  smoke_config.tokenizer.template_kwargs = ml_collections.ConfigDict({"enable_thinking": False})
  with pytest.raises(config_check.ConfigError, match="set config.task.chat_template=True") as e:
    config_check.check(smoke_config)
  assert "\n" not in str(e.value)


def test_math_task_options_from_the_command_line(tmp_path):
  """`--config.task.name=math` keeps chain_sum's options: one line names them and the task's."""
  proc = _cli(SMOKE, "--config.task.name=math", f"--workdir={tmp_path / 'run'}")
  line = _one_error_line(proc)
  assert "are not options of the 'math' task; expected some of [" in line
  assert not (tmp_path / "run").exists()


def test_new_fields_do_not_refuse_an_old_workdir(smoke_config_factory, tmp_path):
  """A work dir recorded before the chat-template fields existed resumes under today's defaults."""
  old = json.loads(smoke_config_factory().to_json())
  del old["tokenizer"]["system_prompt"], old["tokenizer"]["template_kwargs"]
  fingerprint.record(str(tmp_path), old)
  fingerprint.check(str(tmp_path), smoke_config_factory())  # No error.
  changed = smoke_config_factory()
  changed.tokenizer.system_prompt = "x"
  fingerprint.check(str(tmp_path), changed)  # Not compared: the old run had no such field.


def test_corrupt_evals_json_is_named(tmp_path):
  path = tmp_path / workdir_lib.EVALS_FILE
  path.write_text("{not json")
  with pytest.raises(ValueError, match=rf"{path} is not valid JSON"):
    store_lib.Store(str(path))


def test_a_workdir_belongs_to_one_configuration(smoke_config_factory, tmp_path):
  """The first run's results-affecting fields are recorded; a re-run with other values is
  refused before anything runs, naming the fields; display-only fields may differ."""
  first = smoke_config_factory()
  fingerprint.record(str(tmp_path), first)
  changed = smoke_config_factory()
  changed.rl.optim.lr = 5e-4
  changed.rl.kl_coef = 0.0
  with pytest.raises(fingerprint.ConfigMismatch) as info:
    loop.run(changed, str(tmp_path))
  msg = str(info.value)
  assert "config.rl.kl_coef: 0.02 -> 0.0" in msg and "config.rl.optim.lr: 0.0001 -> 0.0005" in msg
  assert "\n" not in msg
  assert sorted(os.listdir(tmp_path)) == [fingerprint.FINGERPRINT_FILE]  # Nothing else written.

  allowed = smoke_config_factory()
  allowed.progress = True
  allowed.compile_cache_dir = str(tmp_path / "elsewhere")
  allowed.interrupt_at = "rl:2"
  fingerprint.check(str(tmp_path), allowed)  # No error.
  # A run made before fingerprints existed is checked against its run_config.json.
  legacy = json.loads(first.to_json())
  with pytest.raises(fingerprint.ConfigMismatch, match="config.rl.kl_coef: 0.02 -> 0.0"):
    fingerprint.check(str(tmp_path / "legacy"), changed, legacy)


def test_an_sft_only_run_is_not_another_configuration_for_its_rl_fields(smoke_config_factory,
                                                                       tmp_path):
  """With rl.steps = 0 on both sides (a sweep's shared SFT) the RL fields are not compared; any
  other field still is."""
  first = smoke_config_factory()
  first.rl.steps = 0
  fingerprint.record(str(tmp_path), first)
  other_rl = smoke_config_factory()
  other_rl.rl.steps = 0
  other_rl.rl.optim.lr = 4e-5
  fingerprint.check(str(tmp_path), other_rl)  # No error.
  other_rl.sft.optim.lr = 1e-2
  with pytest.raises(fingerprint.ConfigMismatch, match="config.sft.optim.lr") as info:
    fingerprint.check(str(tmp_path), other_rl)
  assert "rl.optim.lr" not in str(info.value).replace("sft.optim.lr", "")


@pytest.mark.parametrize("change, why", [
    pytest.param({}, None, id="constant_rate_continues"),
    pytest.param({"rl.optim.schedule": "cosine"}, "learning-rate schedule reads rl.steps",
                 id="cosine"),
    pytest.param({"rl.optim.warmup_steps": 4}, "ended inside its warmup", id="warmup"),
    pytest.param({"control.enabled": True}, "control's steps derive from rl.steps",
                 id="derived_control"),
    pytest.param({"new_steps": 2}, "cannot be shortened", id="shorter"),
])
def test_more_rl_steps_is_a_continuation_only_when_the_steps_taken_do_not_read_it(
    smoke_config_factory, tmp_path, change, why):
  """Raising rl.steps continues the work dir's run (`fingerprint.continuation`) when the steps it
  took do not depend on the total; otherwise the refusal names the field and the reason."""
  def config(steps):
    c = smoke_config_factory()
    c.rl.steps = steps
    c.rl.optim.update(schedule="constant", warmup_steps=1)
    c.control.update(enabled=False, steps=0)
    for key, value in change.items():
      if key != "new_steps":
        c.update_from_flattened_dict({key: value})
    return c

  fingerprint.record(str(tmp_path), config(3))
  new = config(change.get("new_steps", 5))
  if why is None:
    assert fingerprint.check(str(tmp_path), new, continuable=True) == (3, 5)
    # Only a run that goes on may continue (experiments.eval / export compare exactly).
    with pytest.raises(fingerprint.ConfigMismatch, match="config.rl.steps: 3 -> 5"):
      fingerprint.check(str(tmp_path), new)
    new.rl.kl_coef = 0.5  # Any other change is still another configuration.
    with pytest.raises(fingerprint.ConfigMismatch, match="config.rl.kl_coef"):
      fingerprint.check(str(tmp_path), new, continuable=True)
  else:
    with pytest.raises(fingerprint.ConfigMismatch) as info:
      fingerprint.check(str(tmp_path), new, continuable=True)
    assert "config.rl.steps: 3 -> " in str(info.value) and why in str(info.value)
