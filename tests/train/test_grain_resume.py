"""config.data.source='grain': a run stopped mid-SFT and mid-RL and resumed reads the same problems
in the same order as the uninterrupted run, and logs the same metrics.

The phases run directly (no evaluations) on the `default.py:smoke` config with grain data. The
problem batches every phase draws are recorded by wrapping `ProblemStream.next_indices`. As in
test_resume.py, a k1 KL term makes every RL step move the policy, so the RL metrics depend on
which prompts were drawn.
"""

from __future__ import annotations

import pytest

from rl_jax import experiment
from rl_jax.data import grain_source
from rl_jax.metrics import MetricsWriter, read_metrics
from rl_jax.train import phases

_TIMING = ("time", "step_seconds")


def _config(make):
  config = make()
  config.data.source = "grain"
  config.rl.kl_coef = 0.05
  config.rl.kl_kind = "k1"
  config.rl.optim.warmup_steps = 0
  return config


@pytest.fixture
def drawn(monkeypatch):
  """Every batch of indices any ProblemStream hands out, in order."""
  batches = []
  original = grain_source.ProblemStream.next_indices

  def record(self):
    out = original(self)
    batches.append(out.tolist())
    return out

  monkeypatch.setattr(grain_source.ProblemStream, "next_indices", record)
  return batches


def _phases(exp, workdir, interrupt_at=""):
  """SFT then RL, from scratch or from the checkpoints in `workdir`; True if it ran to the end."""
  exp.config.interrupt_at = interrupt_at
  with MetricsWriter(workdir) as writer:
    try:
      sft = phases.sft(exp, "sft", phases.init_params(exp), exp.config.sft.steps, writer)
      phases.rl(exp, sft.params, writer)
    except phases.Interrupted:
      return False
  return True


def _records(workdir):
  return [{k: v for k, v in r.items() if k not in _TIMING} for r in read_metrics(workdir)]


@pytest.mark.usefixtures("fast_compiles")
def test_grain_data_order_survives_interruptions(smoke_config_factory, tmp_path, drawn):
  reference = str(tmp_path / "reference")
  exp = experiment.build(_config(smoke_config_factory), reference)
  assert exp.train_source is not None and len(exp.train_source) == len(exp.task.train)
  assert _phases(exp, reference)
  want = list(drawn)
  sft_steps, rl_steps = exp.config.sft.steps, exp.config.rl.steps
  assert len(want) == sft_steps + rl_steps  # One batch a step (no dynamic sampling).
  assert [len(b) for b in want] == ([exp.config.sft.batch_size] * sft_steps
                                    + [exp.config.rl.prompts_per_step] * rl_steps)
  assert len({tuple(b) for b in want}) == len(want)

  drawn.clear()
  resumed = str(tmp_path / "resumed")
  exp = experiment.build(_config(smoke_config_factory), resumed)
  assert not _phases(exp, resumed, "sft:3")  # Checkpoint at 2 (every=2) and at the stop, 3.
  assert not _phases(exp, resumed, "rl:1")  # SFT resumes at 3; RL stops after step 1.
  assert _phases(exp, resumed)
  assert drawn == want
  got = _records(resumed)
  assert [(r["phase"], r["step"]) for r in got] == (
      [("sft", s) for s in range(1, sft_steps + 1)] + [("rl", s) for s in range(1, rl_steps + 1)])
  assert got == _records(reference)
