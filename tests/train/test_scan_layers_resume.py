"""A run checkpointed with unrolled layers resumes with `model.scan_layers=True`.

The `default.py:smoke` pipeline (2 layers, no more-SFT control) is stopped after RL step 2 with
unrolled layers and re-run scanned: the checkpoints (policy, Adam moments, the SFT reference)
convert on restore, and RL steps 3 and 4 give the uninterrupted unrolled run's metrics (scanned
layers compute the same values up to float32 rounding).
"""

from __future__ import annotations

import numpy as np
import pytest

from rl_jax.metrics import read_metrics
from rl_jax.train import loop, phases

pytestmark = pytest.mark.usefixtures("fast_compiles")


def _config(make, scan_layers=False, interrupt_at=""):
  config = make()
  config.control.enabled = False
  config.model.n_layers = 2
  config.model.scan_layers = scan_layers
  config.rl.kl_coef = 0.05
  config.rl.kl_kind = "k1"  # Non-zero gradients although the smoke policy earns no reward.
  config.rl.optim.warmup_steps = 0
  config.interrupt_at = interrupt_at
  return config


def _rl(workdir):
  return {r["step"]: r for r in read_metrics(workdir) if r["phase"] == "rl"}


def test_unrolled_checkpoint_resumes_scanned(smoke_config_factory, tmp_path):
  reference, resumed = str(tmp_path / "reference"), str(tmp_path / "resumed")
  loop.run(_config(smoke_config_factory), reference)
  with pytest.raises(phases.Interrupted, match="rl step 2"):
    loop.run(_config(smoke_config_factory, interrupt_at="rl:2"), resumed)
  summary = loop.run(_config(smoke_config_factory, scan_layers=True), resumed)
  assert summary["rl_steps"] == 4
  want, got = _rl(reference), _rl(resumed)
  assert sorted(got) == sorted(want) == [1, 2, 3, 4]
  for step in (3, 4):
    assert got[step]["grad_norm"] > 0 and got[step]["kl"] != 0
    assert got[step]["rollout_tokens"] == want[step]["rollout_tokens"]
    for key in ("loss", "kl", "grad_norm", "reward_mean"):
      np.testing.assert_allclose(got[step][key], want[step][key], rtol=1e-4, atol=1e-7,
                                 err_msg=f"rl step {step} {key}")
