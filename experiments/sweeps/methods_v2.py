"""Methods on the proving ground v2 (issue 33), each placed between GRPO G = 4 and its family's
oracle (ground_v2's runs): one command trains the PRMs the process-reward presets need, then
runs the presets from ground_v2's shared SFT, two runs at a time:

    python -m experiments.sweeps.methods_v2 --workdir_root=runs/sweeps --jobs=2 [--split=dev]

`--split=dev` runs the screening seeds (0, 1, 2) whose dev accuracy picks each family's setting
and writes experiments/sweeps/methods_v2_dev_report.{md,png,json} (dev accuracy); the default
runs the table's 5 seeds and writes methods_v2_report.{md,png,json} (test accuracy), each JSON
variant with its `family`, `oracle`, `recovered_share` and `recovered_share_ci95`.
`--report_only` writes the report from the runs finished so far; `--report_name` names it
(the rollout engines ran from a retrained SFT: methods_v2_engines_report).

The runs go to ROOT/methods_v2/NAME; the PRMs to
ROOT/methods_v2/_prm/{pav,truth}. The SFT policy is ground_v2's (`sft.seed = 0` pins it; a link
from ROOT/methods_v2/_sft to ROOT/ground_v2/_sft saves its 7 minutes, else the launcher trains it
again, bit for bit the same on the same machine), so every run pairs with ground_v2's `grpo_g4`
and `oracle_prm` of the same seed. Runs pair only with runs from the same machine and install: the
same code and config, installed afresh on another 2-core CPU machine (2026-11-27), trained an SFT
policy of dev/test greedy 0.285/0.279 (against 0.282/0.271), and GRPO G = 4 from it ended at
0.506 on the test set over 5 seeds (against 0.452), so a sweep on a new machine runs its
baselines again (`ground_v2 --variants=grpo_g4`), unless it reproduces a finished run exactly
(a third machine, 2026-11-28, trained an SFT that scored as the first and reproduced a run):
then `--baseline` names a variant it has and `experiments.merge_reports` joins the two
machines' reports by seed. The report is `experiments.report` over both directories with each
variant's family oracle (`--oracle=METHOD:ORACLE`, the share of the oracle's gain recovered);
docs/research/methods-v2.md has the table.

Process rewards (oracle: `oracle_prm`, PAV with a perfect prover):
  pav_bok4_a1, pav_bok4_a2  PAV (docs/algorithms.md §5.1) with a PRM fitted on Monte Carlo labels of
                     the best-of-4 prover (`prover_k` 4, within the issue's 4-8), 16
                     continuations per step prefix, from 4,096 completions of the SFT policy
                     (1,024 train problems x 4); alpha 1 or 2 (the paper sweeps alpha and gives
                     no value): the dev screen picked 1, so alpha 2 runs on seeds 0-2 only.
  pav_g8             pav_bok4_a1 at G = 8's rows (8 a prompt, 256 a step), the family's best at
                     G = 8's rollout tokens, read against ground_v2's grpo_g8.
  pav_truth_a1       PAV with a PRM of the same size fitted on the step checker's own labels
                     (`train_prm --kinds=truth`, 16,384 completions): the best a learned PRM of
                     this size reaches here, so a PAV row between it and the oracle says how much
                     of the gap is the labels and how much the model.
  prime_ratio        PRIME (§5.2) with the reference's PRM-to-policy learning-rate ratio (1e-6
                     against 5e-7: 2) at ladder2's policy rate, 8e-5 against 4e-5 (the earlier
                     ladder run kept PRIME's absolute 1e-6 against 1e-4, a ratio of 1/100, and its
                     PRM did not learn), and the reference's normalisation (`process.norm`
                     'batch': the token rewards divided by the batch's largest |return|).

Rollout engines (oracle: `oracle_treepo`, TreePO cut at step boundaries):
  echo_measured      ECHO (§3.5) with its branch thresholds set from the entropies measured at this
                     task's decisions (`experiments.echo_survey` on the shared SFT policy,
                     docs/research/methods-v2.md, ECHO's thresholds as measured): the policy's
                     result tokens of carrying steps have a median entropy near 0.7 nats (a
                     0.6/0.4 choice) and its copying tokens below 0.01, so H_high 0.3 (H_low 0);
                     its windowed confidence C^G does not separate the two, so the confidence
                     test is off
                     (c_b 20.8, above any C_t: -log 1e-9 = 20.7); a carry is a choice of two, so
                     at most 2 branches, and children may branch at their own next decision
                     (`nested`); the prune rule cut right and wrong completions alike, so it is off.
  arrol_g4           ARRoL (§6.6) as the ladder's preset that gained +0.018 +- 0.015 there
                     (experiments/sweeps/engine.py), replicated at G = 4: N0 = 6 rows a prompt,
                     pruned to 4 at 24 of 96 tokens (prune_frac 0.25) by the online quality head,
                     the balanced keep rule (rho 0.5, §6.6's worked N0 = 6, N = 4).
  april_g4           APRIL (§7) as slime's scripts: twice the groups launched (`partial.groups` 0
                     = 2 x 32), the first 32 complete are the batch, the rest resume next step;
                     truncated importance sampling, cap 2 (the ladder's preset).
  latr_g4            LATR (§3.1) with the reference's math settings (config defaults): tau_abs
                     0.15, tau_rel 0.25 (a 0.6/0.4 carry choice forks: 0.4 > 0.15 and 0.2 <
                     0.25), windows (20, 30, 50), suffix-match 0.2 and ROUGE-L 0.5; its mix
                     schedule keeps all 4 rows from the tree over these 100 steps (eta 1 to step
                     100).
  latr_g8            LATR as latr_g4 with 8 rows a prompt (256 rows a step) at about G = 4's
                     rollout tokens: latr_g4 decoded 2,843 tokens a step for a batch of 5,672 (its
                     rows share their prefixes up to each fork). The issue's "at GRPO G = 4's
                     rollout tokens" for a tree engine; read against grpo_g4 (equal tokens) and
                     grpo_g8 (equal rows).
  latr_p64           LATR as latr_g4 at G = 8's 256 rows a step spent on twice the prompts (64 x 4)
                     rather than on wider trees: at 8 rows a prompt latr_g8's trees grew fewer
                     live branches than its slots (about 116 of 256 rows; the rest copies of a
                     root's first row). Read against grpo_g8 (equal rows): the issue's goal of
                     G = 8's final test accuracy with <= 60% of its rollout tokens.
  grpo_p64           latr_p64's control: GRPO G = 4 at 64 prompts a step (G = 8's 256 rows as
                     twice the prompts), so that the prompts and the tree are measured apart.
  eptree_g4          EPTree (§3.2) at 4 leaves: (M, N, L, T) = (2, 1, 1, 1), two chains, each
                     forked once at its highest -log p token with one continuation (the
                     reference's (6, 2, 1, 2) makes 30 leaves and keeps 16, 7.5x the rows), and
                     TreeRL's advantage in the reference code's form (`treerl_code`).
  treepo_fixed       TreePO (§3.3) as its reference segments it: fixed-length segments, 512 of
                     8,192 tokens there, so 6 of 96 here, 2 paths from the prompt forking into 2
                     (4 leaves), TreePO's subgroup advantage. The family's oracle is the same
                     engine cut at the scratchpad's newlines (`oracle_treepo`, ground_v2).
  treepo_fixed_grpo  The ablation between the two: treepo_fixed's 6-token segments with the
                     oracle's advantage (ladder2's GRPO over the leaves, no whitening), so that
                     where the tree forks and which advantage it trains on are measured apart.

Allocation and data selection (oracle: `oracle_knapsack_pool`; baseline: `grpo_g4_pool`). On the
full train set a prompt is almost never drawn twice, so a history-based allocator has nothing
to read; these run on a fixed pool of 400 train problems (`rl.prompt_pool`: 100 steps x 32
prompts visit each about 8 times), with their own GRPO G = 4 on the same pool as the baseline
their share is measured from. Every one spends G = 4's 128 rows a step; the ragged ones let a
prompt get up to 32 (`rl.max_group_size`).
  grpo_g4_pool       GRPO G = 4 on the pool.
  oracle_knapsack_pool  Knapsack with the oracle prior (16 Monte Carlo samples of the current
                     policy per prompt, not rollout tokens), min_n 1 as ground_v2's oracle, cap 32.
  knapsack_buf16     Knapsack RL (§6.1) as its public code: p from the prompt's last 16 rollouts
                     (`allocation.history_rollouts`), an estimate from 8 (`knapsack.min_obs`),
                     min_n 2, the fallback on, a prompt without an estimate gets the mean (4; the
                     reference's N = 8 is its mean), cap 32 (the reference: 128 of 2,048 rows).
  dars_hw_pool       DARS (§6.2) Hardness Weighted, a = the prompt's accuracy over its last 16
                     rollouts (the reference's stage 1 is 8 fresh rows; G = 4's budget has no
                     room for them), N = min_n = 2, its wants scaled into the budget, cap 32.
  xrpo_pool          XRPO (§6.3, the reconstructed priority): min_n 2, then one row at a time to
                     the largest uncertainty reduction plus bonus, s from the last 16 rollouts.
  vade_pool          VADE (§6.5): Thompson sampling on decayed Beta posteriors picks 32 of 128
                     candidates; G = 4 each.
  insight_pool       InSight (§6.4): the top 32 of 128 candidates by weighted mutual information.
The family's best at G = 8's rollout tokens (256 rows a step; baseline `grpo_g8_pool`, no oracle):
  grpo_g8_pool       GRPO G = 8 on the pool.
  knapsack_g8_pool   knapsack_buf16 at 256 rows a step: a prompt without an estimate gets their
                     mean, 8 (the reference's N), cap 32.
  insight_g8_pool    insight_pool with G = 8 rows for each of its 32 prompts.

The combined recipe (baseline `grpo_g4_pool`; no oracle):
  recipe_knapsack_pav  `knapsack_buf16` with `pav_bok4_a1`'s process reward on the pool: the
                     allocator the dev screen ranked first (seeds 0-2, dev accuracy paired against
                     grpo_g4_pool: Knapsack +0.012, XRPO +0.004, InSight +0.002, VADE -0.007,
                     DARS -0.016) with the process reward whose interval is above 0. No engine:
                     ECHO makes dense groups only, and Knapsack needs ragged ones.
  recipe_latr_pav    The recipe on the full train set (baseline `grpo_g4`, read against
                     `grpo_g8` too): latr_p64, the engine that reached G = 8's final test accuracy
                     with half its rollout tokens, with pav_bok4_a1's process reward. No
                     allocator: every one needs the revisited pool, which costs more than any
                     of them won back.

Value prior (oracle: `oracle_v05_eq`, V0.5 with the Monte Carlo prior):
  v05_v0_eq          V0.5 (§4.2) with V0's learned prior at G = 4's rows: the first round is 24
                     prompts x 4 (96 rows), and the extra rounds of prompts that reject the prior
                     (doubling to 16) draw on the 32 rows the batch has left (`rl.rows` 128);
                     unused rows are not spent, so its rollout tokens are at most G = 4's.
  v05_v0_g8          v05_v0_eq at G = 8's rows (`oracle_v05_g8` its oracle, the Monte Carlo
                     prior): 24 prompts x 8 (192 rows) first, the extra rounds (doubling to 16)
                     from the 64 rows left of 256; read against ground_v2's grpo_g8.
  grpo_g4_b24        GRPO G = 4 at V0.5's first round alone (24 prompts, 96 rows a step): the
                     ablation that separates the fewer prompts from V0.5's fused baseline.
  grpo_g8_b24        The same ablation at G = 8's rows: 24 prompts x 8 (192 rows a step), V0.5
                     at G = 8's rows' first round alone.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

from absl import app, flags

from experiments.sweeps import ground_v2, launch
from experiments.sweeps.mechanism import write_tables

BASE_CONFIG = ground_v2.BASE_CONFIG
TEST_SEEDS = ground_v2.SEEDS
DEV_SEEDS = (0, 1, 2)
POLICY_LR = 4e-5  # ladder2.py's RL learning rate

# ECHO's thresholds from `experiments.echo_survey` (see the module docstring).
ECHO_MEASURED = {"entropy_high": 0.3, "entropy_low": 0.0, "branch_threshold": 20.8,
                 "max_branches": 2, "prune": False, "nested": True}

# The other rollout engines at G = 4 (see the module docstring for each setting's source).
ENGINES = {
    "arrol_g4": {"rl.rollout": "arrol", "rl.arrol.oversample": 1.5, "rl.arrol.prune_frac": 0.25,
                 "rl.arrol.rule": "balanced"},
    "april_g4": {"rl.partial.enabled": True, "rl.tis_cap": 2.0},
    "latr_g4": {"rl.rollout": "latr"},
    "latr_g8": {"rl.rollout": "latr", "rl.group_size": 8},
    "latr_p64": {"rl.rollout": "latr", "rl.prompts_per_step": 64},
    "eptree_g4": {"rl.rollout": "eptree", "rl.eptree.num_chains": 2,
                  "rl.eptree.forks_per_round": 1, "rl.eptree.rounds": 1,
                  "rl.eptree.branches": 1, "rl.advantage": "treerl_code"},
    "treepo_fixed": {"rl.rollout": "treepo", "rl.treepo.segment": "fixed",
                     "rl.treepo.segment_len": 6, "rl.advantage": "treepo"},
    "treepo_fixed_grpo": {"rl.rollout": "treepo", "rl.treepo.segment": "fixed",
                          "rl.treepo.segment_len": 6},
}

# Allocators run on a fixed pool of POOL train problems (`rl.prompt_pool`), so that 100 steps of 32
# prompts revisit each about 8 times and history-based estimates exist (on the full train set a
# prompt is almost never seen twice); a prompt may get up to MAX_ROWS rows of the same 128-row
# budget (`rl.max_group_size`).
POOL = 400
MAX_ROWS = 32
ON_POOL = {"rl.prompt_pool": POOL}
RAGGED = dict(ON_POOL, **{"rl.max_group_size": MAX_ROWS})
# The history-based allocators' estimates: each prompt's last 16 rollouts, min_n 2 (Knapsack's).
BUFFER16 = {"rl.allocation.min_n": 2, "rl.allocation.history_rollouts": 16}
# G = 8's rollout tokens: 8 rows a prompt on average, 256 a step.
G8 = {"rl.group_size": 8}

# V0.5 (docs/algorithms.md §4.2) inside G = 4's 128 rows a step: the first round samples G = 4 rows
# of 24 prompts (96 rows) and the batch holds R_max = 128 (`rl.rows`), so the extra rounds of
# prompts that reject their prior (doubling up to n_max = 16) draw on the 32 rows left; rows they do
# not use are not spent, so V0.5's rollout tokens are at most G = 4's.
V05_EQUAL_ROWS = {"rl.advantage": "v05", "rl.prompts_per_step": 24, "rl.rows": 128,
                  "rl.max_group_size": 16, "rl.v05.n_max": 16}
# V0.5 inside G = 8's 256 rows, in the same proportions: 24 prompts x 8 (192 rows) first, the
# extra rounds (doubling to 16) from the 64 left.
V05_G8_ROWS = dict(V05_EQUAL_ROWS, **G8, **{"rl.rows": 256})

# How each PRM is trained (`experiments.train_prm` flags), from the shared SFT policy.
PRMS = {
    "pav": dict(kinds="pav", num_prompts=1024, samples=4, n_mc=16, prover_k=4, steps=600),
    "truth": dict(kinds="truth", num_prompts=4096, samples=4, steps=2000),
}


def prm_dir(root: str, name: str) -> str:
  """Where PRM `name` is saved: ROOT/methods_v2/_prm/NAME/KIND."""
  return os.path.join(root, "methods_v2", "_prm", name, PRMS[name]["kinds"])


def presets_knapsack() -> dict:
  """Knapsack RL as its public code (see the module docstring: `knapsack_buf16`)."""
  return dict(BUFFER16, **{"rl.allocator": "knapsack", "rl.allocation.knapsack.min_obs": 8})


def variants(root: str = "runs/sweeps") -> dict:
  """Variant name -> config overrides (the PRM paths under `root`)."""
  pav = lambda name, alpha: {"rl.process_reward": "pav", "rl.process.alpha": alpha,
                             "rl.process.prm_dir": prm_dir(root, name)}
  return {
      "pav_bok4_a1": pav("pav", 1.0),
      "pav_bok4_a2": pav("pav", 2.0),
      "pav_g8": dict(pav("pav", 1.0), **G8),
      "pav_truth_a1": pav("truth", 1.0),
      "prime_ratio": {"rl.process_reward": "prime", "rl.process.prm_lr": 2 * POLICY_LR,
                      "rl.process.norm": "batch"},
      "echo_measured": dict({"rl.rollout": "echo"},
                            **{f"rl.echo.{k}": v for k, v in ECHO_MEASURED.items()}),
      **ENGINES,
      # latr_p64's control: plain GRPO G = 4 at its 64 prompts a step (256 rows, G = 8's).
      "grpo_p64": {"rl.prompts_per_step": 64},
      # The allocators' family, all on the pool: its baseline and oracle first.
      "grpo_g4_pool": dict(ON_POOL),
      "oracle_knapsack_pool": dict(RAGGED, **{
          "rl.allocator": "knapsack", "rl.allocator_prior": "oracle", "rl.allocation.min_n": 1}),
      "knapsack_buf16": dict(RAGGED, **presets_knapsack()),
      "dars_hw_pool": dict(RAGGED, **BUFFER16, **{
          "rl.allocator": "dars", "rl.allocation.dars.schedule": "hw"}),
      "xrpo_pool": dict(RAGGED, **BUFFER16, **{"rl.allocator": "xrpo"}),
      "vade_pool": dict(ON_POOL, **{"rl.allocator": "vade", "rl.max_group_size": 4}),
      "insight_pool": dict(ON_POOL, **{"rl.allocator": "insight", "rl.max_group_size": 4}),
      # The family's best at G = 8's 256 rows a step, and their GRPO.
      "grpo_g8_pool": dict(ON_POOL, **G8),
      "knapsack_g8_pool": dict(RAGGED, **presets_knapsack(), **G8),
      "insight_g8_pool": dict(ON_POOL, **G8, **{"rl.allocator": "insight", "rl.max_group_size": 8}),
      # V0.5 at G = 4's rows: its oracle (the Monte Carlo prior) and V0's learned prior.
      "oracle_v05_eq": dict(V05_EQUAL_ROWS, **{"rl.v05.prior": "oracle"}),
      "v05_v0_eq": dict(V05_EQUAL_ROWS, **{"rl.v05.prior": "v0"}),
      # The family at G = 8's rows, its oracle with it (read against ground_v2's grpo_g8).
      "oracle_v05_g8": dict(V05_G8_ROWS, **{"rl.v05.prior": "oracle"}),
      "v05_v0_g8": dict(V05_G8_ROWS, **{"rl.v05.prior": "v0"}),
      # V0.5's first round alone: GRPO G = 4 at 24 prompts a step (96 rows), no prior, no extra
      # rounds (the ablation that separates the fewer prompts from the fused baseline).
      "grpo_g4_b24": {"rl.prompts_per_step": 24},
      "grpo_g8_b24": {"rl.prompts_per_step": 24, **G8},  # the same at G = 8's rows: 24 x 8
      # The combined recipe: the best allocator on the dev screen with the best process reward.
      "recipe_knapsack_pav": dict(
          RAGGED, **presets_knapsack(), **pav("pav", 1.0)),
      # The recipe on the full train set: the engine that reached G = 8's final (latr_p64) with
      # the process reward whose interval is above 0; no allocator (they need the pool).
      "recipe_latr_pav": dict(ENGINES["latr_p64"], **pav("pav", 1.0)),
  }


# Each variant's family and the ground_v2 oracle it is placed against.
FAMILIES = {
    "pav_bok4_a1": ("process reward", "oracle_prm"),
    "pav_bok4_a2": ("process reward", "oracle_prm"),
    "pav_g8": ("process reward", None),
    "pav_truth_a1": ("process reward", "oracle_prm"),
    "prime_ratio": ("process reward", "oracle_prm"),
    "echo_measured": ("rollout engine", "oracle_treepo"),
    **{name: ("rollout engine", "oracle_treepo") for name in ENGINES},
    "knapsack_buf16": ("allocation", "oracle_knapsack_pool", "grpo_g4_pool"),
    "dars_hw_pool": ("allocation", "oracle_knapsack_pool", "grpo_g4_pool"),
    "xrpo_pool": ("allocation", "oracle_knapsack_pool", "grpo_g4_pool"),
    "vade_pool": ("data selection", "oracle_knapsack_pool", "grpo_g4_pool"),
    "insight_pool": ("data selection", "oracle_knapsack_pool", "grpo_g4_pool"),
    "knapsack_g8_pool": ("allocation", None, "grpo_g8_pool"),
    "insight_g8_pool": ("data selection", None, "grpo_g8_pool"),
    "v05_v0_eq": ("value prior", "oracle_v05_eq"),
    "v05_v0_g8": ("value prior", "oracle_v05_g8", "grpo_g8"),
    "recipe_knapsack_pav": ("recipe", None, "grpo_g4_pool"),
    "recipe_latr_pav": ("recipe", None),
}
# The families' own baselines and oracles among the variants (not methods).
FAMILY_BASELINES = ("grpo_g4_pool", "grpo_g4_b24", "grpo_p64", "grpo_g8_pool", "grpo_g8_b24")
FAMILY_ORACLES = ("oracle_knapsack_pool", "oracle_v05_eq", "oracle_v05_g8")
# ground_v2's runs every table reads beside these: the baseline, G = 8 (the tokens target) and
# the oracles.
GROUND = ("grpo_g4", "grpo_g8", "oracle_prm", "oracle_treepo")


# Settings the dev screen did not pick (seeds 0-2 only; docs/research/methods-v2.md has their
# numbers).
SCREENED_OUT = ("pav_bok4_a2",)


def get_sweep(root: str = "runs/sweeps", split: str = "test", only=None,
              seeds=None) -> list[dict]:
  """One dict per run (overrides plus 'name'), seed by seed; the table's seeds beyond the
  screen's skip the settings the screen left out. `only`: these variants alone (names).
  `seeds`: these seeds alone (default: the split's); the dev split takes only its own, the test
  split also seeds past the table's 0-4, more replicates of a noisy comparison."""
  seeds = sorted(set(seeds or (DEV_SEEDS if split == "dev" else TEST_SEEDS)))
  if set(seeds) - set(DEV_SEEDS) if split == "dev" else min(seeds) < 0:
    raise ValueError(f"--seeds={','.join(map(str, seeds))}: expected " + (
        f"seeds of the dev split, {list(DEV_SEEDS)}" if split == "dev" else "seeds >= 0"))
  presets = variants(root)
  unknown = sorted(set(only or ()) - set(presets))
  if unknown:
    raise ValueError(f"--variants names {unknown}; expected names from {sorted(presets)}")
  return [dict(overrides, seed=seed, name=f"{variant}_seed{seed}")
          for seed in seeds for variant, overrides in presets.items()
          if (seed in DEV_SEEDS or variant not in SCREENED_OUT) and (not only or variant in only)]


def prms_needed(sweep: list[dict], root: str) -> list[str]:
  """The PRMs (names in PRMS) whose directory a run of `sweep` reads, in PRMS' order."""
  dirs = {run.get("rl.process.prm_dir") for run in sweep}
  return [name for name in PRMS if prm_dir(root, name) in dirs]


def prm_command(root: str, name: str) -> list[str]:
  """argv of `experiments.train_prm` for PRM `name` on the shared SFT policy."""
  sft = os.path.join(root, "methods_v2", "_sft", "seed0")
  out = os.path.dirname(prm_dir(root, name))
  return [sys.executable, "-m", "experiments.train_prm", f"--workdir={sft}", f"--out={out}"] + [
      f"--{k}={v}" for k, v in PRMS[name].items()]


def finished(root: str) -> set:
  """Variants with at least one finished run (a summary.json) under ROOT/methods_v2, and the
  GROUND variants finished under ROOT/ground_v2."""
  done = lambda sub, name: bool(glob.glob(os.path.join(root, sub, name + "_seed*", "summary.json")))
  return ({v for v in variants(root) if done("methods_v2", v)} |
          {g for g in GROUND if done("ground_v2", g)})


def report_command(root: str, out: str, split: str = "test", done=None,
                   baseline: str = ground_v2.BASELINE) -> list[str]:
  """argv of `experiments.report` over the finished runs and ground_v2's (OUT.{md,png,json}).
  `done`: the variants with finished runs (default: `finished(root)`); a family pair naming one
  that has none is left out of `--oracle` (a partial sweep). `baseline`: the variant the report
  pairs against (another where G = 4's runs are on another machine: `experiments.merge_reports`
  joins the reports by seed)."""
  done = finished(root) if done is None else set(done)
  ground = [f"--workdirs={root}/ground_v2/{name}_seed*" for name in GROUND]
  oracles = ",".join(":".join([v, *f[1:]]) for v, f in FAMILIES.items()
                     if f[1] and {v, *f[1:]} <= done)
  return [sys.executable, "-m", "experiments.report", f"--workdirs={root}/methods_v2/[!_]*",
          *ground, f"--baseline={baseline}", f"--oracle={oracles}", f"--split={split}",
          f"--out={out}.md", f"--png={out}.png", f"--json={out}.json"]


def add_families(json_path: str) -> None:
  """Adds `family` to each variant object of the report's JSON (the ground's own variants:
  'baseline', 'budget' or 'oracle'), and its `oracle`, `recovered_share` and
  `recovered_share_ci95` as plain fields (report.py's object, with its seeds and whether the
  oracle's gain is resolved, moves to `recovered`; null where the variant has no oracle)."""
  with open(json_path) as f:
    data = json.load(f)
  for v in data["variants"]:
    name = v["name"]
    v["family"] = (FAMILIES[name][0] if name in FAMILIES else
                   "baseline" if name in (ground_v2.BASELINE, *FAMILY_BASELINES) else
                   "oracle" if name.startswith("oracle_") else "budget")
    rec = v.pop("recovered_share", None) or {}
    v.update(oracle=rec.get("oracle"), recovered_share=rec.get("share"),
             recovered_share_ci95=rec.get("ci95"), recovered=rec or None)
  with open(json_path, "w") as f:
    json.dump(data, f, indent=1)


# ground_v2's runs the engines' table reads the engines against: G = 4, G = 8 (latr_g8's rows)
# and the family's oracle.
ENGINE_REFERENCES = (ground_v2.BASELINE, "grpo_g8", "oracle_treepo")
# Other rows of the engines' table: an engine preset's own control (in FAMILY_BASELINES) and the
# recipe built on an engine.
ENGINE_EXTRAS = ("grpo_p64", "recipe_latr_pav")


def _engine_row(name: str) -> bool:
  """Whether `name` has a row in the engines' table: the engines, ENGINE_EXTRAS and
  ENGINE_REFERENCES."""
  return (FAMILIES.get(name, ("",))[0] == "rollout engine" or name in ENGINE_REFERENCES
          or name in ENGINE_EXTRAS)


def mechanism_variants() -> tuple:
  """The variants whose mechanism the tables describe: the presets on the prompt pool
  (allocators, data selection, their baseline, oracle and the recipe), V0.5's and the rollout
  engines, and ENGINE_REFERENCES beside the engines."""
  return tuple(v for v, o in variants().items()
               if "rl.prompt_pool" in o or o.get("rl.advantage") == "v05" or _engine_row(v)
               ) + ENGINE_REFERENCES


def add_mechanism(out_prefix: str, root: str, names=None) -> None:
  """Adds each variant's seed-mean `mechanism` to OUT.json and its tables to OUT.md
  (`mechanism.write_tables`): runs under ROOT/methods_v2, GROUND's under ROOT/ground_v2."""
  write_tables(out_prefix, root, names, ground=GROUND, engine_row=_engine_row)


if __name__ == "__main__":
  _ROOT = flags.DEFINE_string("workdir_root", "runs/sweeps", "Runs go to ROOT/methods_v2/NAME.")
  _JOBS = flags.DEFINE_integer("jobs", 2, "Runs at once after the shared SFT.", lower_bound=1)
  _SPLIT = flags.DEFINE_enum("split", "test", ["dev", "test"],
                             "dev: the screening seeds 0-2; test: the table's seeds 0-4.")
  _DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the commands instead of running them.")
  _OUT = flags.DEFINE_string("out_dir", "experiments/sweeps",
                             "Where methods_v2_report.{md,png,json} go (the dev screen: "
                             "methods_v2_dev_report).")
  _REPORT_ONLY = flags.DEFINE_bool("report_only", False, "Write the report from the runs that "
                                   "have finished so far; start none.")
  _VARIANTS = flags.DEFINE_list("variants", None, "Run these presets only (default: all); the "
                                "report still reads every finished run.")
  _SEEDS = flags.DEFINE_list("seeds", None, "Run these seeds only (default: the split's); a "
                             "second launcher can then share a sweep without running the same "
                             "run twice. The test split also takes seeds past 0-4: more "
                             "replicates of a noisy comparison.")
  _BASELINE = flags.DEFINE_string("baseline", ground_v2.BASELINE, "The variant the report is "
                                  "paired against (another where G = 4's runs are elsewhere).")
  _REPORT_NAME = flags.DEFINE_string("report_name", None, "The report's file name, without "
                                     "suffix (default: methods_v2_report, or "
                                     "methods_v2_dev_report with --split=dev).")

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    root = _ROOT.value
    try:
      if not all(x.isdigit() for x in _SEEDS.value or ()):
        raise ValueError(f"--seeds={','.join(_SEEDS.value)}: expected non-negative integers")
      sweep = get_sweep(root, _SPLIT.value, _VARIANTS.value,
                        _SEEDS.value and [int(x) for x in _SEEDS.value])
    except ValueError as e:
      raise app.UsageError(str(e)) from None
    if not _REPORT_ONLY.value:
      steps = launch.plan(sweep, BASE_CONFIG,
                          os.path.join(root, "methods_v2"), True,
                          launch.base_sft_seed(BASE_CONFIG))
      launch.execute(steps[:1], 1, _DRY_RUN.value)  # the shared SFT
      for name in prms_needed(sweep, root):
        cmd = prm_command(root, name)
        if _DRY_RUN.value:
          print(" ".join(cmd))
        elif not os.path.exists(os.path.join(prm_dir(root, name), "prm.json")):
          subprocess.run(cmd, check=True)
      launch.execute(steps[1:], _JOBS.value, _DRY_RUN.value)
    out = os.path.join(_OUT.value, _REPORT_NAME.value or (
        "methods_v2_report" if _SPLIT.value == "test" else "methods_v2_dev_report"))
    report = report_command(root, out, _SPLIT.value, baseline=_BASELINE.value)
    if _DRY_RUN.value:
      print(" ".join(report))
      return
    subprocess.run(report, check=True)
    add_families(out + ".json")
    add_mechanism(out, root, mechanism_variants())

  app.run(main)
