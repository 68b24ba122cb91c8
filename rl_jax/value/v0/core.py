"""V0's functional API: one config, one Flax module (encoder + in-context head), pure functions.

    cfg = V0Config()                                         # small defaults (config.value.v0)
    params = init_params(cfg, rng, d_model=D, length=L)
    logits = episode_logits(cfg, params, H, mask, support_idx, support_y, support_mask,
                            query_idx)                        # [E, Q]; p_hat = sigmoid(logits)
    p_hat = predict(cfg, params, H, mask, support_idx, support_y, query_idx)   # host, checked

H [U, L, D] holds the frozen backbone's hidden states of U distinct prompts (`features.py`); an
episode names its support set (S prompts with success rates y in [0, 1]) and its Q query
prompts by rows of H, so each prompt is encoded once per call. Shapes are static under jit:
support sets are padded to S with `support_mask` = False.
"""

from __future__ import annotations

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rl_jax.value.v0.model import HEADS, V0Encoder


class SupportSetError(ValueError):
  """A support set or query that V0 cannot use (empty, or shapes that do not match)."""


@dataclasses.dataclass(frozen=True)
class V0Config:
  """Sizes of V0 (the reference: 168 queries x 6 dims, 3 heads, MLP 128; ours are smaller)."""

  num_queries: int = 32
  query_dim: int = 6
  num_heads: int = 3
  mlp_hidden: int = 64
  dropout: float = 0.0
  head: str = "kernel"
  head_dim: int = 32

  @classmethod
  def from_config(cls, c) -> "V0Config":
    """From `config.value.v0` (extra fields ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in c.items() if k in names})


class V0(nn.Module):
  cfg: V0Config

  def setup(self):
    c = self.cfg
    self.encoder = V0Encoder(num_queries=c.num_queries, query_dim=c.query_dim,
                             num_heads=c.num_heads, mlp_hidden=c.mlp_hidden, dropout=c.dropout)
    self.head = HEADS.get(c.head)(head_dim=c.head_dim)

  def features(self, h, mask, train: bool = False):
    return self.encoder(h, mask, train)

  def __call__(self, h, mask, support_idx, support_y, support_mask, query_idx,
               train: bool = False):
    """-> logits [E, Q] for E episodes (support_idx [E, S], query_idx [E, Q] rows of h)."""
    x = self.encoder(h, mask, train)
    return self.head(x[support_idx], support_y, support_mask, x[query_idx])


def init_params(cfg: V0Config, rng: jax.Array, *, d_model: int, length: int = 4) -> dict:
  """Random V0 parameters (a plain dict) for backbone width `d_model`; the adapter's last layer
  is zero (so the queries start as the static ones)."""
  h = jnp.zeros((2, length, d_model), jnp.float32)
  mask = jnp.ones((2, length), bool)
  idx = jnp.zeros((1, 2), jnp.int32)
  return V0(cfg).init(rng, h, mask, idx, jnp.zeros((1, 2)), jnp.ones((1, 2), bool),
                      idx)["params"]


@functools.partial(jax.jit, static_argnames=("cfg", "train"))
def episode_logits(cfg: V0Config, params, h, mask, support_idx, support_y, support_mask,
                   query_idx, rng=None, train: bool = False):
  """logits [E, Q] = logit(p_hat) of each episode's queries (jitted; shapes unchecked)."""
  rngs = {"dropout": rng} if train and rng is not None else None
  return V0(cfg).apply({"params": params}, h, mask, support_idx, support_y, support_mask,
                       query_idx, train=train, rngs=rngs)


def features(cfg: V0Config, params, h, mask) -> jax.Array:
  """The encoder's prompt features x [U, M·d_q] (the logistic-regression baseline uses them)."""
  return _features(cfg, params, h, mask)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _features(cfg, params, h, mask):
  return V0(cfg).apply({"params": params}, h, mask, method=V0.features)


def check_episode(h, mask, support_idx, support_y, support_mask, query_idx) -> None:
  """Raises SupportSetError naming the array and shapes: an empty support set, or shapes that do
  not fit (h [U, L, D], mask [U, L], support_idx/_y/_mask [E, S], query_idx [E, Q])."""
  h_shape, m_shape = np.shape(h), np.shape(mask)
  if len(h_shape) != 3 or m_shape != h_shape[:2]:
    raise SupportSetError(f"hidden states must be [U, L, D] with mask [U, L]; got "
                          f"{h_shape} and {m_shape}")
  s = np.shape(support_idx)
  if len(s) != 2 or np.shape(support_y) != s or np.shape(support_mask) != s:
    raise SupportSetError(f"support_idx, support_y and support_mask must share one [E, S] shape; "
                          f"got {s}, {np.shape(support_y)}, {np.shape(support_mask)}")
  q = np.shape(query_idx)
  if len(q) != 2 or q[0] != s[0]:
    raise SupportSetError(f"query_idx must be [E, Q] with E={s[0]} episodes; got {q}")
  if s[1] == 0 or not np.asarray(support_mask).any(axis=1).all():
    raise SupportSetError("empty support set: every episode needs at least one support item "
                          "(a prompt with a measured success rate of the current policy)")
  for name, idx in (("support_idx", support_idx), ("query_idx", query_idx)):
    idx = np.asarray(idx)
    if idx.size and (idx.min() < 0 or idx.max() >= h_shape[0]):
      raise SupportSetError(f"{name} must index the {h_shape[0]} rows of the hidden states; got "
                            f"values in [{idx.min()}, {idx.max()}]")
  y = np.asarray(support_y)
  if y.size and (np.nanmin(y) < 0 or np.nanmax(y) > 1 or np.isnan(y).any()):
    raise SupportSetError("support_y must be success rates in [0, 1]")


def predict(cfg: V0Config, params, h, mask, support_idx, support_y, query_idx,
            support_mask=None) -> np.ndarray:
  """p_hat [Q] for one episode (1-D support_idx [S], support_y [S], query_idx [Q]): checked
  with `check_episode`, then `episode_logits`."""
  support_idx = np.asarray(support_idx)
  if support_mask is None:
    support_mask = np.ones(np.shape(support_idx), bool)
  if np.ndim(support_idx) != 1 or np.ndim(query_idx) != 1:
    raise SupportSetError(f"predict takes one episode: support_idx [S] and query_idx [Q]; got "
                          f"shapes {np.shape(support_idx)} and {np.shape(query_idx)}")
  args = [np.asarray(a)[None] for a in (support_idx, support_y, support_mask, query_idx)]
  check_episode(h, mask, *args)
  logits = episode_logits(cfg, params, jnp.asarray(h), jnp.asarray(mask), args[0].astype(np.int32),
                          args[1].astype(np.float32), args[2].astype(bool),
                          args[3].astype(np.int32))
  return np.asarray(jax.nn.sigmoid(logits[0]))
