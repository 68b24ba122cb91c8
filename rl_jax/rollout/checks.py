"""The rollout side of the one config check (docs/design.md §7), run before anything is built.

In: an experiment config whose single fields are already in range (`train.config_check.RULES`,
registry names by `check_names`). Out: None, or ValueError naming the field, the value and what
was expected, for combinations no run can use: rewards, the batch layout (dense / ragged), the
allocator and its budget, round rules, and every registry entry the config turns on (its
declared `check(config)`: the rollout engine, APRIL, the advantage). No method is named here:
what a method needs is declared by its registry entry (an engine's `Engine` fields, an
advantage's `Registry.declared` attributes).
`train.config_check.check` calls `check_config` (as a `ConfigError`).
"""

from __future__ import annotations

from rl_jax.rl import advantages
from rl_jax.rl import allocation as alloc_lib
from rl_jax.rollout import april, planner, rules  # noqa: F401  (april registers its engine)
from rl_jax.rollout.engines import ENGINES, ragged_modes, switched_on, tree_modes
from rl_jax.rollout.requests import batch_rows, is_ragged, max_group_size


def check_config(config) -> None:
  """Raises ValueError for inconsistent `config.rl` rollout settings (module docstring)."""
  rl = config.rl
  if "allocation" in rl:
    _check_allocation(config)
  if not rl.rewards:
    raise ValueError("config.rl.rewards is empty; expected reward names such as ('task_score',)")
  if rl.reward_weights and len(rl.reward_weights) != len(rl.rewards):
    raise ValueError(f"config.rl.reward_weights has {len(rl.reward_weights)} entries for "
                     f"{len(rl.rewards)} rewards {tuple(rl.rewards)}")
  if rl.overlong_buffer > config.sampling.max_new_tokens:
    raise ValueError(f"config.rl.overlong_buffer={rl.overlong_buffer}: expected an integer in "
                     f"[0, sampling.max_new_tokens={config.sampling.max_new_tokens}]")
  _run(ENGINES.get(rl.rollout).check, config)
  # Ragged batches carry a tree per slot across rounds (pool.assemble_tree); dense ones
  # only the one round's tree.
  tree_across_rounds = is_ragged(config) and rl.rollout in tree_modes()
  if ENGINES.get(rl.rollout).tree and rl.dynamic_sampling and not tree_across_rounds:
    raise ValueError(f"config.rl.dynamic_sampling is not supported with rollout="
                     f"{rl.rollout!r} (groups carry a tree) in dense groups; use rollout in "
                     f"{_untreed()}, or ragged groups (config.rl.max_group_size > 0)")
  _check_layout(config)
  for name in switched_on(config):  # Engines a switch turns on beside the mode (APRIL).
    _run(ENGINES.get(name).check, config)
  rules.active_rules(config)
  _run(advantages.ADVANTAGES.declared(rl.advantage, "check"), config)


def _run(check, config) -> None:
  """Runs an entry's declared `check(config)` (None: the entry declared none)."""
  if check is not None:
    check(config)


def _untreed() -> tuple[str, ...]:
  """Rollout modes that serve ragged groups and carry no tree."""
  return tuple(n for n in ragged_modes() if not ENGINES.get(n).tree)


def _extra_rounds(config) -> bool:
  """The advantage draws extra rounds of its own (declared by its registry entry)."""
  return advantages.declares(config.rl.advantage, "extra_rounds")


def _check_layout(config) -> None:
  """Raises ValueError for inconsistent planner settings (`config.rl.rows`, `max_group_size`,
  `allocator`)."""
  rl = config.rl
  if not is_ragged(config):
    if rl.rows:
      raise ValueError(f"config.rl.rows={rl.rows} needs the ragged layout; expected "
                       "config.rl.rows=0 or config.rl.max_group_size > 0")
    if not alloc_lib.ALLOCATORS.get(rl.allocator).equal_counts:
      raise ValueError(f"config.rl.allocator={rl.allocator!r} gives prompts different row counts; "
                       "expected config.rl.max_group_size (G_max) > 0 (the ragged layout)")
    return
  if rl.rollout not in ragged_modes():
    raise ValueError(f"config.rl.rollout={rl.rollout!r} with the ragged layout "
                     f"(config.rl.max_group_size > 0) is not supported; expected rollout in "
                     f"{ragged_modes()}")
  if rl.rollout in tree_modes() and (_extra_rounds(config) or (
      "allocation" in rl and rl.allocation.probe)):
    raise ValueError(f"config.rl.rollout={rl.rollout!r} with extension rounds (advantage="
                     f"{rl.advantage!r} or config.rl.allocation.probe > 0) is not supported: "
                     "extra rows of a prompt come from the iid engine and have no place in its "
                     f"tree; use rollout in {_untreed()} or probe=0")
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
  try:
    allocator = planner.allocator_from_config(config)
  except (alloc_lib.AllocationError, TypeError) as e:
    raise ValueError(f"config.rl.allocation.{rl.allocator}: {e}") from e
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
  if rl.allocator_prior and not allocator.reads_prior:
    readers = [n for n in alloc_lib.ALLOCATORS.names() if alloc_lib.ALLOCATORS.get(n).reads_prior]
    raise ValueError(f"config.rl.allocator_prior={rl.allocator_prior!r}: allocator "
                     f"{rl.allocator!r} does not read a prior; expected allocator in {readers} "
                     "or allocator_prior=''")
  if allocator.equal_counts:
    return
  if rl.rollout not in ragged_modes():
    raise ValueError(f"config.rl.allocator={rl.allocator!r} needs ragged groups, which "
                     f"rollout={rl.rollout!r} does not make; use rollout in {ragged_modes()} or "
                     "allocator='uniform'")
  if not rl.max_group_size:
    raise ValueError(f"config.rl.allocator={rl.allocator!r} gives prompts different row counts: "
                     "set config.rl.max_group_size (G_max) > 0 for the ragged layout")
  if allocator.needs_prior and not rl.allocator_prior:
    raise ValueError(f"config.rl.allocator={rl.allocator!r} needs predictions p_hat: set "
                     "config.rl.allocator_prior (e.g. 'history', or 'v0' once V0 is registered)")
  if a.probe and (rl.dynamic_sampling or _extra_rounds(config)):
    clash = "dynamic_sampling=True" if rl.dynamic_sampling else f"advantage={rl.advantage!r}"
    raise ValueError(f"config.rl.allocation.probe is not supported together with {clash} "
                     "(each asks for its own extra rounds); use probe=0")
  rows = batch_rows(config)
  if rl.dynamic_sampling and rows < rl.prompts_per_step * max_group_size(config):
    raise ValueError(f"config.rl.dynamic_sampling with allocator={rl.allocator!r} keeps B groups "
                     f"from several rounds, up to B x max_group_size = "
                     f"{rl.prompts_per_step * max_group_size(config)} rows; config.rl.rows={rows} "
                     "is smaller")
