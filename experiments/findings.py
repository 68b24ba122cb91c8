"""What the method tables of the generated pages say: one `Finding` per number, and the headline.

Data, not text: experiments/pages.py reads each Finding's report JSON (under experiments/sweeps/)
at the key its kind names and prints the cell. A pre-registered study over several SFT draws adds
Findings of the `REGISTERED_KINDS`; the results page puts them first.
"""

from __future__ import annotations

import dataclasses

# The kinds a pre-registered study's rows have; the results page puts them first and calls the
# other rows exploratory.
REGISTERED_KINDS = ("registered", "registered_share")


@dataclasses.dataclass(frozen=True)
class Finding:
  """One number of the method tables.

  `kind`: 'delta' (`variants[variant].paired_delta.<baseline>`, paired over the seeds both
  variants ran), 'share' (`variants[variant].recovered_share` ± `_ci95`, over
  `recovered.seeds`), 'from_to' (`keys` = (before, after) of `variants[variant]`, over its
  `seeds`), 'registered' (a pre-registered comparison, `registered.comparisons[variant]` by its
  id: the estimate ± its 95% interval over SFT draws, the Holm-adjusted p-value and whether it
  replicated; experiments/report_registered.py) or 'registered_share' (the registered share of
  `variant` (the method), its Fieller interval). `sft` names the SFT draw(s) the runs started
  from; `sft_draws` counts them (for the registered kinds the report's count is printed).
  """
  id: str
  family: str
  method: str
  measure: str
  report: str
  variant: str
  kind: str
  baseline: str = ""
  keys: tuple[str, ...] = ()
  sft: str = "first"
  sft_draws: int = 1
  wording: str = ""


def _d(id_, family, method, report, variant, baseline, measure, sft="first", wording=""):
  return Finding(id_, family, method, measure, report, variant, "delta", baseline=baseline,
                 sft=sft, wording=wording)


def _s(id_, family, method, report, variant, measure, sft="first", wording=""):
  return Finding(id_, family, method, measure, report, variant, "share", sft=sft,
                 wording=wording)


M = "methods_v2_merged_report.json"
E = "methods_v2_engines_report.json"
G = "ground_v2_report.json"
DEF = "default_experiment_report.json"
VS4, VS8 = "Δ test acc. vs GRPO G = 4", "Δ test acc. vs GRPO G = 8"
VS4P, VS8P = "Δ vs GRPO G = 4 on the pool", "Δ vs GRPO G = 8 on the pool"
SHARE = "share of the oracle's gain"
R = "replication_v2_report.json"  # the pre-registered replication (fresh SFT draws)


def _r(id_, family, method, comparison, measure, wording=""):
  return Finding(id_, family, method, measure, R, comparison, "registered", sft="fresh",
                 wording=wording)


FINDINGS: tuple[Finding, ...] = (
    _r("F1", "process reward", "oracle: PAV with a perfect prover (`oracle_prm`)", "F1", VS4),
    _r("F2", "process reward", "PAV, best-of-4 Monte Carlo PRM (`pav_bok4_a1`)", "F2", VS4),
    Finding("F2_share", "process reward", "PAV, best-of-4 Monte Carlo PRM (`pav_bok4_a1`)",
            SHARE, R, "pav_bok4_a1", "registered_share", sft="fresh"),
    _r("F3a", "rollout engine", "LATR, 64 prompts x 4 (`latr_p64`)", "F3a", VS4,
       wording="at about its rollout tokens"),
    _r("F3b", "rollout engine", "LATR, 64 prompts x 4 (`latr_p64`)", "F3b", VS8,
       wording="with about half its rollout tokens"),
    _r("F3c", "rollout engine", "LATR, 64 prompts x 4 (`latr_p64`)", "F3c",
       "Δ test acc. vs GRPO at 64 prompts x 4 (`grpo_p64`)",
       wording="the tree, beyond the 64 prompts"),
    Finding("default", "default experiment", "GRPO after SFT on flawed demonstrations",
            "held-out greedy acc., SFT -> RL", DEF, "default_seed0_fused_logprob", "from_to",
            keys=("sft_accuracy", "rl_accuracy"), sft="its own",
            wording="RL fixes the carry class that SFT gets wrong"),
    _d("g8", "budget", "GRPO G = 8", G, "grpo_g8", "grpo_g4", VS4),
    _d("g16", "budget", "GRPO G = 16", G, "grpo_g16", "grpo_g4", VS4),
    _d("oracle_prm", "process reward", "oracle: PAV with a perfect prover (`oracle_prm`)", G,
       "oracle_prm", "grpo_g4", VS4,
       wording="one SFT; replicated on fresh draws (F1)"),
    _d("oracle_prm_r", "process reward", "oracle: PAV with a perfect prover (`oracle_prm`)", E,
       "oracle_prm", "grpo_g4", VS4, sft="retrained"),
    _d("pav", "process reward", "PAV, best-of-4 Monte Carlo PRM (`pav_bok4_a1`)", M,
       "pav_bok4_a1", "grpo_g4", VS4,
       wording="higher on every seed of one SFT; not replicated on fresh draws (F2)"),
    _s("pav_share", "process reward", "PAV, best-of-4 Monte Carlo PRM (`pav_bok4_a1`)", M,
       "pav_bok4_a1", SHARE, wording="delta-method interval, one SFT"),
    _d("pav_r", "process reward", "PAV, best-of-4 Monte Carlo PRM (`pav_bok4_a1`)", E,
       "pav_bok4_a1", "grpo_g4", VS4, sft="retrained"),
    _s("pav_share_r", "process reward", "PAV, best-of-4 Monte Carlo PRM (`pav_bok4_a1`)", E,
       "pav_bok4_a1", SHARE, sft="retrained"),
    _d("pav_g8", "process reward", "PAV at G = 8's rows (`pav_g8`)", M, "pav_g8", "grpo_g8", VS8),
    _s("pav_truth", "process reward", "PAV with a truth-label PRM (`pav_truth_a1`; a ceiling, "
       "not a method)", M, "pav_truth_a1", SHARE),
    _d("prime", "process reward", "PRIME at the reference's rate ratio (`prime_ratio`)", M,
       "prime_ratio", "grpo_g4", VS4, wording="collapses"),
    _d("knapsack", "allocation", "Knapsack RL (`knapsack_buf16`)", M, "knapsack_buf16",
       "grpo_g4_pool", VS4P),
    _s("knapsack_share", "allocation", "Knapsack RL (`knapsack_buf16`)", M, "knapsack_buf16",
       SHARE, wording="on a revisited pool; the interval spans half to all, one SFT"),
    _d("knapsack_full", "allocation", "Knapsack RL (`knapsack_buf16`)", M, "knapsack_buf16",
       "grpo_g4", VS4 + " (full train set)", wording="the pool costs more than it wins back"),
    _s("xrpo_share", "allocation", "XRPO (`xrpo_pool`)", M, "xrpo_pool", SHARE),
    _d("dars", "allocation", "DARS, Hardness Weighted (`dars_hw_pool`)", M, "dars_hw_pool",
       "grpo_g4_pool", VS4P),
    _s("vade_share", "data selection", "VADE (`vade_pool`)", M, "vade_pool", SHARE),
    _s("insight_share", "data selection", "InSight (`insight_pool`)", M, "insight_pool", SHARE),
    _d("knapsack_g8", "allocation", "Knapsack RL at G = 8's rows (`knapsack_g8_pool`)", M,
       "knapsack_g8_pool", "grpo_g8_pool", VS8P),
    _d("insight_g8", "data selection", "InSight at G = 8's rows (`insight_g8_pool`)", M,
       "insight_g8_pool", "grpo_g8_pool", VS8P),
    _d("v05", "value prior", "V0.5 with V0's prior (`v05_v0_eq`)", M, "v05_v0_eq", "grpo_g4",
       VS4, wording="hurts at G = 4's rows"),
    _d("v05_oracle", "value prior", "oracle: V0.5 with the Monte Carlo prior (`oracle_v05_eq`)",
       M, "oracle_v05_eq", "grpo_g4", VS4),
    _d("v05_g8", "value prior", "V0.5 with V0's prior at G = 8's rows (`v05_v0_g8`)", M,
       "v05_v0_g8", "grpo_g8", VS8),
    _d("echo", "rollout engine", "ECHO with measured thresholds (`echo_measured`)", M,
       "echo_measured", "grpo_g4", VS4),
    _d("oracle_treepo", "rollout engine", "oracle: TreePO cut at step boundaries "
       "(`oracle_treepo`)", M, "oracle_treepo", "grpo_g4", VS4),
    _d("latr_p64", "rollout engine", "LATR, 64 prompts x 4 (`latr_p64`)", M, "latr_p64",
       "grpo_g4", VS4, wording="one SFT; not replicated on fresh draws (F3a)"),
    _d("latr_p64_g8", "rollout engine", "LATR, 64 prompts x 4 (`latr_p64`)", M, "latr_p64",
       "grpo_g8", VS8, wording="with half its rollout tokens; not replicated on fresh draws (F3b)"),
    _d("latr_p64_r", "rollout engine", "LATR, 64 prompts x 4 (`latr_p64`)", E, "latr_p64",
       "grpo_g4", VS4, sft="retrained"),
    _d("latr_p64_g8_r", "rollout engine", "LATR, 64 prompts x 4 (`latr_p64`)", E, "latr_p64",
       "grpo_g8", VS8, sft="retrained"),
    _d("latr_g4_r", "rollout engine", "LATR, the reference's math settings (`latr_g4`)", E,
       "latr_g4", "grpo_g4", VS4, sft="retrained"),
    _d("eptree_r", "rollout engine", "EPTree (`eptree_g4`)", E, "eptree_g4", "grpo_g4", VS4,
       sft="retrained"),
    _d("arrol_r", "rollout engine", "ARRoL (`arrol_g4`)", E, "arrol_g4", "grpo_g4", VS4,
       sft="retrained"),
    _d("treepo_r", "rollout engine", "TreePO, fixed segments (`treepo_fixed`)", E,
       "treepo_fixed", "grpo_g4", VS4, sft="retrained"),
    _d("april_r", "rollout engine", "APRIL (`april_g4`)", E, "april_g4", "grpo_g4", VS4,
       sft="retrained"),
    _d("recipe_latr_pav", "recipe", "LATR 64 x 4 + PAV (`recipe_latr_pav`)", M,
       "recipe_latr_pav", "grpo_g8", VS8),
    _d("recipe_knapsack_pav", "recipe", "Knapsack + PAV on the pool (`recipe_knapsack_pav`)", M,
       "recipe_knapsack_pav", "grpo_g4", VS4),
)

# The README's table: the headline findings, in this order.
HEADLINE = ("F1", "F2", "F2_share", "F3a", "F3b", "F3c", "knapsack_share", "insight_share",
            "v05", "default")
