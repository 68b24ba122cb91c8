"""`config.init_from`: start RL from another run's final SFT checkpoint instead of running SFT.

A sweep of RL variants then shares one SFT (`experiments/sweeps/launch.py` runs it first). The
source work dir must come from the same task, seed, tokenizer and model settings: its tokenizer
is reused and checked, and its checkpoint must match this run's model.
"""

from __future__ import annotations

import functools
import os
import shutil

import jax

from rl_jax import models, parallel, tokenizers
from rl_jax import workdir as workdir_lib
from rl_jax.checkpoint import Checkpointer
from rl_jax.experiment import Experiment
from rl_jax.train import phases
from rl_jax.train_state import TrainState, make_optimizer


def _sft_dir(source: str) -> str:
  return workdir_lib.checkpoint_dir(source, "sft")


def _tokenizer_files(workdir: str) -> tuple[str, str]:
  d = os.path.join(workdir, "tokenizer")
  return os.path.join(d, tokenizers.MODEL_FILE), os.path.join(d, tokenizers.SIDECAR_FILE)


def _read(path: str) -> bytes:
  with open(path, "rb") as f:
    return f.read()


def prepare(source: str, workdir: str) -> None:
  """Before `experiment.build`: checks that `source` has SFT checkpoints and copies its tokenizer
  into `workdir` (so `build` loads it instead of training one).

  Raises:
    FileNotFoundError: naming the missing checkpoint directory or tokenizer file.
  """
  if not os.path.isdir(_sft_dir(source)):
    raise FileNotFoundError(f"config.init_from={source!r}: no SFT checkpoint directory "
                            f"{_sft_dir(source)} (run the SFT phase in that work dir first)")
  for src, dst in zip(_tokenizer_files(source), _tokenizer_files(workdir)):
    if not os.path.exists(src):
      raise FileNotFoundError(f"config.init_from={source!r}: no tokenizer file {src}")
    if not os.path.exists(dst):
      os.makedirs(os.path.dirname(dst), exist_ok=True)
      shutil.copyfile(src, dst)


def check_same_data(source: str, workdir: str) -> None:
  """After `build`: the tokenizer sidecars (a hash of the settings and the training corpus) must
  be equal, or the source was trained on other data (another seed or task)."""
  if _read(_tokenizer_files(source)[1]) != _read(_tokenizer_files(workdir)[1]):
    raise ValueError(f"config.init_from={source!r} was trained on a different task, seed or "
                     f"tokenizer config than this run; its SFT checkpoint does not apply")


def load_sft(exp: Experiment, source: str) -> phases.PhaseResult:
  """The final SFT parameters of `source`, placed with this run's shardings.

  The newest checkpoint must be at step `config.sft.steps` (the source's final step);
  `train_seconds` is the source's SFT time.

  Raises:
    FileNotFoundError: `source` has no complete SFT checkpoint (the message names the path).
    ValueError: its newest SFT checkpoint is not at step `config.sft.steps`.
    checkpoint.CheckpointMismatchError: it holds a different model.
  """
  directory = _sft_dir(source)
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"config.init_from={source!r}: no SFT checkpoint directory "
                            f"{directory} (run the SFT phase in that work dir first)")
  cfg = exp.config.sft
  with Checkpointer(directory, save_every=1) as ckpt:  # Read only: nothing is saved.
    latest = ckpt.latest_step()
    if latest is None:
      raise FileNotFoundError(f"config.init_from={source!r}: {directory} holds no complete "
                              f"checkpoint")
    if latest != cfg.steps:
      raise ValueError(f"config.init_from={source!r}: its newest SFT checkpoint is step "
                       f"{latest}, expected the final step config.sft.steps={cfg.steps}")
    init = functools.partial(models.init_params, exp.master_cfg)
    create = functools.partial(TrainState.create, tx=make_optimizer(cfg.optim, cfg.steps))
    abstract = jax.eval_shape(create, jax.eval_shape(init, exp.root_key()))
    shardings = parallel.tree_shardings(abstract, exp.mesh)
    target = jax.tree_util.tree_map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
    state, meta = ckpt.restore(latest, target)
  return phases.PhaseResult(state.params, float(meta.get("train_seconds", 0.0)), latest)
