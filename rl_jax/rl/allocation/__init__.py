"""Budget allocation across prompts (docs/algorithms.md §6): one registry `ALLOCATORS`.

    from rl_jax.rl import allocation
    alloc = allocation.make("knapsack", min_obs=2)
    out = allocation.run(alloc, allocation.PromptStats(ids, attempts, successes),
                         allocation.Budget(total=128, num_prompts=32, min_n=2, max_n=16),
                         state=alloc.init_state(), rng=np.random.default_rng(0))
    out.counts  # int [C], Σ = 128

Entries: `uniform` (default), `knapsack`, `dars` (ET / HW), `vade`, `insight`, `xrpo`, `v0`.
Reconstructed [R] rules are marked in each module and switchable by option.
"""

from rl_jax.rl.allocation.base import (ALLOCATORS, Allocation, AllocationError, Allocator,
                                       Budget, PromptStats, fit_to_budget, make, run, spread)
from rl_jax.rl.allocation import bandits, dars, knapsack  # noqa: F401  (registers entries)

__all__ = ["ALLOCATORS", "Allocation", "AllocationError", "Allocator", "Budget", "PromptStats",
           "fit_to_budget", "make", "run", "spread"]
