"""TRL worker of `benchmarks.peers`: `GRPOTrainer.train` (PyTorch, CPU) on the shared model directory.

The policy and the reference both load from the directory by path (float32); generation is
transformers' `generate` inside the trainer. `loss_type='grpo'` is the sequence-mean-token-mean
aggregation, and `torch.set_num_threads` gets the driver's thread count. A callback times each
optimizer step; `_generate` (the rollout) and `_generate_and_score_completions` (rollout, reward,
reference log-probs) are wrapped for the phase times.
"""

from __future__ import annotations

import tempfile
import time

from benchmarks import _peer_common as common


def main():
  args = common.worker_args()
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(args.threads)
  torch.set_num_interop_threads(args.threads)
  import datasets  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  import trl  # pylint: disable=g-import-not-at-top

  b, g, t = args.batch, args.group, args.tokens
  torch.manual_seed(common.SEED)
  load_start = time.perf_counter()
  tokenizer = transformers.AutoTokenizer.from_pretrained(args.model_dir, padding_side="left")
  texts = common.prompts(b)
  plen = max(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in texts)
  config = trl.GRPOConfig(
      output_dir=args.workdir or tempfile.mkdtemp(prefix="peers_trl_"), use_cpu=True,
      report_to="none",
      save_strategy="no", logging_steps=1, max_steps=args.steps + 1, seed=common.SEED,
      per_device_train_batch_size=b * g, gradient_accumulation_steps=1, num_generations=g,
      max_completion_length=t, temperature=common.TEMPERATURE, top_p=1.0, top_k=0,
      beta=common.BETA, epsilon=common.EPSILON, num_iterations=1, loss_type="grpo",
      scale_rewards="group", learning_rate=common.LR, lr_scheduler_type="constant",
      warmup_steps=0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
      max_grad_norm=common.GRAD_CLIP, bf16=False, fp16=False, shuffle_dataset=False,
      dataloader_num_workers=0, model_init_kwargs={"dtype": torch.float32},
      disable_tqdm=True, log_completions=False)
  dataset = datasets.Dataset.from_dict({"prompt": texts})
  trainer = trl.GRPOTrainer(
      model=args.model_dir, args=config, train_dataset=dataset, processing_class=tokenizer,
      reward_funcs=lambda completions, **kw: common.reward_fn(completions))
  load_s = time.perf_counter() - load_start

  timer = common.Timer()
  gen_tokens = []
  trainer._generate = common.timed(timer, "gen_s", trainer._generate)  # pylint: disable=protected-access
  score = trainer._generate_and_score_completions  # pylint: disable=protected-access

  def counted_score(*a, **k):
    out = score(*a, **k)
    gen_tokens.append(int(out["completion_mask"].sum()))
    return out

  trainer._generate_and_score_completions = common.timed(timer, "rollout_ref_reward_s",  # pylint: disable=protected-access
                                                         counted_score)
  records = []

  class StepTimer(transformers.TrainerCallback):

    def on_step_begin(self, *unused_args, **unused_kwargs):
      self.start = time.perf_counter()

    def on_step_end(self, *unused_args, **unused_kwargs):
      rec = dict(timer.take(), step_s=time.perf_counter() - self.start,
                 gen_tokens=gen_tokens[-1] if gen_tokens else 0)
      records.append(rec)

  trainer.add_callback(StepTimer())
  trainer.train()
  if len(records) != args.steps + 1:
    raise RuntimeError(f"expected {args.steps + 1} GRPO steps, ran {len(records)}")
  res = common.summarize(records, b, g, t)
  common.emit(dict(res, system="trl", load_s=round(load_s, 3), prompt_len=plen,
                   torch_threads=torch.get_num_threads()))


if __name__ == "__main__":
  main()
