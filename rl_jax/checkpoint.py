"""Checkpoints: train state (any pytree of jax arrays) + a small JSON `meta` dict.

A thin layer over `orbax.checkpoint.CheckpointManager` with two items per step:
`state` (`StandardSave`/`StandardRestore`) and `meta` (`JsonSave`/`JsonRestore`,
e.g. phase name, wall time), plus a third, `data`, when the checkpointer is given
a grain `data_iterator`: its state (grain's orbax handler, one JSON file per
process), saved with every checkpoint and set back by `restore`, so a resumed
run reads the same data in the same order.

Atomicity: orbax writes step `k` into `k.orbax-checkpoint-tmp` and renames it
to `k` only after every item is written, and saving here is synchronous, so a
crash leaves at most a temporary directory that `latest_step` ignores and the
next `Checkpointer` on the directory deletes.

Integrity: after a save, a SHA-256 of every file of the step directory is written into it
(`digest.json`, atomically). `restore` checks it, and reports a checkpoint whose files were
truncated or changed (or that orbax cannot read) as `CheckpointCorruptError`, naming it;
`restore_latest` then moves it aside (into `<directory>.corrupt/`) and takes the previous one.
A checkpoint without a digest (a crash between the rename and the digest) is only checked by
reading it.

Layer layouts: a model's parameters (and every tree shaped like them: optimizer moments, a value
model's body) are either unrolled (`layers_0` .. `layers_{L-1}`) or stacked on a layer axis
(`layers`, `ModelConfig.scan_layers`). `restore` converts a checkpoint written in one layout
into the target's (`rl_jax.models.layout`), so flipping `config.model.scan_layers` keeps a run's
checkpoints, `init_from` sources and PRM states usable.

PRNG keys: typed keys (`jax.random.key`) and raw `uint32` keys
(`jax.random.PRNGKey`) both round-trip; orbax stores a typed key's key data.
`restore` returns each key in the form of the target (typed or raw), whatever
form it was saved in.

Example::

    ckpt = Checkpointer(workdir + "/ckpt", save_every=100)
    if (step := ckpt.latest_step()) is not None:
      state, meta = ckpt.restore(step, jax.eval_shape(init_state))
    ...
    ckpt.maybe_save(step, state, {"phase": "rl", "data_pos": pos})
    ckpt.close()
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from rl_jax import hostmem
from rl_jax import parallel
from rl_jax.models import layout

_MAX_LISTED = 8
DIGEST_FILE = "digest.json"
_log = logging.getLogger(__name__)


class CheckpointMismatchError(ValueError):
  """The checkpoint on disk has a different tree structure or shapes."""


class CheckpointCorruptError(RuntimeError):
  """A checkpoint's files are truncated, changed or unreadable (the message names it)."""


def _files_digest(step_dir: str) -> dict:
  """{relative path: sha256 hex} of every file under `step_dir` except the digest itself."""
  out = {}
  for root, _, files in os.walk(step_dir):
    for name in files:
      path = os.path.join(root, name)
      rel = os.path.relpath(path, step_dir)
      if rel.startswith(DIGEST_FILE):  # The digest and its temporary file.
        continue
      h = hashlib.sha256()
      with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
          h.update(block)
      out[rel] = h.hexdigest()
  return dict(sorted(out.items()))


def _is_key(x: Any) -> bool:
  return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def _stored_shape(x: Any) -> tuple[int, ...]:
  """Shape of `x` as stored on disk (a typed key is stored as its key data)."""
  if _is_key(x):
    return tuple(jax.eval_shape(jax.random.key_data, x).shape)
  return tuple(np.shape(x))


def _by_path(tree: Any) -> dict[str, Any]:
  """Leaves keyed by dotted path ('params.w', 'opt.0.mu.w'), as orbax names them."""
  leaves, _ = jax.tree_util.tree_flatten_with_path(
      tree, is_leaf=lambda x: hasattr(x, "shape") and hasattr(x, "dtype"))
  return {jax.tree_util.keystr(p, simple=True, separator="."): x
          for p, x in leaves}


def _listed(names) -> str:
  names = sorted(names)
  more = f" (+{len(names) - _MAX_LISTED} more)" if len(names) > _MAX_LISTED else ""
  return ", ".join(names[:_MAX_LISTED]) + more


def _as_target_key(restored: Any, target: Any) -> Any:
  """Gives `restored` the key form (typed or raw uint32) of `target`."""
  if _is_key(target) and not _is_key(restored):
    impl = jax.random.key_impl(target) if isinstance(target, jax.Array) else None
    return jax.random.wrap_key_data(restored, impl=impl)
  if _is_key(restored) and not _is_key(target):
    return jax.random.key_data(restored)
  return restored


def _in_saved_layout(target: Any, saved: dict[str, Any]) -> Any:
  """`target`, or `target` in the other layer layout when that is the one of the checkpoint
  (whose leaves by path are `saved`)."""
  if _by_path(target).keys() == saved.keys():
    return target
  other = layout.to_layout(target, not layout.is_stacked(target))
  return other if _by_path(other).keys() == saved.keys() else target


def _placed_like(tree: Any, target: Any) -> Any:
  """`tree`'s arrays placed with the shardings of `target`'s leaves (where they have one)."""

  def one(x, t):
    sharding = getattr(t, "sharding", None)
    return x if sharding is None else jax.device_put(x, sharding)

  return jax.tree.map(one, tree, target)


class Checkpointer:
  """Saves every `save_every` steps into `directory`, keeping `max_to_keep`.

  `data_iterator`: a grain iterator (`grain.DataLoader` or dataset iterator) whose state is saved
  with every checkpoint and restored in place by `restore`.
  """

  def __init__(self, directory: str | os.PathLike, *, save_every: int,
               max_to_keep: int = 2, data_iterator: Any = None):
    if save_every < 1:
      raise ValueError(f"save_every must be >= 1, got {save_every}")
    self.directory = os.path.abspath(os.fspath(directory))
    self.save_every = save_every
    self.data_iterator = data_iterator
    handlers = {"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    if data_iterator is not None:
      import grain  # pylint: disable=import-outside-toplevel  (only runs that read through grain)
      self._grain = grain
      handlers["data"] = grain.checkpoint.CheckpointHandler()
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep,
        enable_async_checkpointing=False,  # save returns once it is on disk
        cleanup_tmp_directories=True,  # remove what a crashed save left
        create=True)
    self._manager = ocp.CheckpointManager(self.directory, options=options,
                                          item_handlers=handlers)

  def maybe_save(self, step: int, state: Any, meta: dict | None = None,
                 force: bool = False) -> bool:
    """Saves `state` and `meta` at `step` if `step % save_every == 0` or `force`.

    Returns whether a checkpoint was written. A step already on disk is not
    rewritten (returns False), so re-saving right after a resume is harmless.
    Blocks until the checkpoint is complete and renamed into place.
    """
    if not self.will_save(step, force):
      return False
    meta = {} if meta is None else meta
    try:
      json.dumps(meta)
    except TypeError as e:
      raise TypeError(f"checkpoint meta must be JSON-serializable: {e}") from e
    items = dict(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
    if self.data_iterator is not None:
      items["data"] = self._grain.checkpoint.CheckpointSave(self.data_iterator)
    # The save copies the state into host buffers: start it from a trimmed heap and give those
    # buffers back after it (rl_jax/hostmem.py), so the resident set does not keep the copy.
    hostmem.release_free_heap()
    saved = self._manager.save(step, force=True, args=ocp.args.Composite(**items))
    self._manager.wait_until_finished()
    hostmem.release_free_heap()
    if saved:
      # Multi-host: the directory is shared and orbax has finished every process's files by
      # now; process 0 writes the digest, and no process goes on before it is there.
      if parallel.is_primary():
        self._write_digest(step)
      parallel.sync(f"checkpoint.digest.{step}")
    return bool(saved)

  def will_save(self, step: int, force: bool = False) -> bool:
    """Whether `maybe_save(step, ..., force)` would write a checkpoint (a state saved beside this
    one, e.g. the online PRM's, is written first when it would)."""
    return (force or step % self.save_every == 0) and step not in self._manager.all_steps()

  def step_dir(self, step: int) -> str:
    """The directory of the checkpoint at `step`."""
    return os.path.join(self.directory, str(step))

  def _write_digest(self, step: int) -> None:
    where = self.step_dir(step)
    digest = _files_digest(where)
    tmp = os.path.join(where, DIGEST_FILE + ".tmp")
    with open(tmp, "w") as f:
      json.dump(digest, f, indent=0)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, os.path.join(where, DIGEST_FILE))

  def verify(self, step: int) -> None:
    """Raises CheckpointCorruptError if the files of `step` differ from its digest (a missing,
    truncated or changed file); a checkpoint saved without a digest passes."""
    where = self.step_dir(step)
    path = os.path.join(where, DIGEST_FILE)
    if not os.path.exists(path):
      return
    try:
      with open(path) as f:
        want = json.load(f)
    except (OSError, ValueError) as e:
      raise CheckpointCorruptError(f"checkpoint {where}: unreadable {DIGEST_FILE} ({e})") from e
    got = _files_digest(where)
    bad = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
    if bad:
      raise CheckpointCorruptError(
          f"checkpoint {where} is corrupted: {len(bad)} file(s) missing, truncated or changed "
          f"since it was saved: {_listed(bad)}")

  def restore_latest(self, abstract_state: Any) -> tuple[int, Any, dict] | None:
    """(step, state, meta) of the newest checkpoint that restores, or None if none does.

    A corrupted checkpoint (`CheckpointCorruptError`) is logged by name, moved into
    `<directory>.corrupt/` (so the step can be saved again) and the previous one is tried.
    `CheckpointMismatchError` (a different model or optimizer) is raised, not skipped.
    """
    for step in reversed(self.all_steps()):
      try:
        state, meta = self.restore(step, abstract_state)
        return step, state, meta
      except CheckpointCorruptError as e:
        _log.warning("%s; skipping it for the previous checkpoint", e)
        self._quarantine(step)
    return None

  def _quarantine(self, step: int) -> None:
    if parallel.is_primary():  # Multi-host: one process moves it, every process then re-reads.
      dest_root = self.directory + ".corrupt"
      os.makedirs(dest_root, exist_ok=True)
      n = 0
      while os.path.exists(dest := os.path.join(dest_root, f"{step}.{n}")):
        n += 1
      shutil.move(self.step_dir(step), dest)
    parallel.sync(f"checkpoint.quarantine.{step}")
    self._manager.reload()

  def latest_step(self) -> int | None:
    """The newest complete checkpoint's step, or None if there is none."""
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    """Steps of the complete checkpoints on disk, ascending."""
    return sorted(self._manager.all_steps())

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
    """Restores `(state, meta)` saved at `step` (and the data iterator's state, if any).

    Args:
      step: a step in `all_steps()`.
      abstract_state: the target: a pytree of `jax.ShapeDtypeStruct` (with
        shardings, e.g. from `jax.eval_shape` + sharding rules) or of concrete
        arrays, with the structure of the saved state. Arrays come back with
        the target's dtypes and shardings.

    Raises:
      FileNotFoundError: no checkpoint at `step`.
      CheckpointMismatchError: the saved tree differs from the target in
        structure or shapes; the message names the directory and the paths.
        Also when this checkpointer has a data iterator and the checkpoint holds
        no data-iterator state (it was written by a run that read no grain data).
      CheckpointCorruptError: its files differ from its digest, or orbax cannot
        read them; the message names the directory.
    """
    if step not in self._manager.all_steps():
      raise FileNotFoundError(
          f"no checkpoint for step {step} in {self.directory} "
          f"(steps there: {self.all_steps()})")
    self.verify(step)
    where = self.step_dir(step)
    items = dict(state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore())
    if self.data_iterator is not None:
      if not os.path.isdir(os.path.join(where, "data")):
        raise CheckpointMismatchError(
            f"checkpoint {where} holds no data-iterator state; "
            "it was written by a run that did not read its data through grain "
            "(config.data.source='memory'); resume it with that setting")
      items["data"] = self._grain.checkpoint.CheckpointRestore(self.data_iterator)
    try:
      saved = self._saved_leaves(step)
      target = _in_saved_layout(abstract_state, saved)
      items["state"] = ocp.args.StandardRestore(target)
      self._check_matches(step, saved, target)
      restored = self._manager.restore(step, args=ocp.args.Composite(**items))
    except CheckpointMismatchError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise CheckpointCorruptError(
          f"checkpoint {where} cannot be read: {type(e).__name__}: {str(e)[:300]}") from e
    state = jax.tree.map(_as_target_key, restored.state, target)
    if target is not abstract_state:  # Saved in the other layer layout: convert and place.
      state = _placed_like(layout.to_layout(state, layout.is_stacked(abstract_state)),
                           abstract_state)
    return state, dict(restored.meta or {})

  def _saved_leaves(self, step: int) -> dict[str, Any]:
    """The saved state's leaf metadata by dotted path."""
    metadata = self._manager.item_metadata(step)
    on_disk = getattr(metadata.get("state"), "tree", None)
    if on_disk is None:
      raise CheckpointMismatchError(f"checkpoint {self.step_dir(step)} holds no 'state' item")
    return _by_path(on_disk)

  def _check_matches(self, step: int, saved: dict[str, Any], abstract_state: Any) -> None:
    where = os.path.join(self.directory, str(step))
    target = _by_path(abstract_state)
    problems = []
    if missing := target.keys() - saved.keys():
      problems.append(f"in the target but not the checkpoint: {_listed(missing)}")
    if extra := saved.keys() - target.keys():
      problems.append(f"in the checkpoint but not the target: {_listed(extra)}")
    shapes = [f"{k} {tuple(saved[k].shape)} vs {_stored_shape(target[k])}"
              for k in sorted(saved.keys() & target.keys())
              if hasattr(saved[k], "shape")
              and tuple(saved[k].shape) != _stored_shape(target[k])]
    if shapes:
      problems.append(f"shapes differ (checkpoint vs target): {_listed(shapes)}")
    if problems:
      raise CheckpointMismatchError(
          f"checkpoint {where} does not match the state to restore: "
          + "; ".join(problems))

  def close(self) -> None:
    """Waits for pending work (saves, temp-dir cleanup) and releases resources."""
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
