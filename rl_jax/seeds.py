"""Every random-stream tag of a run, in one table.

A tag separates one random stream from the others drawn from the same seed: jax keys are
`fold_in(key(seed), TAG, ...)` and numpy generators `default_rng([seed, TAG, ...])`. The numbers
never change (a changed number changes every run's data, samples and metrics, and a resumed run
would no longer reproduce the uninterrupted one), and no two streams of the same seed share a tag.
A new stream takes a new number from this table.

Which seed a stream starts from: `config.seed` unless its comment says otherwise (the SFT phase's
is `experiment.sft_seed(config)`, the prompt pool's `experiment.task_seed(config)`).
"""

# Phase streams (`PHASE_TAGS`, keyed by phase name): the phase's jax keys
# (`fold_in(exp.root_key(phase), tag)`), its host generators (`exp.host_rng(tag, step)`) and its
# grain sampler seed (`grain_source.sampler_seed(phase seed, tag)`).
SFT = 1          # The SFT phase (seed: sft_seed): its batch draws and grain sampler.
RL = 2           # RL phase: prompt draws and rollout keys of round 0 of each step.
SFT_MORE = 3     # The SFT phase run after RL for comparison ("sft_more"): its batch draws.
EVAL = 4         # Held-out evaluation during training and in evals/runner.py (sampling keys).
RL_ROUND = 5     # RL rollout rounds >= 1 of a step (dynamic sampling's refills: new prompts).
RL_EXTEND = 6    # RL extension rounds: extra rows of prompts already drawn (V0.5, probes).
RL_ALLOC = 7     # The allocators' host rng (Thompson draws, sampled selection), per step/round.

PHASE_TAGS = {"sft": SFT, "rl": RL, "sft_more": SFT_MORE, "eval": EVAL,
              "rl_round": RL_ROUND, "rl_extend": RL_EXTEND, "rl_alloc": RL_ALLOC}

# Streams outside the phases. Number 7 is also SFT_DEMOS's, on a different seed (sft_seed).
SFT_DEMOS = 7    # experiment.build: noise of the SFT demonstrations (seed: sft_seed).
PRM_DATA = 11    # tools/train_prm: the PRM's training prompts and their samples / labels.
PRM_JUDGE = 12   # tools/train_prm (judging): samples of held-out prompts judged by the PRMs.
V0_PRIOR = 15    # value/v0/online: V0's initial parameters and its per-step training episodes.
V0_CALIB = 16    # value/v0/run: the calibration samples of V0 at each evaluation.
V0_OFFLINE = 23  # tools/train_value: the episodes of offline V0 training.
ALLOC_POOL = 41  # `config.rl.prompt_pool`: the train prompts RL draws from (seed: task_seed).
ORACLE_MC = 43   # value/priors: the 'oracle' prior's Monte Carlo samples, per step and call.
