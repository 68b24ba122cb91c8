"""TRL worker of `benchmarks.learn_parity`: TRL's `GRPOTrainer` on rl_jax's run, step for step.

    python -m benchmarks._parity_trl --config=experiments/configs/smollm2_learns.py \
        --seed=0 --steps=30 --out=trl_seed0.jsonl [--device=cuda] [--model_dir=DIR]

Everything TRL sees comes from the rl_jax config: the checkpoint directory (float32), the chat
template (conversational prompts; TRL applies the tokenizer's template, as rl_jax does), the
train problems in the order rl_jax's RL phase draws them (`planner.uniform_prompt_order`: step s
trains on the same B prompts in both systems), the reward (`task.score` on the completion text),
G, B, T, temperature, learning rate, AdamW betas, gradient clipping, KL coefficient and clip range
(and rematerialization: TRL's gradient checkpointing follows `config.model.remat`).
Writes one JSON line per optimizer step: `step`, `reward_mean` (TRL's logged mean reward of the
step's B x G completions), `step_seconds`, `completion_len`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--config", required=True, help="rl_jax config file (e.g. smollm2_learns.py)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--steps", type=int, required=True)
  p.add_argument("--out", required=True, help="JSON lines, one per step")
  p.add_argument("--model_dir", default="", help="overrides config.model.path")
  p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
  p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
  return p.parse_args(argv)


def rl_jax_run(config_path: str, seed: int, model_dir: str):
  """The rl_jax config (seed and model set) and its experiment (task, tokenizer, prompts), built
  on JAX's CPU backend so that the accelerator stays TRL's."""
  os.environ["JAX_PLATFORMS"] = "cpu"
  from benchmarks.learn_parity import load_config  # pylint: disable=g-import-not-at-top
  from rl_jax import experiment  # pylint: disable=g-import-not-at-top
  config = load_config(config_path)
  with config.unlocked():
    config.seed = seed
    if model_dir:
      config.model.path = model_dir
  return config, experiment.build(config, tempfile.mkdtemp(prefix="parity_trl_"))


def main(argv=None):
  args = parse_args(argv)
  config, exp = rl_jax_run(args.config, args.seed, args.model_dir)
  from rl_jax.rollout import planner  # pylint: disable=g-import-not-at-top
  order = planner.uniform_prompt_order(exp, args.steps)
  rl, opt = config.rl, config.rl.optim
  if rl.loss != "ppo" or rl.aggregation != "token-mean" or rl.num_iterations != 1:
    raise ValueError("learn_parity compares rl.loss='ppo', aggregation 'token-mean', one "
                     f"iteration; the config has {rl.loss!r}, {rl.aggregation!r}, "
                     f"{rl.num_iterations}")
  if opt.schedule != "constant" or opt.warmup_steps or opt.weight_decay:
    raise ValueError("learn_parity compares a constant learning rate without warmup or weight "
                     "decay (config.rl.optim)")

  import torch  # pylint: disable=g-import-not-at-top
  if args.threads:
    torch.set_num_threads(args.threads)
  import datasets  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  import trl  # pylint: disable=g-import-not-at-top

  train = exp.task.train
  rows = {"prompt": [], "idx": []}
  for idx in order:
    for i in idx:
      rows["prompt"].append([{"role": "user", "content": train[int(i)].prompt}])
      rows["idx"].append(int(i))

  def reward(completions, idx, **unused):
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [exp.task.score(t, train[i]) for t, i in zip(texts, idx)]

  g, b = rl.group_size, rl.prompts_per_step
  tokenizer = transformers.AutoTokenizer.from_pretrained(config.model.path, padding_side="left")
  grpo = trl.GRPOConfig(
      output_dir=tempfile.mkdtemp(prefix="parity_trl_out_"), use_cpu=args.device == "cpu",
      report_to="none", save_strategy="no", logging_steps=1, max_steps=args.steps,
      seed=args.seed, per_device_train_batch_size=b * g, gradient_accumulation_steps=1,
      num_generations=g, max_completion_length=config.sampling.max_new_tokens,
      temperature=config.sampling.temperature, top_p=1.0, top_k=0, beta=rl.kl_coef,
      epsilon=rl.clip_low, epsilon_high=rl.clip_high, num_iterations=1, loss_type="dapo",
      scale_rewards="group", learning_rate=opt.lr, lr_scheduler_type="constant",
      warmup_steps=0, weight_decay=0.0, adam_beta1=opt.b1, adam_beta2=opt.b2,
      adam_epsilon=opt.eps, max_grad_norm=opt.grad_clip, bf16=False, fp16=False,
      shuffle_dataset=False, dataloader_num_workers=0,
      # TRL turns gradient checkpointing on by default; rl_jax's config.model.remat is 'none'.
      gradient_checkpointing=config.model.remat != "none",
      model_init_kwargs={"dtype": torch.float32}, disable_tqdm=True, log_completions=False)
  trainer = trl.GRPOTrainer(model=config.model.path, args=grpo,
                            train_dataset=datasets.Dataset.from_dict(rows),
                            processing_class=tokenizer, reward_funcs=reward)
  times = []

  class StepTimer(transformers.TrainerCallback):

    def on_step_begin(self, *unused_args, **unused_kwargs):
      self.start = time.perf_counter()

    def on_step_end(self, *unused_args, **unused_kwargs):
      if args.device == "cuda":
        torch.cuda.synchronize()
      times.append(time.perf_counter() - self.start)

  trainer.add_callback(StepTimer())
  trainer.train()
  logs = [h for h in trainer.state.log_history if "reward" in h]
  if len(logs) != args.steps or len(times) != args.steps:
    raise RuntimeError(f"expected {args.steps} logged TRL steps, got {len(logs)} / {len(times)}")
  with open(args.out, "w") as f:
    for s, (h, t) in enumerate(zip(logs, times)):
      f.write(json.dumps({"step": s + 1, "reward_mean": float(h["reward"]),
                          "step_seconds": t,
                          "completion_len": float(h.get("completions/mean_length", 0.0))})
              + "\n")


if __name__ == "__main__":
  main()
