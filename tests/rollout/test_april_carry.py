"""APRIL's host side (rl_jax/rollout/april.py): the batch / carry split of docs/algorithms.md §7,
the per-token version record, the checkpointed carry (resume == uninterrupted) and the config
errors."""

import json
import os

import numpy as np
import pytest

from rl_jax import experiment
from rl_jax import workdir as workdir_lib
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.rollout import april
from rl_jax.train import config_check, phases


def test_worked_example_fifo():
  """Over-sample 4 groups, target 2; groups 1 and 3 finish first -> train on {1, 3}; {2, 4} are
  carried, and the next step launches {2, 4} first, then 2 fresh prompts."""
  ids = np.array([11, 12, 13, 14])
  chosen, left, dropped = april.split_groups(np.array([True, False, True, False]), 2)
  assert not len(dropped)
  np.testing.assert_array_equal(ids[chosen], [11, 13])
  np.testing.assert_array_equal(ids[left], [12, 14])
  np.testing.assert_array_equal(april.launch_ids(ids[left], np.array([15, 16])),
                                [12, 14, 15, 16])
  # More complete groups than the target: the first ones in launch order; the rest wait, or
  # (recycle_finished=False, slime) the surplus complete group 3 is dropped.
  chosen, left, _ = april.split_groups(np.array([False, True, True, True]), 2)
  assert chosen.tolist() == [1, 2] and left.tolist() == [0, 3]
  chosen, left, dropped = april.split_groups(np.array([False, True, True, True]), 2, False)
  assert chosen.tolist() == [1, 2] and left.tolist() == [0] and dropped.tolist() == [3]
  with pytest.raises(ValueError, match="only 1 of 4 groups are complete; the batch needs 2"):
    april.split_groups(np.array([False, True, False, False]), 2)


def test_version_record():
  """Step 3 resumes two rows: the carried prefix keeps versions 1 and 2, this step's tokens get
  3, off the mask -1."""
  prefix_version = np.array([[1, 2, -1, -1, -1], [-1, -1, -1, -1, -1]])
  new = np.array([[0, 0, 1, 1, 0], [1, 1, 1, 0, 0]], bool)
  mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], bool)
  want = [[1, 2, 3, 3, -1], [3, 3, 3, -1, -1]]
  np.testing.assert_array_equal(april.versions(prefix_version, new, mask, 3), want)


def test_carry_round_trips_through_json_exactly():
  rng = np.random.default_rng(0)
  c = april.Carry(np.array([4, 9]), rng.integers(0, 50, (4, 6)).astype(np.int32),
                  rng.random((4, 6)) > 0.5, rng.normal(size=(4, 6)).astype(np.float32),
                  rng.integers(-1, 3, (4, 6)).astype(np.int32), np.array([1, 0, 0, 1], bool))
  back = april.Carry.from_state(json.loads(json.dumps(c.state())))
  assert back == c and back.logp.dtype == np.float32
  assert april.Carry.from_state(april.Carry.empty(6).state()) == april.Carry.empty(6)


@pytest.mark.parametrize("overrides,message", [
    ({"rl.tis_cap": 0.0}, "partial.enabled=True with config.rl.tis_cap=0; expected tis_cap > 0"),
    ({"rl.partial.groups": 2}, "partial.groups=2 is below prompts_per_step=4"),
    ({"rl.partial.groups": -1}, r"config.rl.partial.groups=-1: expected an integer >= 0"),
    ({"rl.rollout": "latr", "rl.latr.windows": (2,)},
     "partial.enabled=True with config.rl.rollout='latr'; expected rollout='iid'"),
    ({"rl.dynamic_sampling": True}, "with config.rl.dynamic_sampling=True"),
    ({"data.source": "grain"}, "with config.data.source='grain'; expected 'memory'"),
])
def test_bad_options_raise_named_errors(smoke_config, overrides, message):
  smoke_config.rl.partial.enabled = True
  smoke_config.rl.tis_cap = 2.0
  smoke_config.update_from_flattened_dict(overrides)
  with pytest.raises(config_check.ConfigError, match=message):
    config_check.check(smoke_config)


def _meta(workdir, step):
  with open(os.path.join(workdir_lib.checkpoint_dir(str(workdir), "rl"), str(step), "meta",
                         "metadata")) as f:
    return json.load(f)


@pytest.mark.usefixtures("fast_compiles")
def test_resume_equals_uninterrupted(smoke_config_factory, tmp_path):
  """The smoke RL phase with APRIL, stopped after step 2 (its carry checkpointed) and resumed,
  logs the uninterrupted run's step 3 and ends with the same carry; the checkpointed carry holds
  unfinished rows whose tokens keep their (older) policy versions."""
  def run(workdir, interrupt=""):
    c = smoke_config_factory()
    c.rl.update(steps=3, eval_every=0, tis_cap=2.0, kl_coef=0.05, kl_kind="k1")
    c.rl.optim.warmup_steps = 0  # every update moves the policy: carried tokens go stale
    c.rl.partial.enabled = True
    c.interrupt_at = interrupt
    config_check.check(c)
    exp = experiment.build(c, str(workdir))
    params = phases.init_params(exp)
    emb = params["embed_tokens"]["embedding"]  # an EOS-prone policy: rows of many lengths
    params["embed_tokens"]["embedding"] = emb.at[exp.tokenizer.eos_id].mul(40.0)
    with MetricsWriter(workdir) as writer:
      phases.rl(exp, params, writer)

  run(tmp_path / "a")
  with pytest.raises(phases.Interrupted):
    run(tmp_path / "b", "rl:2")
  saved = april.Carry.from_state(_meta(tmp_path / "b", 2)["april"])
  assert saved == april.Carry.from_state(_meta(tmp_path / "a", 2)["april"])
  assert saved.num_groups == 4  # O - B = 2·4 - 4
  assert (~saved.done).any()  # unfinished rows are carried ...
  assert ((saved.version < 2) & saved.mask).any()  # ... with tokens of older policies
  run(tmp_path / "b")
  timing = ("time", "step_seconds")
  recs = {d: {r["step"]: {k: v for k, v in r.items() if k not in timing}
              for r in read_metrics(tmp_path / d) if r["phase"] == "rl"} for d in "ab"}
  assert recs["a"] == recs["b"] and sorted(recs["a"]) == [1, 2, 3]
  assert april.Carry.from_state(_meta(tmp_path / "a", 3)["april"]) == april.Carry.from_state(
      _meta(tmp_path / "b", 3)["april"])
  last = recs["a"][3]
  assert last["april/resumed_groups"] == 4 and last["april/offpolicy_token_frac"] > 0
  assert any(r["tis_weight_mean"] != 1.0 for r in recs["a"].values())
