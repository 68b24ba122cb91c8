"""Every rollout-side config check (docs/design.md §7), run before anything is built or trained.

`check_config(config)` raises ValueError naming the field, the value and what was expected for
rollout settings no run can use: rewards, rollout mode and its sampler options, the batch layout
(dense / ragged), the allocator and its budget, APRIL, the round rules and V0.5.
`train.config_check.check` calls it (as a `ConfigError`).
"""

from __future__ import annotations

from rl_jax import rewards as rewards_lib
from rl_jax.rl import allocation as alloc_lib
from rl_jax.rollout import april, engines, planner, rules
from rl_jax.rollout.engines import RAGGED_ROLLOUTS, RAGGED_TREES
from rl_jax.rollout.requests import batch_rows, is_ragged, max_group_size
from rl_jax.sampling import arrol, echo, eptree, latr, treepo
from rl_jax.value import priors

def check_config(config) -> None:
  """Raises ValueError for inconsistent `config.rl` rollout settings."""
  rl = config.rl
  if "allocation" in rl:
    _check_allocation(config)
  if not rl.rewards:
    raise ValueError("config.rl.rewards is empty; expected reward names such as ('task_score',)")
  for name in rl.rewards:
    if name not in rewards_lib.REWARDS:
      raise ValueError(f"config.rl.rewards names an unknown reward {name!r}; expected one of "
                       f"{list(rewards_lib.REWARDS.names())}")
  if rl.reward_weights and len(rl.reward_weights) != len(rl.rewards):
    raise ValueError(f"config.rl.reward_weights has {len(rl.reward_weights)} entries for "
                     f"{len(rl.rewards)} rewards {tuple(rl.rewards)}")
  if rl.max_gen_rounds < 1:
    raise ValueError(f"config.rl.max_gen_rounds must be >= 1, got {rl.max_gen_rounds}")
  if not 0 <= rl.overlong_buffer <= config.sampling.max_new_tokens:
    raise ValueError(f"config.rl.overlong_buffer={rl.overlong_buffer}: expected an integer in "
                     f"[0, sampling.max_new_tokens={config.sampling.max_new_tokens}]")
  if rl.rollout not in engines.rollout_modes():
    raise ValueError(f"config.rl.rollout={rl.rollout!r}; expected one of "
                     f"{list(engines.rollout_modes())}")
  if rl.rollout == "latr":
    latr.LatrOptions.from_config(config)
    steps = [s for s, _ in rl.latr.mix_schedule]
    if steps != sorted(steps) or any(not 0 <= e <= 1 for _, e in rl.latr.mix_schedule):
      raise ValueError(f"config.rl.latr.mix_schedule must be (step, eta) pairs sorted by step "
                       f"with eta in [0, 1], got {rl.latr.mix_schedule}")
  if rl.rollout == "eptree":
    leaves = eptree.EPTreeOptions.from_config(config).leaves
    for field in ("group_size", "max_group_size"):
      if rl[field] > leaves:
        raise ValueError(f"config.rl.{field}={rl[field]} exceeds the {leaves} leaves per "
                         f"prompt of config.rl.eptree (num_chains·(1 + rounds·forks_per_round·"
                         f"branches))")
  # Ragged batches carry a tree per slot across rounds (pool.assemble_tree); dense ones
  # only the one round's tree.
  tree_across_rounds = is_ragged(config) and rl.rollout in RAGGED_TREES
  if rl.rollout in ("eptree", "treepo", "echo") and rl.dynamic_sampling and (
      not tree_across_rounds):
    raise ValueError(f"config.rl.dynamic_sampling is not supported with rollout="
                     f"{rl.rollout!r} (groups carry a tree) in dense groups; use rollout='iid' "
                     "or 'latr', or ragged groups (config.rl.max_group_size > 0)")
  if rl.rollout == "treepo":
    treepo.TreePOOptions.from_config(config)
  if rl.rollout == "echo":
    _check_echo(config)
  if rl.rollout == "arrol":
    arrol.ArrolOptions.from_config(config)
  if not 0.0 <= rl.success_threshold < 1.0:
    raise ValueError(f"config.rl.success_threshold must be in [0, 1) (a rollout succeeds when "
                     f"its first reward component exceeds it), got {rl.success_threshold}")
  _check_layout(config)
  _check_april(config)
  rules.active_rules(config)
  if rl.advantage == "v05":
    _check_v05(config)


def _check_v05(config) -> None:
  """advantage='v05' needs ragged groups that can hold n_max rows, and a known prior."""
  rl, v = config.rl, config.rl.v05
  if not rl.group_size <= v.n_max <= rl.max_group_size:
    raise ValueError(f"config.rl.advantage='v05' with group_size={rl.group_size}, "
                     f"v05.n_max={v.n_max}, max_group_size={rl.max_group_size}; expected "
                     "group_size <= v05.n_max <= max_group_size (ragged groups, e.g. "
                     "--config.rl.max_group_size=16 --config.rl.rows=2*B*G)")
  if rl.dynamic_sampling:
    raise ValueError("config.rl.advantage='v05' with dynamic_sampling=True; expected "
                     "dynamic_sampling=False (V0.5 draws its own extra rounds)")
  if v.prior not in priors.PRIORS:
    raise ValueError(f"config.rl.v05.prior={v.prior!r}; expected one of "
                     f"{list(priors.PRIORS.names())}")
  if not 0 < v.p0_clip[0] < v.p0_clip[1] < 1:
    raise ValueError(f"config.rl.v05.p0_clip={tuple(v.p0_clip)}; expected (lo, hi) with "
                     "0 < lo < hi < 1")


def _check_echo(config) -> None:
  """rollout='echo': valid `config.rl.echo` options, and fewer branching rows than G (0 = no
  branching)."""
  opts = echo.EchoOptions.from_config(config)
  g = config.rl.group_size
  if opts.branch_roots >= g:
    raise ValueError(f"config.rl.echo.branch_roots={opts.branch_roots}: expected fewer than "
                     f"group_size={g} (the other slots hold the branches; 0 = no branching)")


def _check_layout(config) -> None:
  """Raises ValueError for inconsistent planner settings (`config.rl.rows`, `max_group_size`,
  `allocator`, `success_threshold`)."""
  rl = config.rl
  if rl.max_group_size < 0 or rl.rows < 0:
    raise ValueError(f"config.rl.max_group_size and config.rl.rows must be >= 0 (0 = off / B·G); "
                     f"got {rl.max_group_size} and {rl.rows}")
  if not is_ragged(config):
    if rl.rows:
      raise ValueError(f"config.rl.rows={rl.rows} needs the ragged layout; expected "
                       "config.rl.rows=0 or config.rl.max_group_size > 0")
    if rl.allocator != "uniform":
      raise ValueError(f"config.rl.allocator={rl.allocator!r} gives prompts different row counts; "
                       "expected config.rl.max_group_size (G_max) > 0 (the ragged layout)")
    return
  if rl.rollout not in RAGGED_ROLLOUTS:
    raise ValueError(f"config.rl.rollout={rl.rollout!r} with the ragged layout "
                     f"(config.rl.max_group_size > 0) is not supported; expected rollout in "
                     f"{RAGGED_ROLLOUTS}")
  if rl.rollout in RAGGED_TREES and (rl.advantage == "v05" or (
      "allocation" in rl and rl.allocation.probe)):
    raise ValueError(f"config.rl.rollout={rl.rollout!r} with extension rounds (advantage='v05' "
                     "or config.rl.allocation.probe > 0) is not supported: extra rows of a "
                     "prompt come from the iid engine and have no place in its tree; use "
                     "rollout in ('iid', 'latr') or probe=0")
  r = batch_rows(config)
  if r < rl.prompts_per_step:
    raise ValueError(f"config.rl.rows={r} is below prompts_per_step={rl.prompts_per_step}; "
                     "expected at least one row per prompt")
  if r % rl.num_minibatches:
    raise ValueError(f"config.rl.rows={r} is not a multiple of num_minibatches="
                     f"{rl.num_minibatches}; expected a multiple")


def _check_allocation(config) -> None:
  """Raises ValueError naming the field for an allocation setting no run can use."""
  rl, a = config.rl, config.rl.allocation
  if rl.allocator not in alloc_lib.ALLOCATORS:
    raise ValueError(f"config.rl.allocator={rl.allocator!r}; expected one of "
                     f"{list(alloc_lib.ALLOCATORS.names())}")
  try:
    allocator = planner.allocator_from_config(config)
  except (alloc_lib.AllocationError, TypeError) as e:
    raise ValueError(f"config.rl.allocation.{rl.allocator}: {e}") from e
  for field in ("min_n", "probe", "history_steps", "history_rollouts", "candidates"):
    if not isinstance(a[field], int) or a[field] < 0:
      raise ValueError(f"config.rl.allocation.{field}={a[field]!r}; expected an integer >= 0")
  if not 0 <= rl.prompt_pool <= config.task.train_size:
    raise ValueError(f"config.rl.prompt_pool={rl.prompt_pool}; expected 0 (every train problem) "
                     f"to task.train_size={config.task.train_size}")
  if config.data.source != "memory" and (rl.prompt_pool or allocator.selects):
    raise ValueError(f"config.rl.prompt_pool and data-selection allocators draw their prompts "
                     f"from memory; config.data.source={config.data.source!r} is not supported "
                     "with them (use 'memory')")
  if rl.max_group_size and rl.max_group_size < rl.group_size:
    raise ValueError(f"config.rl.max_group_size={rl.max_group_size}: expected 0 (dense groups) "
                     f"or >= group_size={rl.group_size} (a budget of prompts_per_step x "
                     "group_size rows)")
  budget = planner.budget_from_config(config)
  try:
    budget.check(planner.num_candidates(config, allocator))
  except alloc_lib.AllocationError as e:
    raise ValueError(f"config.rl.allocation: {e}") from e
  if a.probe and a.probe != a.min_n:
    raise ValueError(f"config.rl.allocation.probe={a.probe} needs min_n == probe (every prompt "
                     f"keeps its probe rows); got min_n={a.min_n}")
  if a.probe and allocator.selects:
    raise ValueError(f"config.rl.allocation.probe={a.probe} is not supported with the "
                     f"data-selection allocator {rl.allocator!r} (it picks prompts before any "
                     "row is sampled); use probe=0")
  if rl.allocator_prior and not alloc_lib.ALLOCATORS.get(rl.allocator).reads_prior:
    readers = [n for n in alloc_lib.ALLOCATORS.names() if alloc_lib.ALLOCATORS.get(n).reads_prior]
    raise ValueError(f"config.rl.allocator_prior={rl.allocator_prior!r}: allocator "
                     f"{rl.allocator!r} does not read a prior; expected allocator in {readers} "
                     "or allocator_prior=''")
  if rl.allocator == "uniform":
    return
  if rl.rollout not in RAGGED_ROLLOUTS:
    raise ValueError(f"config.rl.allocator={rl.allocator!r} needs ragged groups, which "
                     f"rollout={rl.rollout!r} does not make; use rollout in {RAGGED_ROLLOUTS} or "
                     "allocator='uniform'")
  if not rl.max_group_size:
    raise ValueError(f"config.rl.allocator={rl.allocator!r} gives prompts different row counts: "
                     "set config.rl.max_group_size (G_max) > 0 for the ragged layout")
  if rl.allocator == "v0" and not rl.allocator_prior:
    raise ValueError("config.rl.allocator='v0' needs predictions p_hat: set "
                     "config.rl.allocator_prior (e.g. 'history', or 'v0' once V0 is registered)")
  if a.probe and (rl.dynamic_sampling or rl.advantage == "v05"):
    raise ValueError("config.rl.allocation.probe is not supported together with "
                     "dynamic_sampling or advantage='v05' (each asks for its own extra rounds); "
                     "use probe=0")
  rows = batch_rows(config)
  if rl.dynamic_sampling and rows < rl.prompts_per_step * max_group_size(config):
    raise ValueError(f"config.rl.dynamic_sampling with allocator={rl.allocator!r} keeps B groups "
                     f"from several rounds, up to B x max_group_size = "
                     f"{rl.prompts_per_step * max_group_size(config)} rows; config.rl.rows={rows} "
                     "is smaller")


def _check_april(config) -> None:
  """Raises ValueError naming the field when `config.rl.partial` cannot run with the rest of the
  config."""
  if "partial" not in config.rl:
    return
  rl, opts = config.rl, config.rl.partial
  if opts.groups < 0:
    raise ValueError(f"config.rl.partial.groups={opts.groups}: expected 0 (= 2·prompts_per_step) "
                     "or the groups launched per step, >= prompts_per_step")
  if not opts.enabled:
    return
  if april.launch_groups(config) < rl.prompts_per_step:
    raise ValueError(f"config.rl.partial.groups={opts.groups} is below prompts_per_step="
                     f"{rl.prompts_per_step}; expected 0 or >= prompts_per_step")
  if rl.tis_cap <= 0:
    raise ValueError("config.rl.partial.enabled=True with config.rl.tis_cap=0; expected "
                     "tis_cap > 0 (carried tokens are off-policy and are corrected by truncated "
                     "importance sampling, e.g. --config.rl.tis_cap=2.0)")
  clashes = {"rollout": (rl.rollout, "iid"), "max_group_size": (rl.max_group_size, 0),
             "dynamic_sampling": (rl.dynamic_sampling, False),
             "round_rules": (tuple(rl.round_rules), ())}
  for name, (value, want) in clashes.items():
    if value != want:
      raise ValueError(f"config.rl.partial.enabled=True with config.rl.{name}={value!r}; "
                       f"expected {name}={want!r}")
  if rl.advantage == "v05":
    raise ValueError("config.rl.partial.enabled=True with config.rl.advantage='v05'; expected "
                     "another estimator (V0.5 draws extra rounds of its own)")
  if config.data.source != "memory":
    raise ValueError(f"config.rl.partial.enabled=True with config.data.source="
                     f"{config.data.source!r}; expected 'memory'")
