"""Grouped (per-prompt) advantage statistics with the token broadcast in one pass (issue #6).

`grouped_advantage` dispatches (Pallas on GPU/TPU, XLA elsewhere); `reference` is the XLA
version with the same signature; `segment_stats` gives the raw per-segment statistics.
"""

from kernels.grouped_advantage.ops import IMPLS, grouped_advantage
from kernels.grouped_advantage.reference import MODES, reference, segment_stats
