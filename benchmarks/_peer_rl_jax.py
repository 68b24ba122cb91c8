"""rl_jax worker of `benchmarks.peers`: GRPO steps the way `train.phases.rl` runs them.

`sampling.generate` (jitted, one `lax.scan`), host-side decoding and reward, then `steps.rl_step`
jitted with the train state donated; the reference is a separate copy of the initial weights.
"""

from __future__ import annotations

import functools
import time

from benchmarks import _peer_common as common


def main():
  args = common.worker_args()
  import jax  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from rl_jax import compile_cache, models, sampling  # pylint: disable=g-import-not-at-top
  from rl_jax.tokenizers import HFTokenizer  # pylint: disable=g-import-not-at-top
  from rl_jax.train import steps  # pylint: disable=g-import-not-at-top
  from rl_jax.train_state import TrainState, make_optimizer  # pylint: disable=g-import-not-at-top
  from rl_jax.types import Rollout  # pylint: disable=g-import-not-at-top

  # Before anything compiles, as `train.loop.run` does ('' = off; the config's defaults).
  cache_dir = compile_cache.configure(args.compile_cache_dir)
  b, g, t = args.batch, args.group, args.tokens
  load_start = time.perf_counter()
  cfg, params = models.load_hf(args.model_dir, dtype="float32", scan_layers=args.scan_layers)
  tok = HFTokenizer(args.model_dir)
  load_s = time.perf_counter() - load_start
  encoded = [tok.encode(p) for p in common.prompts(b)]
  plen = max(len(e) for e in encoded)
  prompt = np.full((b, plen), tok.pad_id, np.int32)
  pmask = np.zeros((b, plen), bool)
  for i, e in enumerate(encoded):  # Left padding.
    prompt[i, plen - len(e):] = e
    pmask[i, plen - len(e):] = True
  # The sampler prefills each prompt once and decodes its G samples from copies of its cache;
  # the update sees the prompts repeated G times (rows grouped contiguously).
  rep_prompt, rep_pmask = np.repeat(prompt, g, 0), np.repeat(pmask, g, 0)

  optim = ml_collections.ConfigDict(dict(lr=common.LR, warmup_steps=0, schedule="constant",
                                         end_lr_frac=1.0, weight_decay=0.0, b1=0.9, b2=0.999,
                                         eps=1e-8, grad_clip=common.GRAD_CLIP))
  tx = make_optimizer(optim, total_steps=args.steps + 1)
  # jit copies: the state's buffers are donated every step, the reference keeps its own.
  state = jax.jit(functools.partial(TrainState.create, tx=tx))(params)
  ref_params = params
  hyper = steps.RLHyper(group_size=g, advantage="grpo", loss="ppo", clip_low=common.EPSILON,
                        clip_high=common.EPSILON, kl_coef=common.BETA, kl_kind="k3",
                        aggregation="seq-mean-token-mean", temperature=common.TEMPERATURE,
                        num_minibatches=args.num_minibatches, shared_prompts=True)
  step_jit = jax.jit(functools.partial(steps.rl_step, model_cfg=cfg, hyper=hyper),
                     donate_argnums=0)
  strategy = sampling.Sampling(temperature=common.TEMPERATURE)
  gen = functools.partial(sampling.generate, cfg=cfg, strategy=strategy, max_new_tokens=t,
                          eos_id=tok.eos_id, pad_id=tok.pad_id, num_samples=g)
  root = jax.random.key(common.SEED)
  group_ids = np.repeat(np.arange(b), g).astype(np.int32)

  records = []
  first_step = compile_cache.CompileStats()  # Where the first step's start-up time goes.
  for step in range(args.steps + 1):
    (first_step.start if step == 0 else first_step.stop)()
    t0 = time.perf_counter()
    out = gen(state.params, prompt, pmask, jax.random.fold_in(root, step))
    tokens, mask = np.asarray(out.tokens), np.asarray(out.mask)  # Waits for the sampler.
    t1 = time.perf_counter()
    texts = [tok.decode(row[m]) for row, m in zip(tokens, mask)]
    rewards = np.asarray(common.reward_fn(texts), np.float32)
    t2 = time.perf_counter()
    rollout = Rollout(prompt_tokens=rep_prompt, prompt_mask=rep_pmask, tokens=out.tokens,
                      mask=out.mask,
                      logp=out.logp, group=group_ids, valid=np.ones(b * g, bool))
    state, metrics = step_jit(state, ref_params, rollout, rewards)
    metrics = jax.device_get(metrics)
    t3 = time.perf_counter()
    records.append(dict(step_s=t3 - t0, gen_s=t1 - t0, reward_s=t2 - t1,
                        update_with_ref_s=t3 - t2, gen_tokens=int(mask.sum()),
                        loss=float(metrics["loss"]), reward=float(rewards.mean())))
  first_step.stop()
  res = common.summarize(records, b, g, t)
  common.emit(dict(res, system="rl_jax", load_s=round(load_s, 3), prompt_len=plen,
                   params=models.num_params(params), backend=jax.default_backend(),
                   num_minibatches=args.num_minibatches, compile_cache_dir=cache_dir,
                   scan_layers=cfg.scan_layers,
                   first_step_compile=first_step.as_dict(),
                   rewards=[round(r["reward"], 4) for r in records],
                   losses=[round(r["loss"], 5) for r in records]))


if __name__ == "__main__":
  main()
