"""ARRoL's quality head g_ψ (docs/algorithms.md §6.6), trained online during RL (`rollout='arrol'`).

    run = ArrolRun(exp)                    # the run's head and engine options (a run companion)
    out = arrol.arrol_generate(params, run.head.params, ..., options=run.options)
    metrics = run.observe(out.features, rewards)   # BCE updates on the survivors' outcomes
    {**run.meta()}; run.load_meta(meta)    # its state rides in the RL checkpoint's meta

The head is `rl_jax.models.heads`' scalar head on the policy's final-normed hidden state at the
pruning checkpoint, initialised to w = 0, b = 0 (g = 0.5 for every row). `observe` takes
`config.rl.arrol.updates` Adam steps on the round's survivors only (pruned rows have no outcome).
"""

from __future__ import annotations

import base64
import functools
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl_jax.models import heads
from rl_jax.sampling import arrol
from rl_jax.value.prm.model import bce_with_logits

def init_head(d_model: int, bias: float = 0.0) -> dict:
  """{'head': {'kernel': zeros [D], 'bias': bias}} (float32), the layout `heads.head_logits`
  reads."""
  return {"head": {"kernel": jnp.zeros((d_model,), jnp.float32),
                   "bias": jnp.asarray(bias, jnp.float32)}}


def _loss(params, x, y, w):
  z = heads.head_logits(params, x)
  return jnp.sum(w * bce_with_logits(z, y)) / jnp.maximum(jnp.sum(w), 1.0)


@functools.partial(jax.jit, static_argnames=("tx", "steps"))
def _fit(params, opt_state, x, y, w, *, tx, steps: int):
  """`steps` full-batch optax steps of the weighted BCE; returns (params, opt_state, loss before)."""

  def one(carry, _):
    p, s = carry
    loss, g = jax.value_and_grad(_loss)(p, x, y, w)
    upd, s = tx.update(g, s, p)
    return (optax.apply_updates(p, upd), s), loss

  (params, opt_state), losses = jax.lax.scan(one, (params, opt_state), None, length=steps)
  return params, opt_state, losses[0]


class QualityHead:
  """g_ψ's params, Adam state and update count; `fit` trains it on (features, outcomes)."""

  def __init__(self, d_model: int, *, lr: float, updates: int):
    self.tx = optax.adam(lr)
    self.updates = updates
    self.params = init_head(d_model)
    self.opt_state = self.tx.init(self.params)
    self.rounds = 0

  def predict(self, features) -> np.ndarray:
    return np.asarray(jax.nn.sigmoid(heads.head_logits(self.params, jnp.asarray(features))))

  def fit(self, features, outcomes, weights=None) -> dict:
    """Trains on features [R, D] with outcomes [R] in {0, 1} (weights [R], default 1); returns
    the BCE and accuracy of the head before the update (held out: it had not seen these rows)."""
    x = jnp.asarray(features, jnp.float32)
    y = jnp.asarray(outcomes, jnp.float32)
    w = jnp.ones_like(y) if weights is None else jnp.asarray(weights, jnp.float32)
    before = self.predict(x)
    acc = float(np.sum(np.asarray(w) * ((before > 0.5) == (np.asarray(y) > 0.5)))
                / max(float(np.sum(np.asarray(w))), 1.0))
    if self.updates:
      self.params, self.opt_state, loss = _fit(self.params, self.opt_state, x, y, w, tx=self.tx,
                                               steps=self.updates)
    else:
      loss = _loss(self.params, x, y, w)
    self.rounds += 1
    return {"arrol/head_loss": float(loss), "arrol/head_acc": acc,
            "arrol/head_mean": float(before.mean())}

  # --- checkpoints: arrays as base64 bytes in the RL checkpoint's JSON meta (exact) -----------
  def state(self) -> dict:
    leaves = jax.tree_util.tree_leaves((self.params, self.opt_state))
    return {"rounds": self.rounds, "arrays": [
        {"dtype": str(np.asarray(x).dtype), "shape": list(np.shape(x)),
         "data": base64.b64encode(np.ascontiguousarray(np.asarray(x)).tobytes()).decode()}
        for x in leaves]}

  def load_state(self, state: dict) -> None:
    treedef = jax.tree_util.tree_structure((self.params, self.opt_state))
    if treedef.num_leaves != len(state["arrays"]):
      raise ValueError(f"the checkpoint's ARRoL head state has {len(state['arrays'])} arrays, "
                       f"config.rl.arrol builds {treedef.num_leaves}")
    leaves = [jnp.asarray(np.frombuffer(base64.b64decode(a["data"]), np.dtype(a["dtype"]))
                          .reshape(a["shape"])) for a in state["arrays"]]
    self.params, self.opt_state = jax.tree_util.tree_unflatten(treedef, leaves)
    self.rounds = int(state["rounds"])


class ArrolRun:
  """The ARRoL state of one RL run: engine options and the online quality head."""

  def __init__(self, exp):
    self.config = exp.config
    self.options = arrol.ArrolOptions.from_config(exp.config)
    c = exp.config.rl.arrol
    self.head = QualityHead(exp.model_cfg.d_model, lr=c.lr, updates=c.updates)

  def observe(self, features, rewards) -> dict:
    """Trains the head on a round's survivors: features [R, D], raw rewards [R, K]."""
    y = np.asarray(rewards, np.float32)[:, 0] > self.config.rl.success_threshold
    return self.head.fit(features, y.astype(np.float32))

  def meta(self) -> dict:
    return {"arrol": self.head.state()}

  def load_meta(self, meta: dict) -> None:
    """Restores `meta()`'s head (a resumed RL phase); nothing when the meta has no 'arrol'."""
    if "arrol" in meta:
      self.head.load_state(meta["arrol"])
