"""Advantage estimators: `advantages.get(name)` / `advantages.ADVANTAGES` (base), with every
estimator module imported so that it registers (group, tree, v05)."""

from rl_jax.rl.advantages import group, tree, v05  # noqa: F401  (register their estimators)
from rl_jax.rl.advantages.base import ADVANTAGES, TRAITS, declares, get  # noqa: F401
