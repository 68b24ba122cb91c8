"""Allocators vs the worked numbers of docs/algorithms.md §6 and the allocation contract."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rl_jax.rl import allocation as A
from rl_jax.rl.allocation import bandits, dars, knapsack


def _stats(att, suc, **kw):
  return A.PromptStats(np.arange(len(att)), att, suc, **kw)


# ---------------------------------------------------------------- Knapsack (§6.1)

def test_knapsack_value_worked_numbers():
  assert knapsack.value(8, 0.5) == pytest.approx(0.12402, abs=1e-5)
  assert knapsack.value(8, 0.25) == pytest.approx(0.12654, abs=1e-5)


def test_knapsack_two_prompts_r4():
  k = knapsack.knapsack_greedy([0.5, 0.25], 4, 2, 126)
  assert k.tolist() == [2, 2]
  assert knapsack.total_value(k, np.array([0.5, 0.25]), 2) == pytest.approx(0.204956, abs=1e-6)
  assert knapsack.knapsack_dp([0.5, 0.25], 4, 2, 10)[0].tolist() == [2, 2]


def test_knapsack_public_code_counterexample():
  """No extra row is worth 0 (public code): p=(0.5, 0.1), min_n=2, R=3 -> (2, 1), not (3, 0)."""
  p = np.array([0.5, 0.1])
  k = knapsack.knapsack_greedy(p, 3, 2, 126)
  assert k.tolist() == [2, 1]
  assert knapsack.total_value(k, p, 2) == pytest.approx(0.131245, abs=1e-6)
  assert knapsack.knapsack_greedy(p, 2, 2, 126).tolist() == [1, 1]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.02, 0.98), min_size=1, max_size=4), st.integers(0, 10),
       st.integers(1, 3), st.integers(1, 5))
def test_knapsack_greedy_equals_dp(p, extra, min_n, max_extra):
  p = np.asarray(p)
  extra = min(extra, len(p) * max_extra)
  greedy = knapsack.knapsack_greedy(p, extra, min_n, max_extra)
  _, best = knapsack.knapsack_dp(p, extra, min_n, max_extra)
  assert greedy.sum() == extra
  assert knapsack.total_value(greedy, p, min_n) == pytest.approx(best, abs=1e-12)


def test_knapsack_brute_force_small():
  p = np.array([0.3, 0.6, 0.9])
  for extra in range(0, 7):
    best = max(knapsack.total_value(np.array(k), p, 2)
               for k in itertools.product(range(4), repeat=3) if sum(k) == extra)
    got = knapsack.knapsack_greedy(p, extra, 2, 3)
    assert knapsack.total_value(got, p, 2) == pytest.approx(best, abs=1e-12)


def test_knapsack_allocator_rules():
  """Mixed prompts share the rest by value; p=0 prompts get what the effective ones cannot use
  (fallback); a prompt without an estimate gets the default; all within [min_n, max_n]."""
  stats = _stats([8, 8, 8, 0], [4, 0, 8, 0])  # p = 0.5, 0, 1, unknown
  out = A.run(A.make("knapsack"), stats, A.Budget(32, 4, min_n=2, max_n=16), {},
              np.random.default_rng(0))
  # invalid -> 8; p=0.5 has cost log(0.1)/log(0.5) = 3.3 -> 3 extra; the other 32-2-2-2-8-3 = 15
  # go to the p=0 prompt (capped at 16 -> the excess returns to the effective prompt).
  assert out.counts.tolist() == [6, 16, 2, 8]
  assert out.counts.sum() == 32


def test_knapsack_reads_a_prior_in_place_of_the_history():
  """With p_hat (config.rl.allocator_prior) Knapsack allocates by the prior for every prompt,
  whatever the history holds: the rules' case above with the history empty and the rates given
  as the prior gives the same counts, the unknown prompt now an estimate (p = 0.5, 3 extra)."""
  budget = A.Budget(32, 4, min_n=2, max_n=16)
  empty = A.PromptStats(np.arange(4), np.zeros(4), np.zeros(4))
  assert A.run(A.make("knapsack"), empty, budget, {},
               np.random.default_rng(0)).counts.tolist() == [8, 8, 8, 8]  # no estimate: default
  prior = A.PromptStats(np.arange(4), np.zeros(4), np.zeros(4), p_hat=[0.5, 0.0, 1.0, 0.5])
  out = A.run(A.make("knapsack"), prior, budget, {}, np.random.default_rng(0))
  # Every prompt is an estimate: the public code's counts for p = (0.5, 0, 1, 0.5), the p = 0
  # prompt filled to max_n by the fallback, the p = 1 prompt well under the default 8.
  assert out.counts.tolist() == knapsack.knapsack_counts(
      np.array([0.5, 0.0, 1.0, 0.5]), np.ones(4, bool), budget, default_n=8, alpha=0.9,
      cost="probability", fallback=True).tolist() == [7, 16, 3, 6]
  assert A.ALLOCATORS.get("knapsack").reads_prior and A.ALLOCATORS.get("v0").reads_prior
  assert not A.ALLOCATORS.get("dars").reads_prior


def test_knapsack_fallback_with_every_prompt_effective():
  """Fallback with no p = 0 and no non-effective prompt to take the excess (hypothesis found
  it; the reference divides by zero): the excess stays with the knapsack."""
  stats = _stats([2, 2, 2, 2], [1, 1, 1, 1])
  out = A.run(A.make("knapsack", min_obs=1), stats, A.Budget(13, 4, 0, 4), {},
              np.random.default_rng(0))
  assert out.counts.sum() == 13 and (out.counts <= 4).all()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=8),
       st.integers(0, 3), st.integers(3, 12), st.data(),
       st.sampled_from(["uniform", "knapsack", "dars", "xrpo"]))
def test_counts_respect_budget_and_bounds(obs, min_n, max_n, data, name):
  att = np.array([max(a, s) for a, s in obs])
  suc = np.array([min(a, s) for a, s in obs])
  b = len(att)
  total = data.draw(st.integers(b * min_n, b * max_n))
  opts = {"min_obs": 1} if name == "knapsack" else {}
  out = A.run(A.make(name, **opts), _stats(att, suc), A.Budget(total, b, min_n, max_n), {},
              np.random.default_rng(0))
  assert out.counts.sum() == total
  assert (out.counts >= min_n).all() and (out.counts <= max_n).all()


def test_uniform_is_group_size():
  out = A.run(A.make("uniform"), _stats([0] * 4, [0] * 4), A.Budget(32, 4, 1, 64), {},
              np.random.default_rng(0))
  assert out.counts.tolist() == [8, 8, 8, 8] and out.selected.all()


def test_named_errors():
  with pytest.raises(A.AllocationError, match=r"budget 5 is smaller than 4 prompts x min_n=2"):
    A.run(A.make("uniform"), _stats([0] * 4, [0] * 4), A.Budget(5, 4, 2, 8), {},
          np.random.default_rng(0))
  with pytest.raises(KeyError, match=r"unknown allocator 'bogus'.*knapsack"):
    A.make("bogus")
  with pytest.raises(A.AllocationError, match=r"no options \['nope'\]"):
    A.make("knapsack", nope=1)
  with pytest.raises(A.AllocationError, match="needs predictions"):
    A.run(A.make("v0"), _stats([0, 0], [0, 0]), A.Budget(8, 2, 2, 8), {},
          np.random.default_rng(0))


def test_v0_skips_confident_predictions():
  stats = _stats([0] * 4, [0] * 4, p_hat=[0.01, 0.5, 0.25, 0.99])
  out = A.run(A.make("v0"), stats, A.Budget(16, 4, 2, 16), {}, np.random.default_rng(0))
  assert out.counts[[0, 3]].tolist() == [2, 2]
  assert out.counts[[1, 2]].sum() == 12 and out.counts.sum() == 16


# ---------------------------------------------------------------- DARS (§6.2)

@pytest.mark.parametrize("acc,et,hw", [(0, 24, 56), (0.125, 11, 24), (0.25, 3, 8),
                                       (0.375, 1, 3), (0.5, 0, 0)])
def test_dars_schedules(acc, et, hw):
  assert dars.dars_extra([acc], 8, 32, "et").tolist() == [et]
  assert dars.dars_extra([acc], 8, 64, "hw").tolist() == [hw]


def test_dars_allocator_scales_requests_to_budget():
  # Stage 1 = 8 rows; HW asks (56, 24, 8, 0) = 88 > 32 left: scaled to 32, hardest first.
  stats = _stats([8, 8, 8, 8], [0, 1, 2, 4])
  out = A.run(A.make("dars", schedule="hw"), stats, A.Budget(64, 4, 8, 64), {},
              np.random.default_rng(0))
  assert out.counts.sum() == 64 and out.counts[3] == 8
  assert out.counts[0] > out.counts[1] > out.counts[2] > 8


# ---------------------------------------------------------------- VADE (§6.5)

def test_vade_posterior_update_and_decay():
  v = A.make("vade", gamma_fast=0.5, gamma_slow=1.0)
  s = v.observe(v.init_state(), [7], [4], [3], step=0)
  a, b = v.posteriors(s, [7], 1)
  assert (a[0], b[0]) == (4.0, 2.0) and a[0] / (a[0] + b[0]) == pytest.approx(0.6667, abs=1e-4)
  s = v.observe(s, [7], [2], [0], step=1)  # fast decay first: (2.5, 1.5), then +0 / +2
  assert tuple(float(x[0]) for x in v.posteriors(s, [7], 1)) == (2.5, 3.5)
  slow = A.make("vade", gamma_fast=0.5, gamma_slow=0.5)
  s = slow.observe(slow.init_state(), [7], [4], [3], step=0)
  assert tuple(float(x[0]) for x in slow.posteriors(s, [7], 2)) == (1.75, 1.25)  # two steps later


def test_vade_selects_deterministically_from_rng():
  v = A.make("vade")
  s = v.observe(v.init_state(), [0, 1, 2], [40, 40, 40], [0, 20, 40], step=0)
  stats = A.PromptStats([0, 1, 2, 3], [0] * 4, [0] * 4, step=1)
  outs = [A.run(v, stats, A.Budget(8, 2, 1, 8), s, np.random.default_rng(3)) for _ in range(2)]
  assert outs[0].selected.tolist() == outs[1].selected.tolist()
  # Beta(21, 21) draws near 0.5 beat Beta(1, 41) and Beta(41, 1), which draw near 0 and 1.
  assert outs[0].selected.tolist() == [False, True, False, True]
  assert outs[0].counts.tolist() == [0, 4, 0, 4]


# ---------------------------------------------------------------- InSight (§6.4)

@pytest.mark.parametrize("a,b,mi", [(1, 1, 0.19315), (5, 5, 0.04751), (1, 9, 0.04219),
                                    (10, 90, 0.00492)])
def test_insight_mi(a, b, mi):
  assert bandits.beta_mi(a, b) == pytest.approx(mi, abs=1e-5)
  assert bandits.beta_binomial_mi(a, b, 1) == pytest.approx(mi, abs=1e-5)


def test_insight_multi_rollout_mi_grows_and_selects():
  assert bandits.beta_binomial_mi(1, 1, 4) > bandits.beta_binomial_mi(1, 1, 1)
  # Unseen (Beta(1,1)) beats well-known mid (Beta(11,11)) and well-known easy (Beta(20,2)).
  stats = _stats([20, 0, 20], [10, 0, 19])
  out = A.run(A.make("insight"), stats, A.Budget(8, 1, 1, 8), {}, np.random.default_rng(0))
  assert out.selected.tolist() == [False, True, False] and out.counts.tolist() == [0, 8, 0]


# ---------------------------------------------------------------- XRPO (§6.3)

def test_xrpo_half_widths():
  h = bandits.half_width([4, 5, 8, 9], 0.5)
  assert h == pytest.approx([0.7956, 0.6208, 0.4180, 0.3843], abs=1e-4)
  assert h[0] - h[1] == pytest.approx(0.1748, abs=1e-4)


@pytest.mark.parametrize("form", ["reconstructed", "quoted"])
def test_xrpo_favours_uncertain_prompts(form):
  stats = A.PromptStats([0, 1, 2], [4, 4, 4], [2, 0, 4], step=10)  # mixed, all-0, all-1
  out = A.run(A.make("xrpo", form=form), stats, A.Budget(24, 3, 4, 16), {},
              np.random.default_rng(0))
  assert out.counts.sum() == 24 and out.counts[0] > out.counts[1] == out.counts[2]
