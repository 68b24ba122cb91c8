"""rollout='arrol' in the RL rollout: only survivors reach the batch (and the loss), the counts in
the metrics, the online head's state surviving a checkpoint round trip, named config errors."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import sampling
from rl_jax.rl import logprobs
from rl_jax.train import config_check, experiment, phases, planner, rollouts
from rl_jax.value import quality_head


def _exp(config, path):
  config.rl.rollout = "arrol"
  return experiment.build(config, str(path))


def test_batch_holds_the_survivors_only(smoke_config, tmp_path):
  exp = _exp(smoke_config, tmp_path)
  params = phases.init_params(exp)
  rl = smoke_config.rl
  b, g = rl.prompts_per_step, rl.group_size
  run = quality_head.ArrolRun.of(exp)
  n0 = run.options.oversample
  assert (n0, run.options.keep) == (6, 4)
  batch, rewards, metrics = rollouts.rollout(exp, params, 0)
  # The dense B x G batch: every row valid, group b in rows b·G ..; the pruned rows are absent.
  assert batch.tokens.shape[0] == b * g and np.asarray(batch.valid).all()
  np.testing.assert_array_equal(batch.group, np.repeat(np.arange(b), g))
  assert rewards.shape == (b * g, 1)
  # The untrained head is constant: survivors are rows {0, 1, 4, 5} of each group of N0 = 6
  # rows of the unpruned sampler (per-row keys); the other rows are nowhere in the batch.
  rng = exp.host_rng(rollouts.RL_TAG, 0)
  idx = rng.choice(len(exp.train_prompts), b, replace=False)
  full = sampling.generate(params, exp.train_prompts[idx], exp.train_prompt_mask[idx],
                           planner.round_key(exp, rollouts.RL_TAG, 0, 0), cfg=exp.model_cfg,
                           strategy=exp.rollout_strategy, max_new_tokens=exp.max_new_tokens,
                           eos_id=exp.tokenizer.eos_id, pad_id=exp.tokenizer.pad_id,
                           num_samples=n0, row_keys=True)
  rows = (np.arange(b)[:, None] * n0 + np.array([0, 1, 4, 5])).reshape(-1)
  np.testing.assert_array_equal(batch.tokens, np.asarray(full.tokens)[rows])
  np.testing.assert_array_equal(batch.mask, np.asarray(full.mask)[rows])
  lp = logprobs.completion_logprobs(exp.model_cfg, params, jnp.asarray(batch.prompt_tokens),
                                    jnp.asarray(batch.prompt_mask), jnp.asarray(batch.tokens),
                                    jnp.asarray(batch.mask), temperature=1.0)
  np.testing.assert_allclose(batch.logp, lp, atol=1e-5)
  # Counts: B·(N0 - G) rows pruned; rollout tokens = the batch's + the pruned rows' prefixes.
  pruned = np.setdiff1d(np.arange(b * n0), rows)
  t_p = run.options.prune_at
  full_len = np.asarray(full.mask).sum(1)
  assert metrics["arrol/rows_pruned"] == b * (n0 - g)
  assert metrics["arrol/rows_stopped"] == int((full_len[pruned] > t_p).sum())
  assert metrics["arrol/pruned_tokens"] == int(np.minimum(full_len[pruned], t_p).sum())
  assert metrics["rollout_tokens"] == int(np.asarray(batch.mask).sum()) + int(
      np.minimum(full_len[pruned], t_p).sum())
  assert metrics["arrol/tokens_saved"] == b * (n0 - g) * max(
      int(np.asarray(batch.mask).sum(1).max()) - t_p, 0)
  assert run.head.rounds == 1 and "arrol/head_loss" in metrics


def test_head_state_survives_a_checkpoint_round_trip(smoke_config, tmp_path):
  """A resumed run restores the head from the checkpoint meta (JSON) and then samples, prunes
  and trains exactly as the uninterrupted run."""
  exp = _exp(smoke_config, tmp_path / "a")
  params = phases.init_params(exp)
  run = quality_head.ArrolRun.of(exp)
  # A trained, non-constant head: steps 0 and 1 of training on made-up outcomes.
  x = np.random.default_rng(0).normal(size=(16, exp.model_cfg.d_model)).astype(np.float32)
  run.head.fit(x, (x[:, 0] > 0).astype(np.float32))
  meta = json.loads(json.dumps(run.meta()))
  resumed_exp = experiment.build(smoke_config, str(tmp_path / "b"))
  resumed = quality_head.ArrolRun.of(resumed_exp)
  resumed.load_meta(meta)
  a = rollouts.rollout(exp, params, 1)
  r = rollouts.rollout(resumed_exp, params, 1)
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
