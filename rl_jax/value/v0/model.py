"""V0 in Flax (docs/algorithms.md §4.1): a query adapter over frozen backbone states, then an
in-context head.

    enc = V0Encoder(num_queries=32, query_dim=6, num_heads=3, mlp_hidden=64)
    x = enc.apply({'params': p}, H, mask)                        # [N, M*d_q] prompt features
    logits = KernelHead(head_dim=32).apply({'params': q}, x_S, y_S, m_S, x_Q)  # [Q]
    p_hat = sigmoid(logits)

`V0Encoder`: hidden states H [N, T, D] and their mask [N, T] -> features [N, M·d_q]; its
adapter's last Linear is zero-initialised, so an untrained encoder uses the static queries.
`HEADS` names the in-context heads ('kernel', 'ridge', 'transformer'), each
`(x_S [E, S, F], y_S [E, S], mask_S [E, S], x_Q [E, Q, F]) -> logits [E, Q]` for E episodes,
with `y_S` the support success rates in [0, 1].
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from rl_jax.registry import Registry


def pool_last(h: jax.Array, mask: jax.Array) -> jax.Array:
  """The hidden state of each row's last real token: h [N, L, D], mask [N, L] -> [N, D]."""
  pos = jnp.arange(h.shape[1])
  last = jnp.max(jnp.where(mask.astype(bool), pos, -1), axis=1)
  return jnp.take_along_axis(h, jnp.maximum(last, 0)[:, None, None], axis=1)[:, 0]


class V0Encoder(nn.Module):
  """Prompt hidden states H [N, L, D] (+ mask [N, L]) -> features x [N, M·d_q] (see module doc).

  `adapter=False` uses the static queries alone (no MLP parameters): with the zero-initialised
  last layer, `adapter=True` gives exactly the same output at init.
  """

  num_queries: int = 32
  query_dim: int = 6
  num_heads: int = 3
  mlp_hidden: int = 64
  dropout: float = 0.0
  adapter: bool = True

  def setup(self):
    m, d = self.num_queries, self.query_dim
    self.q_static = self.param("q_static", nn.initializers.normal(1.0), (m, d))
    if self.adapter:
      self.mlp_in = nn.Dense(self.mlp_hidden, name="mlp_in")
      self.mlp_norm = nn.LayerNorm(name="mlp_norm")
      self.mlp_drop = nn.Dropout(self.dropout)
      self.mlp_out = nn.Dense(m * d, kernel_init=nn.initializers.zeros,
                              bias_init=nn.initializers.zeros, name="mlp_out")
    self.w_kv = nn.Dense(d, name="w_kv")
    self.q_norm = nn.LayerNorm(name="q_norm")
    self.k_norm = nn.LayerNorm(name="k_norm")
    self.attn = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, qkv_features=d,
                                                out_features=d, name="cross_attn")

  def queries(self, h: jax.Array, mask: jax.Array, train: bool = False) -> jax.Array:
    """Q [N, M, d_q] = Q_static + reshape(MLP(pool_last(H)))."""
    n = h.shape[0]
    q = jnp.broadcast_to(self.q_static, (n, self.num_queries, self.query_dim))
    if not self.adapter:
      return q
    z = self.mlp_in(pool_last(h, mask).astype(jnp.float32))
    z = self.mlp_drop(nn.gelu(self.mlp_norm(z)), deterministic=not train)
    return q + self.mlp_out(z).reshape(n, self.num_queries, self.query_dim)

  def __call__(self, h: jax.Array, mask: jax.Array, train: bool = False) -> jax.Array:
    if self.query_dim % self.num_heads:
      raise ValueError(f"query_dim={self.query_dim} must be a multiple of num_heads="
                       f"{self.num_heads}")
    h = h.astype(jnp.float32)
    q = self.queries(h, mask, train)
    kv = self.w_kv(h)                                             # [N, L, d_q]
    key_mask = mask.astype(bool)[:, None, None, :]                # [N, 1, 1, L]
    out = self.attn(self.q_norm(q), self.k_norm(kv), kv, mask=key_mask, deterministic=True)
    return out.reshape(h.shape[0], -1)


class KernelHead(nn.Module):
  """The 'kernel' in-context head (module doc): a kernel smoother over the support set."""

  head_dim: int = 32
  tau_init: float = 0.1
  prior_count_init: float = 1.0

  @nn.compact
  def __call__(self, sx, sy, smask, qx):
    proj = nn.Dense(self.head_dim, name="proj")
    zs, zq = (_unit(proj(x)) for x in (sx, qx))
    log_tau = self.param("log_tau", nn.initializers.constant(math.log(self.tau_init)), ())
    raw_a = self.param("prior_count", nn.initializers.constant(
        math.log(math.expm1(self.prior_count_init))), ())
    scale = self.param("scale", nn.initializers.ones, ())
    shift = self.param("shift", nn.initializers.zeros, ())
    smask = smask.astype(jnp.float32)
    sim = jnp.einsum("eqf,esf->eqs", zq, zs)                    # cosine similarities
    k = jnp.exp((sim - 1.0) / jnp.exp(log_tau)) * smask[:, None, :]
    m = jnp.sum(sy * smask, -1) / jnp.maximum(jnp.sum(smask, -1), 1.0)   # [E]
    a = jax.nn.softplus(raw_a)
    p = (jnp.einsum("eqs,es->eq", k, sy) + a * m[:, None]) / (jnp.sum(k, axis=-1) + a)
    p = jnp.clip(p, 1e-4, 1 - 1e-4)
    return scale * (jnp.log(p) - jnp.log1p(-p)) + shift


class TransformerHead(nn.Module):
  """The 'transformer' in-context head (module doc): one block of attention over the support."""

  head_dim: int = 32
  num_heads: int = 4

  @nn.compact
  def __call__(self, sx, sy, smask, qx):
    proj = nn.Dense(self.head_dim, name="proj")
    label = nn.Dense(self.head_dim, name="label_embed")
    ts = proj(sx) + label(jnp.stack([sy, 1 - sy], -1))
    tq = proj(qx)
    smask = smask.astype(bool)
    attn = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, name="support_attn")
    ts = ts + attn(nn.LayerNorm(name="ln_s")(ts),
                   mask=(smask[:, None, :, None] & smask[:, None, None, :]))
    ts = ts + nn.Dense(self.head_dim, name="ff")(nn.gelu(nn.LayerNorm(name="ln_ff")(ts)))
    read = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, name="query_attn")
    kv = nn.LayerNorm(name="ln_kv")(ts)
    h = tq + read(nn.LayerNorm(name="ln_q")(tq), kv, kv,
                  mask=jnp.broadcast_to(smask[:, None, None, :],
                                        (tq.shape[0], 1, tq.shape[1], ts.shape[1])))
    smask = smask.astype(jnp.float32)
    m = (jnp.sum(sy * smask, -1) + 0.5) / (jnp.sum(smask, -1) + 1.0)   # smoothed support mean
    out = nn.Dense(1, kernel_init=nn.initializers.zeros, name="out")(nn.gelu(h))[..., 0]
    return (jnp.log(m) - jnp.log1p(-m))[:, None] + out


class RidgeHead(nn.Module):
  """The 'ridge' in-context head (module doc): ridge regression fitted on the support set in the
  forward pass (closed form, differentiable), applied to the queries."""

  head_dim: int = 32
  lam_init: float = 0.1

  @nn.compact
  def __call__(self, sx, sy, smask, qx):
    proj = nn.Dense(self.head_dim, name="proj")
    zs, zq = proj(sx), proj(qx)
    m = smask.astype(jnp.float32)[..., None]                       # [E, S, 1]
    n = jnp.maximum(jnp.sum(m, axis=1, keepdims=True), 1.0)        # [E, 1, 1]
    mu = jnp.sum(zs * m, axis=1, keepdims=True) / n
    sd = jnp.sqrt(jnp.sum(((zs - mu) * m) ** 2, axis=1, keepdims=True) / n + 1e-6)
    zs, zq = (zs - mu) / sd * m, (zq - mu) / sd
    ybar = jnp.sum(sy[..., None] * m, axis=1) / n[:, 0]             # [E, 1]
    lam = jnp.exp(self.param("log_lam", nn.initializers.constant(math.log(self.lam_init)), ()))
    gram = jnp.einsum("esd,esf->edf", zs, zs) / n + lam * jnp.eye(self.head_dim)
    rhs = jnp.einsum("esd,es->ed", zs, (sy - ybar) * m[..., 0]) / n[:, 0]
    w = jnp.linalg.solve(gram, rhs[..., None])[..., 0]              # [E, d]
    p = jnp.clip(jnp.einsum("eqd,ed->eq", zq, w) + ybar, 1e-3, 1 - 1e-3)
    scale = self.param("scale", nn.initializers.ones, ())
    shift = self.param("shift", nn.initializers.zeros, ())
    return scale * (jnp.log(p) - jnp.log1p(-p)) + shift


def _unit(x):
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + 1e-12)


HEADS = Registry("v0 head")
HEADS.register("kernel")(KernelHead)
HEADS.register("transformer")(TransformerHead)
HEADS.register("ridge")(RidgeHead)
