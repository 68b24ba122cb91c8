"""Real model sizes at a realistic RL shape, for compiling every phase for a TPU slice.

Command (any machine with libtpu, `pip install -e '.[tpu]'`; no TPU, no weights):
  python -m experiments.aot --config=experiments/configs/scale.py:qwen3-1.7b --topology=v5e:2x4
Variants: the model presets of public checkpoints `qwen3-0.6b`, `qwen3-1.7b`, `llama3-1b`
(Llama 3.2 1B), `llama3-3b` (Llama 3.2 3B), `qwen3-8b` (shapes from their config.json,
`rl_jax/models/config.py`); `tiny` is a one-layer model at a small shape (the tests).

Shape of one RL step: 64 prompts x 8 samples (GRPO) x 1,024 new tokens after 256 prompt tokens,
the gradient accumulated over 16 micro-batches of 32 rows (4 groups), a k3 KL to the reference
policy (so `rl_step` runs the reference pass too); SFT batches of 64 sequences. Matmuls in
bfloat16, parameters and AdamW state in float32. The mesh is fully sharded (FSDP over every
device); `--config.mesh.shape='(2,4,1)'` and other overrides work as in `experiments.run`.

To train such a model for real, point `model.path` at its Hugging Face checkpoint directory and
set `tokenizer.kind='hf'` (as `smollm2.py` does); this file gives the architecture only.
docs/research/tpu-compile.md has the results of `experiments.aot` for these variants.
"""

from __future__ import annotations

from experiments.configs import common
from rl_jax import models

MODELS = ("qwen3-0.6b", "qwen3-1.7b", "llama3-1b", "llama3-3b", "qwen3-8b")


def get_config(arg: str = "qwen3-1.7b"):
  c = common.base()
  if arg == "tiny":
    c.model.update(d_model=64, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=128)
    c.rl.update(prompts_per_step=4, group_size=4, num_minibatches=2, kl_coef=0.02)
    c.sampling.max_new_tokens = 8
    c.sft.batch_size = 8
    c.aot.prompt_len = 16
  elif arg in MODELS:
    c.model.update(dtype="bfloat16", param_dtype="float32", **models.PRESETS[arg])
    c.rl.update(prompts_per_step=64, group_size=8, num_minibatches=16, kl_coef=0.02)
    c.sampling.max_new_tokens = 1024
    c.sft.batch_size = 64
    c.aot.prompt_len = 256
  else:
    raise ValueError(f"unknown variant {arg!r} of scale.py; expected one of "
                     f"{list(MODELS) + ['tiny']}")
  c.mesh.shape = (1, -1, 1)
  c.lock()
  return c
