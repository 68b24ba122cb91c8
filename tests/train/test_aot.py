"""experiments.aot: every phase of a tiny config compiles for a TPU v5e 2x2 slice (libtpu, no TPU),
the report's numbers are consistent, and bad topologies / meshes get clear errors."""

from __future__ import annotations

import pytest

from experiments.configs import scale
from rl_jax import chips
from rl_jax.tools import aot
from rl_jax.tools import topology


@pytest.fixture(scope="module")
def tiny_report():
  config = scale.get_config("tiny")
  return {line["phase"]: line for line in aot.compile_phases(config, "v5e:2x2")}


def test_every_phase_compiles_for_v5e_2x2(tiny_report):
  setup = tiny_report["setup"]
  assert setup["devices"] == 4 and setup["mesh"] == {"data": 1, "fsdp": 4, "tensor": 1}
  assert setup["chip"] == "v5e" and setup["prompt_len"] == 16 and setup["new_tokens"] == 8
  hbm = chips.CHIPS["v5e"].hbm_bytes
  for name in aot.PHASES:
    line = tiny_report[name]
    assert line["fits"] is True and line["hbm_bytes"] == hbm
    total = (line["argument_bytes"] + line["output_bytes"] - line["alias_bytes"]
             + line["temp_bytes"] + line["code_bytes"])
    assert line["per_device_total_bytes"] == total
    # XLA's peak of live bytes holds the arguments and never exceeds what is allocated.
    assert line["argument_bytes"] <= line["peak_bytes"] <= total
    assert line["argument_bytes"] > 0 and line["xla_flops"] > 0 and line["xla_bytes"] > 0
    chip = chips.CHIPS["v5e"]
    want = max(max(line["xla_flops"], line["model_flops_per_device"]) / chip.peak_bf16_flops,
               line["xla_bytes"] / chip.hbm_bandwidth)
    assert line["roofline_seconds"] == pytest.approx(want)
  # The state is donated: its buffers alias the new state's.
  assert tiny_report["rl_step"]["alias_bytes"] > 0 and tiny_report["sft_step"]["alias_bytes"] > 0


def test_loop_bodies_are_counted_by_their_trip_counts(tiny_report):
  # XLA counts a while body once: the decode scan (T - 1 = 7 steps) and the 2 micro-batches of
  # the log-prob pass and the update are added from their separately compiled bodies.
  for name in ("generate", "ref_logprobs", "rl_step"):
    line = tiny_report[name]
    assert line["xla_flops"] > 1.5 * line["xla_flops_raw"]
    assert line["xla_bytes"] > line["xla_bytes_raw"]
  for name in ("prefill", "sft_step"):  # No loop of their own.
    assert tiny_report[name]["xla_flops"] == tiny_report[name]["xla_flops_raw"]
  # rl_step: forward + backward of every row plus the reference pass, about 4x the log-prob pass.
  ratio = tiny_report["rl_step"]["xla_flops"] / tiny_report["ref_logprobs"]["xla_flops"]
  assert 3.0 < ratio < 6.0


def test_unknown_topology_and_bad_mesh_errors():
  config = scale.get_config("tiny")
  with pytest.raises(ValueError, match="unknown TPU generation 'v9x'"):
    next(aot.compile_phases(config, "v9x:2x2"))
  with pytest.raises(ValueError, match="'v5e:3x7' is not a TPU topology libtpu knows"):
    topology.topology_devices("v5e:3x7")
  with pytest.raises(ValueError, match=r"mesh.shape=\(3, 1, 1\) does not divide the 4 devices"):
    topology.topology_mesh("v5e:2x2", (3, 1, 1))
  with pytest.raises(ValueError, match=r"mesh.shape=\(1, 2, 1\) does not divide the 4 devices"):
    topology.topology_mesh("v5e:2x2", (1, 2, 1))  # Uses 2 of the 4 devices.
  with pytest.raises(ValueError, match="unknown phase"):
    next(aot.compile_phases(config, "v5e:2x2", ["decode_only"]))
  assert dict(topology.topology_mesh("v5e:2x2", (2, -1, 1)).shape) == {"data": 2, "fsdp": 2,
                                                                   "tensor": 1}
  # A config's one-device default mesh is spread over the topology's chips on fsdp.
  assert dict(topology.topology_mesh("v5e:2x2", (1, 1, 1)).shape) == {"data": 1, "fsdp": 4,
                                                                  "tensor": 1}


def test_chip_table():
  v5e = chips.chip_of_topology("v5e:2x4")
  assert v5e.hbm_bytes == 16 * 2**30
  # 197 TFLOP at 197 TFLOP/s is 1 s; 819 GB at 819 GB/s is 1 s: the roofline is the larger term.
  assert v5e.roofline_seconds(197e12, 819e9 / 2) == pytest.approx(1.0)
  assert v5e.roofline_seconds(197e12 / 4, 819e9) == pytest.approx(1.0)
  half = chips.CHIPS["v4"].per_device(2)
  assert half.hbm_bytes == 16 * 2**30 and half.peak_bf16_flops == 137.5e12
  assert set(chips.CHIPS) >= {"v4", "v5e", "v5p", "v6e"}


def test_train_state_holds_master_weights_in_master_dtype():
  """As in the loop: the sampler and reference pass get the param_dtype copy, the train state
  (params and AdamW moments) keeps config.train.master_dtype (float32 master weights)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  config = scale.get_config("tiny")
  with config.unlocked():
    config.model.param_dtype = "bfloat16"
  builder = aot._Builder(config, topology.topology_mesh("v5e:2x2", (1, -1, 1)))  # pylint: disable=protected-access
  sampler_dtypes = {x.dtype for x in jax.tree.leaves(builder.params)}
  assert sampler_dtypes == {jnp.dtype(jnp.bfloat16)}
  state, _ = builder._state(config.rl.optim, 1)  # pylint: disable=protected-access
  assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
  rl = builder.rl_step()
  assert {x.dtype for x in jax.tree.leaves(rl.args[1])} == {jnp.dtype(jnp.float32)}  # reference


def test_refill_rollout_compiles_with_its_slots_cache():
  """sampling.engine='refill' compiles for TPU: S = 4 slots hold the KV cache of 4 rows, not of
  all R = 16, and the worst case counts ceil(R / S) waves of T - 1 decode steps of S slots.
  (Its own compiles, not the module fixture's: a module fixture is built once per xdist worker.)"""
  lines = {}
  for engine, slots in (("stop", 0), ("refill", 4)):
    config = scale.get_config("tiny")
    config.sampling.engine = engine
    config.sampling.num_slots = slots
    lines[engine] = list(aot.compile_phases(config, "v5e:2x2", ["generate"]))
  assert lines["stop"][0]["engine"] == "stop" and lines["stop"][0]["decode_slots"] == 16
  setup, line, stop = lines["refill"][0], lines["refill"][1], lines["stop"][1]
  assert setup["engine"] == "refill" and setup["decode_slots"] == 4
  assert line["fits"] is True and line["xla_flops"] > 1.5 * line["xla_flops_raw"]
  assert line["model_flops_per_device"] == stop["model_flops_per_device"]
  # Same decode work in the worst case (28 steps of 4 slots vs 7 of 16 rows), to within what the
  # refill's own ops add.
  assert 0.5 < line["xla_flops"] / stop["xla_flops"] < 2.0
