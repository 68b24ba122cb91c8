"""rollout='arrol' in the RL rollout: only the engine's survivors reach the batch (so the loss), the
counts in the metrics, the online head's state surviving a checkpoint round trip, named config errors."""

import json

import jax
import numpy as np
import pytest

from rl_jax import experiment, seeds
from rl_jax.rollout import collect, planner
from rl_jax.rollout.requests import StepContext
from rl_jax.sampling import arrol
from rl_jax.train import companions as companions_lib
from rl_jax.train import config_check, phases
from rl_jax.value import quality_head

pytestmark = pytest.mark.usefixtures("fast_compiles")  # Compiling dominates these tiny shapes.


def _exp(config, path):
  config.rl.rollout = "arrol"
  return experiment.build(config, str(path))


def _ctx(exp, params, step, run) -> StepContext:
  """The step context the RL phase builds for the companion 'arrol' holding `run`: its state
  for the engine, its round hook (the head trains after each scored round)."""
  companions = {"arrol": companions_lib.Arrol(run)}
  return StepContext(exp, params, step, companions=companions_lib.rollout_state(companions),
                     on_round=companions_lib.round_hooks(companions))


def test_batch_holds_the_survivors_only(smoke_config, tmp_path):
  exp = _exp(smoke_config, tmp_path)
  params = phases.init_params(exp)
  rl = smoke_config.rl
  b, g = rl.prompts_per_step, rl.group_size
  run = quality_head.ArrolRun(exp)
  n0 = run.options.oversample
  assert (n0, run.options.keep) == (6, 4)
  batch, rewards, metrics = collect.rollout(_ctx(exp, params, 0, run))
  # The dense B x G batch: every row valid, group b in rows b·G ..; the pruned rows are absent.
  assert batch.tokens.shape[0] == b * g and np.asarray(batch.valid).all()
  np.testing.assert_array_equal(batch.group, np.repeat(np.arange(b), g))
  assert rewards.shape == (b * g, 1)
  # The batch is the engine's survivors (the untrained head is constant: rows {0, 1, 4, 5} of
  # each group of N0 = 6, which tests/sampling/test_arrol_engine.py shows are the unpruned
  # sampler's rows); the other rows are nowhere in the batch.
  rng = exp.host_rng(seeds.RL, 0)
  idx = rng.choice(len(exp.train_prompts), b, replace=False)
  out = arrol.arrol_generate(params, quality_head.init_head(exp.model_cfg.d_model),
                             exp.train_prompts[idx], exp.train_prompt_mask[idx],
                             planner.round_key(exp, seeds.RL, 0, 0),
                             cfg=exp.model_cfg,
                             strategy=exp.rollout_strategy, max_new_tokens=exp.max_new_tokens,
                             eos_id=exp.tokenizer.eos_id, pad_id=exp.tokenizer.pad_id,
                             options=run.options)
  np.testing.assert_array_equal(out.survivors, np.tile([0, 1, 4, 5], (b, 1)))
  np.testing.assert_array_equal(batch.tokens, out.samples.tokens)
  np.testing.assert_array_equal(batch.mask, out.samples.mask)
  np.testing.assert_array_equal(batch.logp, out.samples.logp)
  np.testing.assert_array_equal(batch.prompt_tokens, np.repeat(exp.train_prompts[idx], g, 0))
  # Counts: B·(N0 - G) rows pruned; rollout tokens = the batch's + the pruned rows' prefixes.
  assert metrics["arrol/rows_pruned"] == b * (n0 - g)
  assert 0 < metrics["arrol/rows_stopped"] == int(out.pruned_live)
  assert metrics["arrol/pruned_tokens"] == int(out.pruned_tokens) > 0
  assert metrics["rollout_tokens"] == int(np.asarray(batch.mask).sum()) + int(out.pruned_tokens)
  t_p = run.options.prune_at
  assert metrics["arrol/tokens_saved"] == b * (n0 - g) * max(
      int(np.asarray(batch.mask).sum(1).max()) - t_p, 0) > 0
  assert run.head.rounds == 1 and "arrol/head_loss" in metrics


def test_head_state_survives_a_checkpoint_round_trip(smoke_config, tmp_path):
  """A resumed run restores the head from the checkpoint meta (JSON) and then samples, prunes
  and trains exactly as the uninterrupted run (the RL phase saves `meta()` in every checkpoint
  and calls `load_meta` when it resumes)."""
  exp = _exp(smoke_config, tmp_path)
  params = phases.init_params(exp)
  run = quality_head.ArrolRun(exp)
  # A trained, non-constant head: one round on made-up outcomes.
  x = np.random.default_rng(0).normal(size=(16, exp.model_cfg.d_model)).astype(np.float32)
  run.head.fit(x, (x[:, 0] > 0).astype(np.float32))
  meta = json.loads(json.dumps(run.meta()))
  a = collect.rollout(_ctx(exp, params, 1, run))
  resumed = quality_head.ArrolRun(exp)  # a new process's head, before and after its meta
  assert float(np.abs(resumed.head.params["head"]["kernel"]).sum()) == 0.0
  resumed.load_meta(meta)
  r = collect.rollout(_ctx(exp, params, 1, resumed))
  np.testing.assert_array_equal(a[0].tokens, r[0].tokens)
  assert a[2] == r[2]
  for u, v in zip(jax.tree_util.tree_leaves((run.head.params, run.head.opt_state)),
                  jax.tree_util.tree_leaves((resumed.head.params, resumed.head.opt_state))):
    np.testing.assert_array_equal(u, v)
  assert resumed.head.rounds == run.head.rounds == 2


def test_head_learns_a_separable_outcome():
  head = quality_head.QualityHead(8, lr=0.1, updates=50)
  x = np.random.default_rng(1).normal(size=(64, 8)).astype(np.float32)
  y = (x[:, 2] > 0).astype(np.float32)
  first = head.fit(x, y)
  assert first["arrol/head_mean"] == pytest.approx(0.5)  # zero init: ĝ = 0.5
  assert head.fit(x, y)["arrol/head_acc"] > 0.9
  # All-negative outcomes from the zero init (z = 0 exactly): the head still moves down.
  head = quality_head.QualityHead(8, lr=0.1, updates=4)
  head.fit(np.zeros((4, 8), np.float32), np.zeros(4, np.float32))
  assert head.predict(np.zeros((1, 8), np.float32))[0] < 0.45


@pytest.mark.parametrize("field,value,match", [
    ("rule", "median", r"config.rl.arrol.rule='median': expected one of"),
    ("oversample", 0.5, r"config.rl.arrol.oversample=0.5: expected a finite number in \[1"),
    ("prune_frac", 0.05, r"config.rl.arrol.prune_frac=0.05 puts the checkpoint at"),
    ("rho", 2.0, r"config.rl.arrol.rho=2.0"),
    ("updates", -1, r"config.rl.arrol.updates=-1"),
])
def test_bad_options_raise_named_errors(smoke_config, field, value, match):
  smoke_config.rl.rollout = "arrol"
  smoke_config.rl.arrol[field] = value
  with pytest.raises(config_check.ConfigError, match=match):
    config_check.check(smoke_config)


def test_ragged_layout_is_refused(smoke_config):
  smoke_config.rl.update(rollout="arrol", max_group_size=8)
  with pytest.raises(config_check.ConfigError, match="rollout='arrol' with the ragged layout"):
    config_check.check(smoke_config)


def test_sweep_applies_to_the_ladder_config():
  from experiments.configs import ladder  # pylint: disable=g-import-not-at-top
  from experiments.sweeps import arrol as sweep  # pylint: disable=g-import-not-at-top
  runs = sweep.get_sweep()
  assert len(runs) == len(sweep.VARIANTS) * 3
  for run in runs:
    config = ladder.get_config()
    config.update_from_flattened_dict({k: v for k, v in run.items() if k != "name"})
    config_check.check(config)
    opts = arrol.ArrolOptions.from_config(config)
    assert (opts.oversample, opts.keep, opts.prune_at) == (12, 8, 20)
