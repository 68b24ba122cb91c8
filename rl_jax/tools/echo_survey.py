"""ECHO's statistics at a ladder task's decision tokens (`experiments/echo_survey.py` is thin flags
over `survey`): where must ECHO's thresholds sit for its branch rule to fire at the choices that
decide a completion, and how often would its prune rule cut completions that end right?

A policy trained on the ladder's flawed-carry demonstrations (`data.ladder.flawed_scratchpad`)
chooses where it writes a step's result; the rest of a completion copies numbers. Each token of a
completion is one of three kinds, read in the lines the policy wrote (its own running totals):
*carry*, the token holding a carrying step's decision character (`ladder.carries`; the first
character where the correct result `a+b` and the dropped-carry result `ladder.dropped_carry`
differ; where the two differ in sign the choice can fall on the token before, when the tokenizer
merges '=-'); *result*, the other tokens of a step line after its '='; *copy*, every other token
(operands, operators, newlines, the final answer line).

For completions sampled from the run's policy at its rollout temperature on dev problems, each
position's next-token logits give ECHO's per-step statistics (`sampling.echo_rules.step_stats`:
H_t of the top-k renormalised distribution, C_t) and their windows (C^G_t, ΔH_t); the survey
reports their quantiles for each kind of token, how often the configured branch rule
(`config.rl.echo`) fires there (the rule's own test, `echo_rules.wants_branch`, with a width
above 1), the kind of token where each row's rule first fires (a row branches once), and the share
of completions the configured prune rule (`echo_rules.prune_update`) cuts, whether or not
`prune` is on, split by whether they end right.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np

from rl_jax import models, seeds
from rl_jax.data import ladder
from rl_jax.sampling import echo_rules
from rl_jax.tools.train_prm import load_run, spread_ids
from rl_jax.value.prm import data as prm_data

_STEP = re.compile(r"^(-?\d+)([+-])(\d+)=(-?\d+)$")
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


COPY, RESULT, CARRY = 0, 1, 2
KINDS = ("copy", "result", "carry")


def char_kinds(text: str) -> np.ndarray:
  """[len(text)] each character's kind: CARRY for each carrying step's decision character,
  RESULT for the other characters after a step line's '=', COPY for the rest."""
  kinds = np.full(len(text), COPY, np.int8)
  start = 0
  for line in text.split("\n"):
    m = _STEP.match(line.strip())
    if m:
      eq = start + line.index("=")
      kinds[eq + 1:start + len(line)] = RESULT
      a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
      b = b if op == "+" else -b
      if ladder.carries(a, b):
        right, dropped = str(a + b), str(ladder.dropped_carry(a, b))
        i = next((j for j, (x, y) in enumerate(zip(right, dropped)) if x != y),
                 min(len(right), len(dropped)))
        if eq + 1 + i < start + len(line):
          kinds[eq + 1 + i] = CARRY
    start += len(line) + 1
  return kinds


def token_kinds(tokenizer, tokens: np.ndarray, n: int, text: str) -> np.ndarray:
  """[n] each token's kind: the largest kind among the characters it decodes to (token i covers
  the characters between the decoded lengths of tokens[:i] and tokens[:i + 1])."""
  kinds = char_kinds(text)
  ends = [len(tokenizer.decode([int(x) for x in tokens[:i + 1]])) for i in range(n)]
  out = np.zeros(n, np.int8)
  prev = 0
  for i, e in enumerate(ends):
    if e > prev:
      out[i] = kinds[prev:min(e, len(kinds))].max(initial=COPY)
    prev = max(prev, e)
  return out


@functools.partial(jax.jit, static_argnames="cfg")
def _logits(params, prompt, prompt_mask, tokens, mask, cfg):
  logits = models.forward(cfg, params, jnp.concatenate([prompt, tokens], 1),
                          jnp.concatenate([prompt_mask, mask], 1))
  return logits[:, prompt.shape[1] - 1:-1].astype(jnp.float32)


def statistics(logits: np.ndarray, mask: np.ndarray, o: echo_rules.EchoOptions) -> dict:
  """Per row and position [R, T]: H, C, C^G, ΔH and the branch test (the rule fires and its width
  is > 1), and per row whether the prune test fires inside the mask (run along each row as the
  sampler would), from completion logits [R, T, V]."""
  r, t, v = logits.shape
  h, c, _ = echo_rules.step_stats(jnp.asarray(logits.reshape(r * t, v)), o)
  h, c = np.asarray(h).reshape(r, t), np.asarray(c).reshape(r, t)
  group, delta, branch = np.zeros((r, t)), np.zeros((r, t)), np.zeros((r, t), bool)
  pruned = np.zeros(r, bool)
  state = echo_rules.PruneState.init(r)
  for s in range(t):
    g, tail, d = echo_rules.window_stats(jnp.asarray(h), jnp.asarray(c), jnp.asarray(s), o)
    group[:, s], delta[:, s] = np.asarray(g), np.asarray(d)
    h_s = jnp.asarray(h[:, s])
    branch[:, s] = np.asarray(echo_rules.wants_branch(h_s, g, d, s, o)
                              & (echo_rules.branch_width(h_s, g, o) > 1))
    state, cut = echo_rules.prune_update(state, g, tail, d, o)
    pruned |= np.asarray(cut) & mask[:, s]
  return dict(entropy=h, confidence=c, group_confidence=group, delta_entropy=delta,
              branch=branch & mask, pruned=pruned)


def _quantiles(x: np.ndarray) -> dict:
  if not len(x):
    return {}
  return {f"q{int(q * 100)}": float(np.quantile(x, q)) for q in QUANTILES}


def survey(workdir: str, *, phase: str = "sft", num_prompts: int = 300, samples: int = 4,
           seed: int = 0, batch_size: int = 64, overrides: dict | None = None) -> dict:
  """The statistics above for `samples` completions of `num_prompts` dev problems (spread over
  the strata) from the run's `phase` policy; `overrides` replace `config.rl.echo` fields."""
  fields = sorted(f.name for f in dataclasses.fields(echo_rules.EchoOptions))
  unknown = sorted(set(overrides or {}) - set(fields))
  if unknown:
    raise ValueError(f"echo overrides {unknown} are not fields of config.rl.echo; expected some "
                     f"of {fields}")
  exp, policy = load_run(workdir, phase)
  if exp.config.task.name != "ladder":
    raise ValueError(f"echo_survey reads the ladder's carrying steps; the run's task is "
                     f"{exp.config.task.name!r}")
  o = echo_rules.EchoOptions(**dict(exp.config.rl.echo.to_dict(), **(overrides or {})))
  key = jax.random.fold_in(jax.random.key(seed), seeds.PRM_JUDGE)
  comps = prm_data.sample(exp, policy, "heldout", spread_ids(len(exp.task.heldout), num_prompts),
                          samples, key)
  stats = {k: [] for k in ("entropy", "confidence", "group_confidence", "delta_entropy",
                           "branch")}
  pruned = []
  for start in range(0, len(comps.tokens), batch_size):
    sl = slice(start, start + batch_size)
    logits = np.asarray(_logits(policy, comps.prompt[sl], comps.prompt_mask[sl],
                                comps.tokens[sl], comps.mask[sl], exp.model_cfg))
    st = statistics(logits, comps.mask[sl], o)
    for k in stats:
      stats[k].append(st[k])
    pruned.append(st["pruned"])
  stats = {k: np.concatenate(v) for k, v in stats.items()}
  pruned = np.concatenate(pruned)
  kind = np.full(comps.mask.shape, -1, np.int8)
  for i, text in enumerate(comps.texts):
    n = int(comps.mask[i].sum())
    kind[i, :n] = token_kinds(exp.tokenizer, comps.tokens[i], n, text)
  right = comps.rewards > 0
  out = {"workdir": workdir, "phase": phase, "completions": int(len(comps.tokens)),
         "accuracy": float(right.mean()), "echo": dataclasses.asdict(o)}
  for k, name in enumerate(KINDS):
    sel = kind == k
    out[name] = {s: _quantiles(stats[s][sel]) for s in ("entropy", "confidence",
                                                        "group_confidence", "delta_entropy")}
    out[name].update(tokens=int(sel.sum()), branch_rate=float(stats["branch"][sel].mean())
                     if sel.any() else None)
  fired = stats["branch"].any(1)
  first = kind[np.flatnonzero(fired), np.argmax(stats["branch"], axis=1)[fired]]
  out["rows_branching"] = float(fired.mean())
  out["first_branch_kind"] = {name: float(np.mean(first == k)) if fired.any() else None
                              for k, name in enumerate(KINDS)}
  out["pruned_right"] = float(pruned[right].mean()) if right.any() else None
  out["pruned_wrong"] = float(pruned[~right].mean()) if (~right).any() else None
  return out
