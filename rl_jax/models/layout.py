"""The two layer layouts of a parameter tree: unrolled `layers_0` .. `layers_{L-1}`, or one
`layers` subtree whose leaves are stacked on a leading layer axis (`ModelConfig.scan_layers`).

    stacked = stack_layers(params)      # layers_i/self_attn/q_proj/kernel [D, X]
                                        #   -> layers/self_attn/q_proj/kernel [L, D, X]
    params = unstack_layers(stacked)

Both walk any pytree (a train state, Adam's moments, a value model's `body`) and convert every
dict that holds the layers, so one call converts a whole checkpoint. Leaves may be arrays
(jax or numpy) or `jax.ShapeDtypeStruct`s (a restore target: shapes, dtypes and NamedShardings
move with the layer axis, which no mesh axis splits).
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

STACKED = "layers"
_UNROLLED = re.compile(r"layers_(\d+)$")


def _is_layer_dict(x: Any) -> bool:
  return isinstance(x, dict) and (STACKED in x or "layers_0" in x)


def _sharding(sharding: Any, spec: P) -> Any:
  return NamedSharding(sharding.mesh, spec) if isinstance(sharding, NamedSharding) else None


def _stack(*xs: Any) -> Any:
  x = xs[0]
  if isinstance(x, jax.ShapeDtypeStruct):
    sharding = getattr(x, "sharding", None)
    spec = sharding.spec if isinstance(sharding, NamedSharding) else None
    return jax.ShapeDtypeStruct(
        (len(xs), *x.shape), x.dtype,
        sharding=None if spec is None else _sharding(sharding, P(None, *spec)))
  if isinstance(x, np.ndarray):
    return np.stack(xs)
  return jnp.stack(xs)


def _unstack(x: Any, n: int) -> list[Any]:
  if isinstance(x, jax.ShapeDtypeStruct):
    sharding = getattr(x, "sharding", None)
    spec = sharding.spec if isinstance(sharding, NamedSharding) else None
    one = jax.ShapeDtypeStruct(
        x.shape[1:], x.dtype,
        sharding=None if spec is None else _sharding(sharding, P(*tuple(spec)[1:])))
    return [one] * n
  return [x[i] for i in range(n)]


def _stack_dict(d: dict) -> dict:
  idx = sorted(int(m.group(1)) for k in d if (m := _UNROLLED.match(k)))
  if idx != list(range(len(idx))):
    raise ValueError(f"layer keys are not layers_0 .. layers_{len(idx) - 1}: {sorted(d)}")
  out = {k: v for k, v in d.items() if not _UNROLLED.match(k)}
  if STACKED in out:
    raise ValueError("a tree holds both `layers` and `layers_0`")
  out[STACKED] = jax.tree_util.tree_map(_stack, *(d[f"layers_{i}"] for i in idx))
  return out


def _unstack_dict(d: dict) -> dict:
  out = {k: v for k, v in d.items() if k != STACKED}
  leaves, treedef = jax.tree_util.tree_flatten(d[STACKED])
  n = leaves[0].shape[0]
  per_leaf = [_unstack(x, n) for x in leaves]
  for i in range(n):
    out[f"layers_{i}"] = jax.tree_util.tree_unflatten(treedef, [xs[i] for xs in per_leaf])
  return out


def stack_layers(tree: Any) -> Any:
  """`tree` with every `layers_0` .. `layers_{L-1}` group replaced by one stacked `layers`
  subtree (leaves [L, ...]); a tree already stacked is returned as it is."""
  return jax.tree_util.tree_map(
      lambda x: _stack_dict(x) if _is_layer_dict(x) and STACKED not in x else x, tree,
      is_leaf=_is_layer_dict)


def unstack_layers(tree: Any) -> Any:
  """`tree` with every stacked `layers` subtree split into `layers_0` .. `layers_{L-1}`; a tree
  already unrolled is returned as it is."""
  return jax.tree_util.tree_map(
      lambda x: _unstack_dict(x) if _is_layer_dict(x) and STACKED in x else x, tree,
      is_leaf=_is_layer_dict)


def to_layout(tree: Any, scan_layers: bool) -> Any:
  """`tree` in the layout of `ModelConfig.scan_layers`: `stack_layers` or `unstack_layers`."""
  return stack_layers(tree) if scan_layers else unstack_layers(tree)


def is_stacked(tree: Any) -> bool:
  """Whether `tree` holds a stacked `layers` subtree anywhere."""
  found = []
  jax.tree_util.tree_map(lambda x: found.append(_is_layer_dict(x) and STACKED in x), tree,
                         is_leaf=_is_layer_dict)
  return any(found)
