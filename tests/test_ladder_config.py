"""experiments/configs/ladder.py: the proving ground's `:smoke` variant end to end, and its
summary fields (per-stratum accuracy, success-rate histogram, step error rates)."""

from __future__ import annotations

import collections
import json
import os

import pytest

from experiments.configs import ladder as ladder_config
from experiments.configs import ladder2 as ladder2_config
from rl_jax import data
from rl_jax import experiment
from rl_jax.data import ladder as ladder_data
from rl_jax.train import config_check, loop

# XLA optimizations off: compiling the pipeline is most of these runs' time; what is checked (the
# summary's fields and bounds, one run's figures against another's) holds either way.
pytestmark = pytest.mark.usefixtures("fast_compiles")

@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, fast_compiles):
  """The `:smoke` run with its defaults: (config, summary, work dir)."""
  del fast_compiles  # Requested first: the run compiles as the tests' own runs do.
  config = ladder_config.get_config("smoke")
  workdir = tmp_path_factory.mktemp("ladder_smoke")
  return config, loop.run(config, str(workdir)), workdir


def test_ladder_smoke_end_to_end(smoke_run):
  config, summary, tmp_path = smoke_run
  strata = [str(k) for k in range(2, 8)]
  for phase in ("sft", "rl"):
    by_stratum = summary[f"{phase}_accuracy_by_stratum"]
    assert sorted(by_stratum) == strata
    assert all(0.0 <= v <= 1.0 for v in by_stratum.values())
    assert 0.0 <= summary[f"{phase}_step_error_rate"] <= 1.0
    hist = summary[f"{phase}_success_rate_histogram"]
    assert len(hist) == 10 and sum(hist) == config.task.eval_size
  shares = summary["sft_success_rate_shares"]
  assert sum(shares.values()) == pytest.approx(1.0)
  assert summary["success_rate_samples"] == config.eval.num_samples >= 8
  records = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  assert any("heldout_step_error_rate" in r for r in records if r["phase"] == "rl")
  assert any(r.get("rollout_tokens", 0) > 0 for r in records if r["phase"] == "rl")
  assert os.path.getsize(tmp_path / "curves.png") > 5_000
  assert not [k for k in summary if "test" in k]  # no test set by default (task.test_size = 0)


def test_ladder_test_set_and_eval_subset(smoke_run, tmp_path, monkeypatch):
  """task.test_size adds greedy test accuracies to the summary and changes nothing else (the
  dev figures and every training metric are those of the default run); rl.eval_subset = N runs
  the periodic evaluations on N dev problems (N/6 per stratum), the final ones on all of
  them."""
  _, default, default_dir = smoke_run
  config = _with(ladder_config.get_config("smoke"), task_test_size=24)
  config.rl.eval_subset = 12
  sizes = []
  completions = loop.evaluate.completions

  def counted(params, prompts, *args, **kwargs):
    sizes.append(len(prompts))
    return completions(params, prompts, *args, **kwargs)

  monkeypatch.setattr(loop.evaluate, "completions", counted)
  dev = data.make_task("ladder", config.task.options.to_dict(), config.task.seed,
                       config.task.train_size, config.task.eval_size).heldout
  subset = [dev[i] for i in loop.evaluate.spread(len(dev), 12)]
  assert collections.Counter(ladder_data.LadderTask.stratum(e) for e in subset) == {
      k: 2 for k in range(2, 8)}
  summary = loop.run(config, str(tmp_path))
  assert summary["test_size"] == 24
  for phase in ("sft", "rl"):
    assert 0.0 <= summary[f"{phase}_test_accuracy"] <= 1.0
    assert sorted(summary[f"{phase}_test_accuracy_by_stratum"]) == [str(k) for k in range(2, 8)]
    assert summary["evals"][f"{phase}_test"]["greedy"]["accuracy"] == (
        summary[f"{phase}_test_accuracy"])
  timing = ("seconds", "evals")
  same = {k: v for k, v in summary.items() if "test" not in k and not k.endswith(timing)}
  assert same == {k: v for k, v in default.items() if not k.endswith(timing)}
  assert summary["evals"]["rl"] == default["evals"]["rl"]
  # RL's periodic evaluations (steps 2 and 4): 12 dev problems; the final greedy and sampled
  # dev evaluations: all 36; the test evaluations of the SFT and RL policies: 24.
  assert sizes.count(12) == config.rl.steps // config.rl.eval_every
  assert sizes.count(24) == 2 and sizes.count(36) >= 2 and set(sizes) == {12, 24, 36}
  drop = ("time", "step_seconds")
  records = lambda d: [{k: v for k, v in json.loads(line).items() if k not in drop}
                       for line in open(d / "metrics.jsonl") if '"rl"' in line]
  train = lambda recs: [{k: v for k, v in r.items() if not k.startswith("heldout")} for r in recs]
  assert train(records(tmp_path)) == train(records(default_dir))
  with pytest.raises(config_check.ConfigError, match=r"config.rl.eval_subset=40: expected at "
                     r"most the dev set's config.task.eval_size=36"):
    config.rl.eval_subset = 40
    config_check.check(config)


def test_ladder_config_variants():
  with pytest.raises(ValueError, match="unknown variant"):
    ladder_config.get_config("big")
  c = ladder_config.get_config()
  assert c.task.name == "ladder" and c.task.eval_size >= 1000
  assert c.eval.num_samples >= 8  # the SFT success-rate histogram needs 8 samples per prompt
  # One SFT policy for every training seed: the gate's seed spread is RL's own.
  assert c.sft.seed == 0 and experiment.sft_seed(_with(c, seed=2)) == 0
  assert experiment.sft_seed(_with(c, seed=2, sft_seed=-1)) == 2
  assert experiment.phase_seed(_with(c, seed=2), "rl") == 2
  with pytest.raises(AttributeError):
    c.rl.stepz = 3  # locked


def test_ladder2_config_and_its_problem_sets():
  """ladder2.py (issue 32): 4- to 8-term chains, a constant rate after warmup, dev and test."""
  c = ladder2_config.get_config()
  config_check.check(c)
  assert (c.task.options.min_terms, c.task.options.max_terms) == (4, 8)
  assert c.rl.optim.schedule == "constant" and c.rl.optim.warmup_steps > 0
  assert (c.rl.steps, c.rl.eval_every, c.rl.eval_subset) == (100, 10, 600)
  assert c.task.test_size == c.task.eval_size == 1200 and c.sft.seed == 0
  assert c.model.max_seq_len == 160 and c.sampling.max_new_tokens == 96
  with pytest.raises(ValueError, match="unknown variant 'big' of ladder2.py"):
    ladder2_config.get_config("big")
  smoke = ladder2_config.get_config("smoke")
  config_check.check(smoke)
  tc = smoke.task
  task = data.make_task(tc.name, tc.options.to_dict(), tc.seed, tc.train_size, tc.eval_size,
                        test_size=tc.test_size)
  strata = lambda problems: collections.Counter(ladder_data.LadderTask.stratum(e)
                                                for e in problems)
  assert strata(task.heldout) == strata(task.test) == {k: 6 for k in range(4, 9)}
  prompts = lambda problems: {e.prompt for e in problems}
  assert not prompts(task.test) & (prompts(task.heldout) | prompts(task.train))


def _heldout(config):
  tc = config.task
  task = data.make_task(tc.name, tc.options.to_dict(), experiment.task_seed(config), 60,
                        tc.eval_size)
  return [e.prompt for e in task.heldout]


def _with(config, **fields):
  config = config.copy_and_resolve_references()
  config.unlock()
  for key, value in fields.items():
    target, name = ((config.task, key[5:]) if key.startswith("task_") else
                    (config.sft, key[4:]) if key.startswith("sft_") else (config, key))
    target[name] = value
  return config


def test_task_seed_pins_the_heldout_set_across_training_seeds():
  config = ladder_config.get_config("smoke")
  # The ladder pins its problems: every training seed is measured on one held-out set.
  assert config.task.seed == 0
  assert _heldout(_with(config, seed=0)) == _heldout(_with(config, seed=2))
  # -1: the problems follow config.seed.
  assert (_heldout(_with(config, seed=0, task_seed=-1))
          != _heldout(_with(config, seed=1, task_seed=-1)))
  assert (_heldout(_with(config, seed=0, task_seed=3))
          == _heldout(_with(config, seed=1, task_seed=3))
          == _heldout(_with(config, seed=3, task_seed=-1)))
  with pytest.raises(ValueError, match=r"config.task.seed=-2"):
    experiment.task_seed(_with(config, task_seed=-2))
