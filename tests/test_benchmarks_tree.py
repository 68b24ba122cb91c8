"""benchmarks/tree.py: its counting helpers and one comparison on a tiny random model."""

import jax
import numpy as np
import pytest

from benchmarks import tree as bench
from experiments.configs import default
from rl_jax import models, sampling
from rl_jax.sampling import echo, eptree, latr


def test_distinct_per_prompt_counts_masked_completions():
  tokens = np.array([[5, 6, 0], [5, 6, 9], [5, 7, 0], [1, 0, 0], [1, 0, 0], [1, 0, 0]])
  mask = np.array([[1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 1, 0]], bool)
  # Prompt 0: (5,6), (5,6), (5,7) -> 2; prompt 1: (1,), (1,), (1,0) -> 2.
  assert bench.distinct_per_prompt(tokens, mask, 3) == 2.0


def test_sweep_options_are_the_learning_comparison_settings():
  latr_opts, ep_opts = bench.sweep_options(default.get_config())
  assert latr_opts.tau_abs == 0.02 and latr_opts.windows == (4,)
  assert ep_opts.leaves == 8


# XLA optimizations off: compiling the five samplers dominates; what is checked (ratios of counts,
# forks that every threshold here forces) does not depend on them.
@pytest.mark.usefixtures("fast_compiles")
def test_compare_reports_consistent_ratios():
  cfg = models.ModelConfig(vocab_size=17, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                           d_ff=64, max_seq_len=32)
  params = models.init_params(cfg, jax.random.key(0))
  prompt = np.array([[0, 3, 4], [5, 6, 7]], np.int32)
  res = bench.compare(params, prompt, prompt > 0, cfg=cfg, strategy=sampling.Sampling(1.0),
                      leaves=4, max_new_tokens=6, eos_id=1, pad_id=0,
                      latr_options=latr.LatrOptions(tau_abs=0.0, tau_rel=1.0, windows=(3,)),
                      eptree_options={"eptree": eptree.EPTreeOptions(1, 1, 1, 3),
                                      "eptree_late": bench.late_forks(4)}, repeats=1,
                      echo_options=echo.EchoOptions(**dict(bench.ECHO_BRANCHING, min_depth=1,
                                                           entropy_delta_threshold=-10.0)))
  for name in ("latr", "eptree", "eptree_late", "echo"):
    ratio = res[f"{name}_ratios"]["decode_tokens_per_leaf"]
    assert ratio == pytest.approx(res[name]["decode_tokens_per_leaf"]
                                  / res["independent"]["decode_tokens_per_leaf"], rel=1e-3)
    assert 1 <= res[name]["distinct_leaves"] <= 4
  # Forking at every step fills every slot, so every LATR leaf is distinct.
  assert res["latr"]["distinct_leaves"] == 4 and res["latr"]["filled_slots"] == 0
  # ECHO: each prompt's first row branches at step 1 into the 3 other slots (width 4).
  assert res["echo"]["children"] == 6 and res["echo"]["branch_events"] == 2
  assert res["goals_met_by"] == [n for n in ("latr", "eptree", "eptree_late", "echo")
                                 if res[f"{n}_ratios"]["goals_met"]]
  with pytest.raises(ValueError, match="leaves"):
    bench.compare(params, prompt, prompt > 0, cfg=cfg, strategy=sampling.Sampling(1.0), leaves=4,
                  max_new_tokens=6, eos_id=1, pad_id=0, latr_options=latr.LatrOptions(),
                  eptree_options={"eptree": eptree.EPTreeOptions(1, 1, 1, 2)}, repeats=1)
