"""Fused unembedding + log-softmax (issue #6): per-token log-probs without [N, V] logits.

`token_logprobs` is the entry point (custom_vjp; dispatches XLA / Pallas GPU / Pallas TPU);
`reference` and `materialized` are the plain-JAX references it is tested against.
"""

from kernels.logprob.block_sizes import BlockSizes, TUNED, tuned
from kernels.logprob.ops import IMPLS, token_logprobs
from kernels.logprob.reference import materialized, reference
