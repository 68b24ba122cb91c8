"""Rewards: verifiers registered by name (see `verifiers`)."""

from __future__ import annotations

from rl_jax.rewards.verifiers import (REWARDS, exact_match, is_integer, score_batch,
                                      score_components)

__all__ = ["REWARDS", "exact_match", "is_integer", "score_batch", "score_components"]
