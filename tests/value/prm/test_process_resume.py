"""The online PRM of process_reward='prime' is checkpointed beside the policy: a run stopped after
step 2 and resumed logs the uninterrupted run's step 3 and ends with the same PRM."""

import os

import jax
import numpy as np
import pytest

from experiments.configs import ladder
from rl_jax import experiment
from rl_jax import workdir as workdir_lib
from rl_jax.checkpoint import Checkpointer
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.train import config_check, phases


def _prm_params(workdir, step, like):
  with Checkpointer(workdir_lib.checkpoint_dir(str(workdir), "rl_prm"), save_every=1) as ckpt:
    state, meta = ckpt.restore(step, like)
  assert meta["kind"] == "prime"
  return state.params


@pytest.mark.usefixtures("fast_compiles")
def test_prime_resume_equals_uninterrupted(tmp_path):
  def run(workdir, interrupt=""):
    c = ladder.get_config("smoke")  # its steps end at newlines
    c.rl.update(steps=3, eval_every=0, process_reward="prime")
    c.rl.process.prm_lr = 1e-2  # large enough that the PRM moves visibly in two steps
    c.rl.optim.warmup_steps = 0
    c.checkpoint.every = 100  # only the forced saves: the interrupt and the last step
    c.interrupt_at = interrupt
    config_check.check(c)
    exp = experiment.build(c, str(workdir))
    params = phases.init_params(exp)
    emb = params["embed_tokens"]["embedding"]  # no early EOS: completions have tokens to score
    params["embed_tokens"]["embedding"] = emb.at[exp.tokenizer.eos_id].set(0.0)
    with MetricsWriter(workdir) as writer:
      phases.rl(exp, params, writer)
    return params

  sft = run(tmp_path / "a")
  with pytest.raises(phases.Interrupted):
    run(tmp_path / "b", "rl:2")
  prm_dir = workdir_lib.checkpoint_dir(str(tmp_path / "b"), "rl_prm")
  assert sorted(os.listdir(prm_dir)) == ["2"]  # written with the policy's step-2 checkpoint
  run(tmp_path / "b")
  timing = ("time", "step_seconds")
  recs = {d: {r["step"]: {k: v for k, v in r.items() if k not in timing}
              for r in read_metrics(tmp_path / d) if r["phase"] == "rl"} for d in "ab"}
  assert sorted(recs["a"]) == [1, 2, 3] and recs["a"] == recs["b"]
  # The PRM moved after step 1 (at step 1 it equals the reference: every token reward is 0).
  assert recs["a"][1]["process/reward_abs"] == 0 < recs["a"][2]["process/reward_abs"]
  from rl_jax.train_state import TrainState  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  like = TrainState.create(sft, optax.chain(optax.identity(), optax.adamw(1e-2)))  # its layout
  a, b = _prm_params(tmp_path / "a", 3, like), _prm_params(tmp_path / "b", 3, like)
  jax.tree.map(np.testing.assert_array_equal, a, b)
  # The PRM trained (so a PRM restarted from the SFT policy at step 2 would have diverged).
  moved = jax.tree.map(lambda x, y: float(np.abs(np.asarray(x) - np.asarray(y)).max()), a, sft)
  assert max(jax.tree.leaves(moved)) > 0
