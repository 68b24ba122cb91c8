"""Training V0 (adapter + head; the backbone is frozen) on a rollout history, with optax.

    tx = optimizer(config.value.v0.optim)
    params, opt_state, metrics = fit(cfg, tx, params, opt_state, table, hidden, rng,
                                     steps=..., query_steps=..., num_episodes=4,
                                     support_size=256, num_queries=8, alpha=0.25, key=key)
    sigma0_sq, residual_metrics = validation_sigma0_sq(cfg, params, table, hidden, step=s, ...)

`hidden(ids) -> (H, mask)` gives the frozen backbone's states of prompt ids (`features.py`).
One optimizer step = a batch of episodes (`episodes.sample_episodes`) and the combined loss
(`v0_loss.combined_loss`). Randomness comes from the arguments only (a host
`np.random.Generator` for the episodes, a JAX key for dropout), so a resumed run repeats it.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl_jax.train_state import make_optimizer
from rl_jax.value.v0 import core as v0_lib
from rl_jax.value.v0 import episodes as ep
from rl_jax.value.v0.loss import combined_loss



def optimizer(optim) -> optax.GradientTransformation:
  """AdamW with clipping from a `train_state.optim_config` ConfigDict (constant schedule after
  warm-up)."""
  return make_optimizer(optim, max(int(optim.warmup_steps) + 1, 1))


def bucket(n: int, minimum: int = 64) -> int:
  """The padded row count of the hidden-state array: the next power of two >= max(n, minimum),
  so a few shapes (compiles) serve every call."""
  return max(minimum, 1 << max(n - 1, 0).bit_length())


def hidden_rows(hidden: Callable, ids) -> tuple[np.ndarray, np.ndarray, dict]:
  """(H [U', L, D], mask, rows_of): states of `ids` padded to `bucket(len(ids))` rows (copies of
  row 0, never indexed) and the row of each prompt id."""
  ids = np.unique(np.asarray(ids, np.int64))
  h, mask = hidden(ids)
  pad = bucket(len(ids)) - len(ids)
  if pad:
    h = np.concatenate([h, np.repeat(h[:1], pad, 0)])
    mask = np.concatenate([mask, np.repeat(mask[:1], pad, 0)])
  return h, mask, {int(i): r for r, i in enumerate(ids)}


def episode_arrays(e: ep.Episodes, rows_of: dict) -> dict:
  s_idx, q_idx = e.index(rows_of)
  return dict(support_idx=s_idx, support_y=e.support_y.astype(np.float32),
              support_mask=e.support_mask, query_idx=q_idx, query_y=e.query_y.astype(np.float32),
              query_mask=e.query_mask, pos_idx=e.pos_idx, neg_idx=e.neg_idx,
              pair_mask=e.pair_mask)


@functools.partial(jax.jit, static_argnames=("cfg", "tx", "alpha"))
def train_step(cfg: v0_lib.V0Config, tx, params, opt_state, h, mask, batch, key, *, alpha):
  """One optax step on a batch of episodes -> (params, opt_state, metrics)."""

  def loss_fn(p):
    logits = v0_lib.V0(cfg).apply(
        {"params": p}, h, mask, batch["support_idx"], batch["support_y"],
        batch["support_mask"], batch["query_idx"], train=True, rngs={"dropout": key})
    return combined_loss(logits, batch["query_y"], batch["query_mask"], batch["pos_idx"],
                         batch["neg_idx"], batch["pair_mask"], alpha)

  (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return params, opt_state, dict(parts, loss=loss, grad_norm=optax.tree.norm(grads))


def fit(cfg, tx, params, opt_state, table: ep.RateTable, hidden: Callable, rng, *, steps: int,
        query_steps, num_episodes: int, support_size: int, num_queries: int, alpha: float,
        key: jax.Array):
  """`steps` optimizer steps on episodes at `query_steps` -> (params, opt_state, mean metrics).

  The hidden states of every prompt the episodes may touch (rows with step <= max(query_steps))
  are computed once."""
  if steps <= 0:
    return params, opt_state, {}
  upto = max(query_steps)
  h, mask, rows_of = hidden_rows(hidden, table.prompt_id[table.step <= upto])
  h, mask = jnp.asarray(h), jnp.asarray(mask)
  totals: dict = {}
  for i in range(steps):
    e = ep.sample_episodes(table, rng, steps=query_steps, num_episodes=num_episodes,
                           support_size=support_size, num_queries=num_queries)
    batch = jax.tree_util.tree_map(jnp.asarray, episode_arrays(e, rows_of))
    params, opt_state, m = train_step(cfg, tx, params, opt_state, h, mask, batch,
                                      jax.random.fold_in(key, i), alpha=alpha)
    for k, v in m.items():
      totals[k] = totals.get(k, 0.0) + float(v) / steps
  return params, opt_state, totals


def predict_ids(cfg, params, hidden: Callable, support_ids, support_y, query_ids) -> np.ndarray:
  """p_hat [Q] for prompt ids `query_ids` given a support set of prompt ids and rates."""
  support_ids, query_ids = np.asarray(support_ids), np.asarray(query_ids)
  if not len(support_ids):
    raise v0_lib.SupportSetError("empty support set: V0 needs at least one prompt with a "
                                 "measured success rate of the current policy")
  if np.shape(support_y) != support_ids.shape:
    raise v0_lib.SupportSetError(f"support ids {support_ids.shape} and rates "
                                 f"{np.shape(support_y)} must have one shape")
  h, mask, rows_of = hidden_rows(hidden, np.concatenate([support_ids, query_ids]))
  s_idx = np.asarray([rows_of[int(i)] for i in support_ids], np.int32)
  q_idx = np.asarray([rows_of[int(i)] for i in query_ids], np.int32)
  return v0_lib.predict(cfg, params, h, mask, s_idx, np.asarray(support_y, np.float32), q_idx)


def validation_sigma0_sq(cfg, params, table: ep.RateTable, hidden: Callable, *, step: int,
                         support_size: int, floor: float = 1e-3) -> tuple[float, dict]:
  """sigma0^2 of V0.5 from the rows of `step` predicted with the support set of the steps
  before it (how the prior is used): `mean((p_hat - r)^2) - mean(r(1-r)/(n-1))` (the squared
  residual minus the rate's own sampling variance, estimated without bias), at least `floor`.
  Returns (sigma0_sq, {'val_mse', 'val_noise', 'val_count'}); sigma0_sq is None when there is
  nothing to validate on."""
  rows = table.take(table.step == step)
  s_ids, s_y = support_set(table, upto_step=step - 1, size=support_size)
  if not len(rows) or not len(s_ids):
    return None, {}
  p = predict_ids(cfg, params, hidden, s_ids, s_y, rows.prompt_id)
  r, n = rows.rate, rows.attempts
  mse = float(np.mean((p - r) ** 2))
  noise = float(np.mean(np.where(n > 1, r * (1 - r) / np.maximum(n - 1, 1), 0.0)))
  return max(mse - noise, floor), {"val_mse": mse, "val_noise": noise,
                                             "val_count": float(len(rows))}


support_set = ep.support_set
