"""Rollout sampling: strategies and the jitted decode loop."""

from rl_jax.sampling.decode import Samples, generate
from rl_jax.sampling.strategies import GREEDY, Sampling
