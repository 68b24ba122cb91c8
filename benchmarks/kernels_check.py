"""The Pallas kernels on a real accelerator against their references: one JSON line.

    python -m benchmarks.kernels_check          # on a GPU (Triton) or TPU (Mosaic) machine

The suite tests the kernels in interpret mode on CPU, which masks partial blocks that the real
compilers do not (a grouped-advantage bug that only a GPU showed: docs/research/logprob-gpu.md). Per
case: the fused log-prob (impl='pallas' and 'auto') against `materialized` (log-probs, entropy
and both gradients, largest relative error) and the grouped advantage (impl='pallas') against
its XLA path (largest absolute error). `all_ok` is false when any error is above its tolerance.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

from kernels import logprob
from kernels.grouped_advantage import ops as ga

LOGPROB_CASES = [(200, 64, 1000, False, {}),
                 (256, 96, 5003, True, {"soft_cap": 30.0, "temperature": 0.7}),
                 (64, 128, 49152, True, {})]
GA_CASES = [(64, 8, 16, "mean_std"), (512, 8, 256, "mean_std"), (1000, 4, 100, "mean")]


def _value_and_grads(fn, h, w, t, g, ge, **kw):
  def loss(h, w):
    lp, ent = fn(h, w, t, with_entropy=True, **kw)
    return jnp.sum(g * lp) + jnp.sum(ge * ent), (lp, ent)
  (_, (lp, ent)), (dh, dw) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(h, w)
  return lp, ent, dh, dw


def run(seed: int = 0) -> dict:
  if jax.default_backend() not in ("gpu", "tpu"):
    raise SystemExit(f"kernels_check needs a GPU or TPU backend, got {jax.default_backend()!r}")
  rng = np.random.default_rng(seed)
  cases = []
  for n, d, v, vocab_major, transform in LOGPROB_CASES:
    h = jnp.asarray(rng.standard_normal((n, d)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((v, d) if vocab_major else (d, v)) / np.sqrt(d),
                    jnp.float32)
    t = jnp.asarray(rng.integers(0, v, n), jnp.int32)
    g, ge = (jnp.asarray(rng.standard_normal(n), jnp.float32) for _ in range(2))
    want = _value_and_grads(logprob.materialized, h, w, t, g, ge, vocab_major=vocab_major,
                            **transform)
    for impl in ("pallas", "auto"):
      got = _value_and_grads(logprob.token_logprobs, h, w, t, g, ge, vocab_major=vocab_major,
                             impl=impl, **transform)
      errs = [float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-12))
              for a, b in zip(got, want)]
      cases.append({"kernel": "logprob", "n": n, "d": d, "v": v, "vocab_major": vocab_major,
                    **transform, "impl": impl, "max_rel_err": max(errs), "ok": max(errs) < 2e-4})
  for rows, group, tokens, mode in GA_CASES:
    rewards = jnp.asarray(rng.random(rows) < 0.4, jnp.float32)
    valid = jnp.asarray(rng.random(rows) < 0.9)
    mask = jnp.asarray(rng.random((rows, tokens)) < 0.7)
    kw = dict(group_size=group, mode=mode, token_mask=mask)
    got = ga.grouped_advantage(rewards, valid, impl="pallas", **kw)
    want = ga.grouped_advantage(rewards, valid, impl="xla", **kw)
    err = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(got, want))
    cases.append({"kernel": "grouped_advantage", "rows": rows, "group": group, "T": tokens,
                  "mode": mode, "max_abs_err": err, "ok": err < 1e-5})
  return {"benchmark": "kernels_check", "backend": jax.default_backend(),
          "device": jax.devices()[0].device_kind, "cases": cases,
          "all_ok": all(c["ok"] for c in cases)}


if __name__ == "__main__":
  print(json.dumps(run()))
