"""google-tunix worker of `benchmarks.peers`: `GRPOLearner.train` on the shared model directory.

Models load with tunix's own safetensors loaders (`qwen3` for the tiny model, `llama3` for
SmolLM2), float32, on a 1x1 mesh with Auto axis types; the reference is a second copy. Rollouts
use the 'vanilla' engine with a KV cache of exactly prompt + T slots (its default is 1024) and a
step-dependent seed (its default draws every step from PRNGKey(0)). Timing wraps the learner's
`_run_global_step` (one GRPO step) and the cluster's `generate`, `get_ref_per_token_logps` and
`update_actor`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time

from benchmarks import _peer_common as common


def _model_config(model_dir: str):
  """tunix ModelConfig (and params module) for a Qwen3 or Llama config.json."""
  with open(os.path.join(model_dir, "config.json")) as f:
    hf = json.load(f)
  common_fields = dict(num_layers=hf["num_hidden_layers"], vocab_size=hf["vocab_size"],
                       embed_dim=hf["hidden_size"], hidden_dim=hf["intermediate_size"],
                       num_heads=hf["num_attention_heads"],
                       head_dim=hf.get("head_dim") or hf["hidden_size"] // hf[
                           "num_attention_heads"],
                       num_kv_heads=hf["num_key_value_heads"],
                       rope_theta=int(hf.get("rope_theta") or hf["rope_parameters"]["rope_theta"]),
                       norm_eps=hf["rms_norm_eps"])
  tied = bool(hf.get("tie_word_embeddings", False))
  if hf["model_type"] == "qwen3":
    from tunix.models.qwen3 import model as qwen3_model  # pylint: disable=g-import-not-at-top
    from tunix.models.qwen3 import params as qwen3_params  # pylint: disable=g-import-not-at-top
    return qwen3_model.ModelConfig(use_tied_embedding=tied, **common_fields), qwen3_params
  if hf["model_type"] == "llama":
    from tunix.models.llama3 import model as llama_model  # pylint: disable=g-import-not-at-top
    from tunix.models.llama3 import params as llama_params  # pylint: disable=g-import-not-at-top
    return llama_model.ModelConfig(weight_tying=tied, **common_fields), llama_params
  raise ValueError(f"no tunix loader for model_type {hf['model_type']!r}")


def main():
  args = common.worker_args()
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from tunix.generate import tokenizer_adapter  # pylint: disable=g-import-not-at-top
  from tunix.rl import rl_cluster as rl_cluster_lib  # pylint: disable=g-import-not-at-top
  from tunix.rl.grpo import grpo_learner  # pylint: disable=g-import-not-at-top
  from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top

  b, g, t = args.batch, args.group, args.tokens
  mesh = jax.make_mesh((1, 1), ("fsdp", "tp"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  load_start = time.perf_counter()
  cfg, params_lib = _model_config(args.model_dir)
  with jax.set_mesh(mesh):
    actor = params_lib.create_model_from_safe_tensors(args.model_dir, cfg, mesh,
                                                      dtype=jnp.float32)
    reference = params_lib.create_model_from_safe_tensors(args.model_dir, cfg, mesh,
                                                          dtype=jnp.float32)
  tokenizer = transformers.AutoTokenizer.from_pretrained(args.model_dir)
  load_s = time.perf_counter() - load_start
  texts = common.prompts(b)
  # tunix's sampler prepends BOS when the tokenizer has one (SmolLM2: one token more than the
  # other systems' prompts); its prompt width must cover that or it pads to a power of two.
  adapter = tokenizer_adapter.TokenizerAdapter(tokenizer)
  bos = [adapter.bos_id()] if adapter.bos_id() else []
  plen = max(len(adapter.dedup_bos_ids(bos + list(adapter.encode(p)))) for p in texts)

  workdir = args.workdir or tempfile.mkdtemp(prefix="peers_tunix_")
  optimizer = optax.chain(
      optax.clip_by_global_norm(common.GRAD_CLIP),
      optax.adamw(common.LR, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0))
  training = rl_cluster_lib.RLTrainingConfig(
      actor_optimizer=optimizer, eval_every_n_steps=10**9, max_steps=args.steps + 1,
      mini_batch_size=b, train_micro_batch_size=b, rollout_micro_batch_size=b,
      compute_logps_micro_batch_size=b, checkpoint_root_directory=None,
      metrics_logging_options=None, pbar_description=None)
  rollout_cfg = base_rollout.RolloutConfig(
      max_tokens_to_generate=t, temperature=common.TEMPERATURE, top_p=1.0, top_k=None,
      max_prompt_length=plen, kv_cache_size=plen + t + 1, data_type=jnp.float32,
      seed=jax.random.PRNGKey(common.SEED))
  cluster_cfg = rl_cluster_lib.ClusterConfig(
      role_to_mesh={rl_cluster_lib.Role.ACTOR: mesh, rl_cluster_lib.Role.REFERENCE: mesh,
                    rl_cluster_lib.Role.ROLLOUT: mesh},
      rollout_engine="vanilla", offload_to_cpu=False, training_config=training,
      rollout_config=rollout_cfg)
  cluster = rl_cluster_lib.RLCluster(actor=actor, reference=reference, tokenizer=tokenizer,
                                     cluster_config=cluster_cfg)
  algo = grpo_learner.GRPOConfig(num_generations=g, num_iterations=1, beta=common.BETA,
                                 epsilon=common.EPSILON, kl_loss_mode="low_var_kl",
                                 loss_agg_mode="sequence-mean-token-mean")
  learner = grpo_learner.GRPOLearner(
      rl_cluster=cluster, algo_config=algo,
      reward_fns=lambda prompts, completions, **kw: common.reward_fn(completions))

  timer = common.Timer()
  gen_tokens = []
  rollout = cluster.rollout
  calls = {"n": 0}
  original_generate = rollout.generate

  def seeded_generate(prompts, rollout_config, **kwargs):
    # A fresh key per call: the engine reuses rollout_config.seed on every call otherwise.
    rollout_config = dataclasses.replace(
        rollout_config, seed=jax.random.PRNGKey(common.SEED * 100003 + calls["n"]))
    calls["n"] += 1
    out = original_generate(prompts, rollout_config, **kwargs)
    # Tokens stop before EOS: count EOS as generated when a row ended early.
    gen_tokens.append(sum(min(len(x) + 1, t) for x in out.tokens))
    return out

  rollout.generate = seeded_generate
  cluster.generate = common.timed(timer, "gen_s", cluster.generate)
  ref_fn = cluster.get_ref_per_token_logps
  cluster.get_ref_per_token_logps = common.timed(
      timer, "ref_s", lambda *a, **k: jax.block_until_ready(ref_fn(*a, **k)))
  cluster.update_actor = common.timed(timer, "update_s", cluster.update_actor)
  records = []
  run_global_step = learner._run_global_step  # pylint: disable=protected-access

  def timed_global_step(*a, **k):
    start = time.perf_counter()
    out = run_global_step(*a, **k)
    jax.block_until_ready(jax.tree.leaves(nnx.state(cluster.actor_trainer.model)))
    rec = dict(timer.take(), step_s=time.perf_counter() - start,
               gen_tokens=gen_tokens[-1] if gen_tokens else 0)
    records.append(rec)
    return out

  learner._run_global_step = timed_global_step  # pylint: disable=protected-access
  batch = {"prompts": np.array(texts)}
  learner.train([batch] * (args.steps + 1))
  if len(records) != args.steps + 1:
    raise RuntimeError(f"expected {args.steps + 1} GRPO steps, ran {len(records)}")
  res = common.summarize(records, b, g, t)
  common.emit(dict(res, system="tunix", load_s=round(load_s, 3), prompt_len=plen,
                   rollout_calls=calls["n"], backend=jax.default_backend()))


if __name__ == "__main__":
  main()
