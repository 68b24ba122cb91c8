"""Step segmentation of completions (docs/algorithms.md §5.1: a response is steps a_1..a_H).

A step ends at a *delimiter token* (by default every token whose text holds a newline; or an
explicit set of token ids) that closes some content, and at the completion's last token when
content follows the last delimiter (a final line without a newline, or a step cut at the length
limit). Consequences, pinned by tests:

* no delimiter at all: one step, ending at the last token (EOS included when present);
* empty steps (a delimiter right after another one, or at the very start) are merged into the
  next step: they close no content, so they are not step ends;
* a completion cut at the length limit (no EOS) ends its last step at position T - 1 and is
  reported `truncated`;
* tokens after the last step end (an EOS after a final newline) belong to the last step.

"Content" is every counted token that is neither a delimiter nor in `ignore_ids` (e.g. EOS, so
that `...\\n<eos>` adds no step). A token whose text holds the delimiter in its middle (the
SentencePiece piece '\\n-' of the ladder's tokenizer) ends the step it closes; the text after the
newline inside that token then counts for the previous step (a tokenization limit, not a rule).

Everything is jittable (static shapes): `segment` returns per-token step ids, the end positions
of each row's steps [R, H_max] and their mask.
"""

from __future__ import annotations

from typing import Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np


@flax.struct.dataclass
class Steps:
  """The steps of R completions of T tokens.

  Attributes:
    step_of: [R, T] int32 step index of each token (0 off the mask).
    ends: [R, T] bool, the token closes a step.
    num_steps: [R] int32 number of steps H_r.
    end_pos: [R, H] int32 token index of the h-th step end (0 where h >= H_r).
    step_mask: [R, H] bool, h < H_r.
    truncated: [R] bool, the row has no EOS inside its mask (cut at the length limit).
  """

  step_of: jax.Array
  ends: jax.Array
  num_steps: jax.Array
  end_pos: jax.Array
  step_mask: jax.Array
  truncated: jax.Array


def delimiter_ids(tokenizer, delimiter: str = "\n") -> tuple[int, ...]:
  """The ids of every token whose decoded text contains `delimiter` (host side, once).

  Raises:
    ValueError: `delimiter` is empty or no token of the vocabulary contains it.
  """
  if not delimiter:
    raise ValueError("delimiter is empty; expected a string such as '\\n' (or pass token ids)")
  ids = tuple(i for i in range(tokenizer.vocab_size) if delimiter in tokenizer.decode([i]))
  if not ids:
    raise ValueError(f"no token of the tokenizer's {tokenizer.vocab_size} contains the delimiter "
                     f"{delimiter!r}; expected a delimiter the tokenizer can produce")
  return ids


def _isin(tokens: jax.Array, ids: Sequence[int]) -> jax.Array:
  if not ids:
    return jnp.zeros(tokens.shape, bool)
  return jnp.any(tokens[..., None] == jnp.asarray(ids, tokens.dtype), axis=-1)


def segment(tokens: jax.Array, mask: jax.Array, delimiters: Sequence[int], *, max_steps: int,
            ignore_ids: Sequence[int] = (), eos_id: int | None = None) -> Steps:
  """Splits completions into steps (see the module docstring for the rules).

  Args:
    tokens: [R, T] int completion tokens.
    mask: [R, T] bool, counted tokens (up to and including EOS).
    delimiters: token ids that end a step (static tuple).
    max_steps: H, the static number of step slots; steps past H are not listed in `end_pos`
      (their tokens keep their true step index in `step_of`, clipped to H - 1).
    ignore_ids: token ids that are not content (EOS, padding).
    eos_id: the EOS id, for `truncated` (None: every row counts as truncated iff its last
      position is counted).
  """
  if max_steps < 1:
    raise ValueError(f"max_steps must be >= 1, got {max_steps}")
  tokens = jnp.asarray(tokens)
  mask = jnp.asarray(mask, bool)
  r, t = tokens.shape
  delim = _isin(tokens, tuple(delimiters)) & mask
  content = mask & ~delim & ~_isin(tokens, tuple(ignore_ids))
  c = jnp.cumsum(content, axis=1, dtype=jnp.int32)  # content tokens up to and including t
  at_delim = jnp.where(delim, c, 0)
  before = jnp.concatenate([jnp.zeros((r, 1), jnp.int32),
                            jax.lax.cummax(at_delim, axis=1)[:, :-1]], axis=1)
  ends = delim & (c > before)  # the delimiter closes content written since the last delimiter
  # The tail: content after the last delimiter ends at the last counted token.
  last = jnp.max(jnp.where(mask, jnp.arange(t)[None], -1), axis=1)  # -1 for an empty row
  tail = c[:, -1] > jnp.max(at_delim, axis=1)
  ends = ends | ((jnp.arange(t)[None] == last[:, None]) & tail[:, None])
  num = jnp.sum(ends, axis=1, dtype=jnp.int32)
  step_of = jnp.cumsum(ends, axis=1, dtype=jnp.int32) - ends
  step_of = jnp.where(mask, jnp.minimum(step_of, jnp.maximum(num - 1, 0)[:, None]), 0)
  step_of = jnp.minimum(step_of, max_steps - 1)
  order = jnp.argsort(~ends, axis=1, stable=True)[:, :max_steps]
  if order.shape[1] < max_steps:
    order = jnp.pad(order, ((0, 0), (0, max_steps - order.shape[1])))
  step_mask = jnp.arange(max_steps)[None] < num[:, None]
  end_pos = jnp.where(step_mask, order, 0).astype(jnp.int32)
  if eos_id is None:
    truncated = mask[:, -1]
  else:
    truncated = mask.any(axis=1) & ~jnp.any(mask & (tokens == eos_id), axis=1)
  return Steps(step_of=step_of, ends=ends, num_steps=num, end_pos=end_pos, step_mask=step_mask,
               truncated=truncated)


def gather_steps(values: jax.Array, steps: Steps) -> tuple[jax.Array, jax.Array]:
  """Values read at step ends.

  Args:
    values: [R, T + 1]: index 0 is the value of the bare prompt, index t + 1 the value after
      completion token t (`models.heads.token_values`).
    steps: the rows' `Steps`.

  Returns:
    (v0 [R], the value before any step; q [R, H], the value after step h, 0 where h >= H_r).
  """
  q = jnp.take_along_axis(values, steps.end_pos + 1, axis=1)
  return values[:, 0], jnp.where(steps.step_mask, q, 0.0)


def step_labels_to_tokens(labels_rh: np.ndarray, steps: Steps, t: int) -> tuple[np.ndarray,
                                                                                 np.ndarray]:
  """Per-step labels [R, H] (+ their mask `steps.step_mask`) -> per-position label and weight
  arrays [R, T + 1] in the layout of `gather_steps` (position end + 1; weight 1 there)."""
  labels_rh = np.asarray(labels_rh, np.float32)
  r, h = labels_rh.shape
  out = np.zeros((r, t + 1), np.float32)
  w = np.zeros((r, t + 1), np.float32)
  sm = np.asarray(steps.step_mask)[:, :h]
  pos = np.asarray(steps.end_pos)[:, :h] + 1
  rows = np.broadcast_to(np.arange(r)[:, None], pos.shape)
  out[rows[sm], pos[sm]] = labels_rh[sm]
  w[rows[sm], pos[sm]] = 1.0
  return out, w
