"""Ahead-of-time compilation of every phase of an RL step for a TPU topology, without a TPU.

    for line in compile_phases(config, "v5e:2x4"): print(json.dumps(line))

With the `libtpu` wheel (`pip install -e '.[tpu]'`), `jax.experimental.topologies` describes the
devices of a TPU slice on any machine. The mesh is built from them and `config.mesh.shape`, every
argument is a `jax.ShapeDtypeStruct` carrying its sharding (no array is ever materialized), and
each phase is jitted exactly as the training loop jits it, then lowered and compiled by the TPU
compiler. Phases (`PHASES`):

  prefill       `models.prefill` of the B = rl.prompts_per_step prompts into a P + T cache.
  generate      the rollout engine of `sampling.engine` (`rl_jax.sampling.engines`): prefill,
                then the decode loop of the R = B * G rows (G = rl.group_size,
                T = sampling.max_new_tokens). 'stop' (the default) ends the loop once every
                row has ended; 'refill' decodes S = sampling.num_slots rows at a time and
                refills a slot when its row ends (its KV cache holds S rows, not R). The cost
                is counted for the worst case, every row to T: T - 1 decode steps of R rows,
                or ceil(R / S) * (T - 1) steps of S slots.
  ref_logprobs  the reference policy's log-prob pass over the R rows (`rl.num_minibatches`
                pieces, as `steps.rl_step` runs it).
  rl_step       `steps.rl_step` with the state donated (AdamW state from `rl.optim`).
  sft_step      `steps.sft_step` on sft.batch_size rows of P + T tokens, state donated.

P is `aot.prompt_len` (0: model.max_seq_len - T, the longest prompt a run allows).

One JSON line per phase: per-device argument / output / alias / temporary bytes from
`memory_analysis()`, `fits` (their sum less aliased bytes within the chip's HBM), XLA's peak of live
bytes (`peak_bytes`), FLOPs, HBM bytes and a roofline time. XLA's `cost_analysis()` counts a while
loop's body once, whatever its trip count, so the loops a phase runs are counted by compiling their
bodies as separate pieces and adding them `trip count - 1` more times (`xla_flops`, `xla_bytes`; the
raw numbers are `xla_flops_raw`, `xla_bytes_raw`). Loops inside a piece stay counted once, and a
Pallas kernel counts what it declares (`pl.CostEstimate`; the TPU log-prob kernels do), so
`model_flops_per_device` (matmul and causal-attention FLOPs of the phase, as `chips.sequence_flops`
counts them, over the devices) is given too and the roofline takes the larger of the two FLOP
counts. With `model.scan_layers` the decoder stack is such a loop: XLA counts one layer of it, so
`xla_flops` and `xla_bytes` are low by up to the layer count and the roofline rests on
`model_flops_per_device`.

The phases are compiled under the mesh as the context mesh (`jax.sharding.use_abstract_mesh`), as
the training loop runs under `jax.set_mesh`: the Pallas kernels then run in a `shard_map`, and the
sampler's cache gets its batch sharding.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import ml_collections

from rl_jax import chips, models, parallel, sampling
from rl_jax import experiment
from rl_jax.rl import logprobs
from rl_jax.sampling import engines
from rl_jax.tools.topology import topology_mesh
from rl_jax.train import rl_inputs
from rl_jax.train import steps as steps_lib
from rl_jax.train.hyper import hyper_from_config
from rl_jax.train_state import TrainState, make_optimizer
from rl_jax.types import Rollout, SFTBatch

PHASES = ("prefill", "generate", "ref_logprobs", "rl_step", "sft_step")


@dataclasses.dataclass(frozen=True)
class Shapes:
  """The static sizes of one RL step: B prompts x G samples, P prompt and T new tokens."""

  prompts: int
  group: int
  prompt_len: int
  new_tokens: int
  sft_batch: int

  @property
  def rows(self) -> int:
    return self.prompts * self.group


def shapes_from_config(config: ml_collections.ConfigDict, model_cfg: models.ModelConfig) -> Shapes:
  """B, G, P, T and the SFT batch from `config` (P: `aot.prompt_len`, 0 = the longest allowed)."""
  t = config.sampling.max_new_tokens
  p = config.aot.prompt_len or model_cfg.max_seq_len - t
  if p <= 0 or p + t > model_cfg.max_seq_len:
    raise ValueError(f"config.aot.prompt_len={config.aot.prompt_len} with sampling."
                     f"max_new_tokens={t} must give 0 < P and P + T <= model.max_seq_len="
                     f"{model_cfg.max_seq_len}")
  return Shapes(config.rl.prompts_per_step, config.rl.group_size, p, t, config.sft.batch_size)


def model_config(config: ml_collections.ConfigDict) -> models.ModelConfig:
  """`config.model` as the run builds it; vocab_size 0 takes `tokenizer.vocab_size`."""
  return experiment.model_config(config, config.tokenizer.vocab_size)


def _sds(tree, shardings):
  return jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)


def _batch(mesh, tree):
  """Abstract arrays with the loop's batch shardings (leading axis over ('data', 'fsdp'))."""
  def one(a):
    sharding = (parallel.batch_sharding(mesh, len(a.shape), a.shape[0]) if a.shape
                else parallel.replicated(mesh))
    return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)

  return jax.tree_util.tree_map(one, tree)


@dataclasses.dataclass
class _Phase:
  """A jitted function and its abstract arguments, plus the loop bodies to count again."""

  fn: Callable
  args: tuple
  # (jitted piece, its abstract args, extra times it runs beyond the once XLA counts).
  pieces: list = dataclasses.field(default_factory=list)
  model_flops: float = 0.0


class _Builder:
  """Abstract inputs and jitted functions of every phase for one config and mesh."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh):
    self.config, self.mesh = config, mesh
    self.cfg = model_config(config)
    self.shapes = shapes_from_config(config, self.cfg)
    self.hyper = hyper_from_config(config)
    self.strategy = sampling.Sampling(temperature=config.sampling.temperature,
                                      top_k=config.sampling.top_k, top_p=config.sampling.top_p)
    init = functools.partial(models.init_params, self.cfg)
    abstract = jax.eval_shape(init, jax.random.key(0))
    self.params_sh = parallel.tree_shardings(abstract, mesh)
    # The sampler's and the reference pass's parameters: the model's compute copy (param_dtype).
    self.params = _sds(abstract, self.params_sh)
    # The train state's master weights (config.train.master_dtype), as the loop keeps them; the
    # steps cast them to param_dtype once per update (models.cast_params).
    master_cfg = dataclasses.replace(self.cfg, param_dtype=config.train.master_dtype)
    master = jax.eval_shape(functools.partial(models.init_params, master_cfg), jax.random.key(0))
    self.master = _sds(master, parallel.tree_shardings(master, mesh))
    self.rng = jax.ShapeDtypeStruct((), jax.eval_shape(lambda: jax.random.key(0)).dtype,
                                    sharding=parallel.replicated(mesh))
    s = self.shapes
    prefill = s.prompts * _sequence_flops(self.cfg, 0, s.prompt_len, 1)
    decode = s.rows * _sequence_flops(self.cfg, s.prompt_len, s.new_tokens - 1, s.new_tokens - 1)
    # A log-prob pass over shared prompts does the work of `generate` (benchmarks.roofline).
    self.flops = {"prefill": prefill, "generate": prefill + decode, "logprob": prefill + decode}

  def _state(self, optim, steps: int):
    tx = make_optimizer(optim, steps)
    abstract = jax.eval_shape(functools.partial(TrainState.create, tx=tx), self.master)
    shardings = parallel.tree_shardings(abstract, self.mesh)
    return _sds(abstract, shardings), shardings

  def _prompts(self, rows: int):
    p = self.shapes.prompt_len
    return _batch(self.mesh, (jax.ShapeDtypeStruct((rows, p), jnp.int32),
                              jax.ShapeDtypeStruct((rows, p), jnp.bool_)))

  def _rollout(self) -> Rollout:
    r, p, t = self.shapes.rows, self.shapes.prompt_len, self.shapes.new_tokens
    sd = jax.ShapeDtypeStruct
    return _batch(self.mesh, Rollout(
        prompt_tokens=sd((r, p), jnp.int32), prompt_mask=sd((r, p), jnp.bool_),
        tokens=sd((r, t), jnp.int32), mask=sd((r, t), jnp.bool_), logp=sd((r, t), jnp.float32),
        group=sd((r,), jnp.int32), valid=sd((r,), jnp.bool_)))

  def prefill(self) -> _Phase:
    s, cfg = self.shapes, self.cfg

    def fn(params, prompt, prompt_mask):
      cache = models.init_cache(cfg, prompt.shape[0], s.prompt_len + s.new_tokens)
      return models.prefill(cfg, params, cache, prompt, prompt_mask)

    rows = s.prompts
    return _Phase(jax.jit(fn), (self.params, *self._prompts(rows)),
                  model_flops=self.flops["prefill"])

  def generate(self) -> _Phase:
    """The rollout as `config.sampling.engine` runs it ('scan' | 'stop' | 'refill')."""
    s, cfg = self.shapes, self.cfg
    fn = functools.partial(engines.from_config(self.config), cfg=cfg, strategy=self.strategy,
                           max_new_tokens=s.new_tokens, eos_id=1, pad_id=0, num_samples=s.group)
    phase = _Phase(jax.jit(fn), (self.params, *self._prompts(s.prompts), self.rng),
                   model_flops=self.flops["generate"])
    slots = self.decode_slots
    # Decode steps of the worst case (every row runs to T); XLA counts the loop body once.
    # scan / stop: T - 1 steps of all R rows. refill: S slots serve the R requests in
    # ceil(R / S) waves of T - 1 steps (the refill copies of prompt rows are not counted).
    steps = math.ceil(s.rows / slots) * (s.new_tokens - 1)
    if steps > 1:
      phase.pieces.append((*self._decode_piece(slots), steps - 1))
    return phase

  @property
  def decode_slots(self) -> int:
    """Rows one decode step of the rollout runs: R, or refill's S = sampling.num_slots."""
    return engines.decode_rows(self.config.sampling.engine,
                               engines.options_from_config(self.config), self.shapes.rows)

  def _decode_piece(self, rows: int):
    s, cfg, strategy = self.shapes, self.cfg, self.strategy
    cache = jax.eval_shape(functools.partial(models.init_cache, cfg, rows,
                                             s.prompt_len + s.new_tokens))
    cache = _batch(self.mesh, cache)
    tok = _batch(self.mesh, jax.ShapeDtypeStruct((rows,), jnp.int32))

    def step(params, cache, tok, rng):
      logits, cache = models.decode_step(cfg, params, cache, tok)
      return strategy.draw(logits, rng), cache

    return jax.jit(step, donate_argnums=1), (self.params, cache, tok, self.rng)

  def _logprob_fn(self):
    return functools.partial(logprobs.completion_logprobs, self.cfg,
                             temperature=self.hyper.temperature,
                             group_size=self.hyper.prompt_group)

  def ref_logprobs(self) -> _Phase:
    hyper, lp = self.hyper, self._logprob_fn()

    def fn(params, rollout):
      seqs = (rollout.prompt_tokens, rollout.prompt_mask, rollout.tokens, rollout.mask)
      micro = rl_inputs.split_rows(seqs, hyper.num_minibatches, hyper.prompt_group)
      out = jax.lax.map(lambda mb: lp(params, *mb), micro)
      return rl_inputs.merge_rows(out, hyper.prompt_group)

    rollout = self._rollout()
    phase = _Phase(jax.jit(fn), (self.params, rollout), model_flops=self.flops["logprob"])
    if hyper.num_minibatches > 1:
      phase.pieces.append((*self._micro_logprob_piece(), hyper.num_minibatches - 1))
    return phase

  def _micro(self):
    """Abstract micro-batch of the R / num_minibatches rows `rl_step` scans over."""
    h = self.hyper
    r = self._rollout()
    rewards = jax.ShapeDtypeStruct((self.shapes.rows, len(self.config.rl.rewards)), jnp.float32)
    adv = jax.eval_shape(lambda x, ro: rl_inputs.advantages(x, ro, h)[0], rewards, r)
    rows = dict(prompt_tokens=r.prompt_tokens, prompt_mask=r.prompt_mask, tokens=r.tokens,
                mask=r.mask, loss_mask=r.mask, good=r.mask, old_logp=r.logp, adv=adv)
    if h.kl_coef and not h.kl_in_reward:
      rows["ref_logp"] = r.logp
    if h.tis_cap:
      rows["tis_weight"] = r.logp
    n = self.shapes.rows // h.num_minibatches
    return _batch(self.mesh, {k: jax.ShapeDtypeStruct((n,) + v.shape[1:], v.dtype)
                              for k, v in rows.items()})

  def _micro_logprob_piece(self):
    lp, mb = self._logprob_fn(), self._micro()
    fn = lambda params, mb: lp(params, mb["prompt_tokens"], mb["prompt_mask"],  # noqa: E731
                                mb["tokens"], mb["mask"])
    return jax.jit(fn), (self.params, mb)

  def rl_step(self) -> _Phase:
    h, rl = self.hyper, self.config.rl
    state, state_sh = self._state(rl.optim, rl.steps * rl.num_iterations)
    rollout = self._rollout()
    rewards = _batch(self.mesh, jax.ShapeDtypeStruct((self.shapes.rows, len(rl.rewards)),
                                                     jnp.float32))
    fn = jax.jit(functools.partial(steps_lib.rl_step, model_cfg=self.cfg, hyper=h),
                 out_shardings=(state_sh, parallel.replicated(self.mesh)), donate_argnums=0)
    passes = (1 if h.kl_coef else 0) + (1 if h.tis_cap else 0)
    phase = _Phase(fn, (state, self.master, rollout, rewards),  # reference: the SFT master weights
                   model_flops=self.flops["logprob"] * (3 * h.num_iterations + passes))
    updates = h.num_iterations * h.num_minibatches
    if updates > 1:
      phase.pieces.append((*self._micro_grad_piece(), updates - 1))
    if passes and h.num_minibatches > 1:
      phase.pieces.append((*self._micro_logprob_piece(), passes * (h.num_minibatches - 1)))
    return phase

  def _micro_grad_piece(self):
    # The loss `rl_step` differentiates per micro-batch (with whatever remat / precision the
    # model config and hyper carry), so the piece is the same program as the scan's body.
    norms = {k: jax.ShapeDtypeStruct((), jnp.int32, sharding=parallel.replicated(self.mesh))
             for k in ("num_tokens", "num_seqs", "num_good")}
    loss = functools.partial(steps_lib.micro_loss, model_cfg=self.cfg,
                             hyper=self.hyper)
    fn = jax.jit(jax.value_and_grad(loss, has_aux=True))
    return fn, (self.params, self._micro(), norms)

  def sft_step(self) -> _Phase:
    s, sft = self.shapes, self.config.sft
    state, state_sh = self._state(sft.optim, sft.steps)
    sd = jax.ShapeDtypeStruct
    b, p, t = s.sft_batch, s.prompt_len, s.new_tokens
    batch = _batch(self.mesh, SFTBatch(sd((b, p), jnp.int32), sd((b, p), jnp.bool_),
                                       sd((b, t), jnp.int32), sd((b, t), jnp.bool_)))
    fn = jax.jit(functools.partial(steps_lib.sft_step, model_cfg=self.cfg),
                 out_shardings=(state_sh, parallel.replicated(self.mesh)), donate_argnums=0)
    # Each of the b rows runs its own prompt: forward + backward (3x) of b sequences.
    return _Phase(fn, (state, batch), model_flops=3 * b * _sequence_flops(self.cfg, 0, p + t, t))


def _sequence_flops(cfg, start: int, length: int, unembed: int) -> float:
  """Model FLOPs of one row (`chips.sequence_flops`)."""
  return float(chips.sequence_flops(cfg, start, length, unembed))


def _cost(compiled) -> tuple[float, float]:
  ca = compiled.cost_analysis()
  if isinstance(ca, (list, tuple)):
    ca = ca[0] if ca else {}
  ca = ca or {}
  return float(ca.get("flops", 0.0)), float(ca.get("bytes accessed", 0.0))


def _compile(fn, args):
  return fn.trace(*args).lower().compile()


def compile_phase(name: str, phase: _Phase, chip: chips.Chip) -> dict:
  """Compiles one phase (and its loop-body pieces); returns its report line."""
  t0 = time.perf_counter()
  try:
    compiled = _compile(phase.fn, phase.args)
  except jax.errors.JaxRuntimeError as e:
    if "RESOURCE_EXHAUSTED" not in str(e):
      raise
    # The TPU compiler refuses programs whose buffers exceed the HBM: a definite "does not fit".
    return {"phase": name, "fits": False, "hbm_bytes": int(chip.hbm_bytes),
            "error": str(e).splitlines()[0][:400],
            "compile_seconds": round(time.perf_counter() - t0, 1)}
  seconds = time.perf_counter() - t0
  mem = compiled.memory_analysis()
  flops_raw, bytes_raw = _cost(compiled)
  flops, hbm = flops_raw, bytes_raw
  for fn, args, extra in phase.pieces:
    f, b = _cost(_compile(fn, args))
    flops += extra * f
    hbm += extra * b
  total, peak = chips.per_device_bytes(mem), getattr(mem, "peak_memory_in_bytes", None)
  return {
      "phase": name,
      "fits": total <= chip.hbm_bytes,
      "per_device_total_bytes": int(total),
      "hbm_bytes": int(chip.hbm_bytes),
      "argument_bytes": int(mem.argument_size_in_bytes),
      "output_bytes": int(mem.output_size_in_bytes),
      "alias_bytes": int(mem.alias_size_in_bytes),
      "temp_bytes": int(mem.temp_size_in_bytes),
      "peak_bytes": peak if peak is None else int(peak),
      "code_bytes": int(mem.generated_code_size_in_bytes),
      "xla_flops": flops,
      "xla_bytes": hbm,
      "xla_flops_raw": flops_raw,
      "xla_bytes_raw": bytes_raw,
      "model_flops_per_device": phase.model_flops,
      "roofline_seconds": chip.roofline_seconds(max(flops, phase.model_flops), hbm),
      "compile_seconds": round(seconds, 1),
  }


def compile_phases(config: ml_collections.ConfigDict, topology: str,
                   phases: Sequence[str] = PHASES) -> Iterator[dict]:
  """Compiles `phases` of `config` for the TPU `topology`; yields one report dict per phase.

  The first dict (phase 'setup') describes the mesh, chip, model and shapes.

  Raises:
    ValueError: an unknown phase or topology, or a mesh that does not divide its devices.
  """
  unknown = [p for p in phases if p not in PHASES]
  if unknown:
    raise ValueError(f"unknown phase(s) {unknown}; expected some of {list(PHASES)}")
  mesh = topology_mesh(topology, tuple(config.mesh.shape))
  # The abstract mesh as context (as `jax.set_mesh` gives the training loop), so that jitted code
  # can constrain its buffers (`parallel.shard_batch`); the concrete one would run eager ops on
  # the topology's devices, which exist only for compiling.
  with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
    yield from _compile_all(config, mesh, topology, phases)


def _compile_all(config, mesh, topology, phases):
  per_chip = len({getattr(d, "core_on_chip", 0) for d in mesh.devices.flat})
  chip = chips.chip_of_topology(topology).per_device(per_chip)
  builder = _Builder(config, mesh)
  b, s = builder, builder.shapes
  n_dev = mesh.devices.size
  yield {"phase": "setup", "topology": topology, "devices": int(n_dev),
         "processes": len({d.process_index for d in mesh.devices.flat}),
         "mesh": dict(mesh.shape), "chip": chip.name, "devices_per_chip": per_chip,
         "params": models.num_params(b.params), "dtype": b.cfg.dtype,
         "param_dtype": b.cfg.param_dtype, "prompts": s.prompts, "group": s.group,
         "prompt_len": s.prompt_len, "new_tokens": s.new_tokens, "sft_batch": s.sft_batch,
         "num_minibatches": b.hyper.num_minibatches, "engine": config.sampling.engine,
         "decode_slots": b.decode_slots}
  for name in phases:
    phase = getattr(b, name)()
    phase.model_flops /= n_dev  # The model's FLOPs spread over the devices.
    yield compile_phase(name, phase, chip)
