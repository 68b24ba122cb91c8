"""The pure parts of benchmarks/peers.py and benchmarks/roofline.py (no peers installed)."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import _peer_common as common
from benchmarks import peers, roofline
from rl_jax import chips


def test_parse_shape():
  assert peers.parse_shape("8x4x32") == (8, 4, 32)
  assert peers.parse_shape("16X8X128") == (16, 8, 128)
  for bad in ("8x4", "8x4x32x1", "8xax32", "0x4x32", ""):
    with pytest.raises(ValueError):
      peers.parse_shape(bad)


def test_parse_args_defaults_and_lists(tmp_path):
  args = peers.parse_args(["--cache_dir", str(tmp_path)])
  assert args.models == ["tiny", "smollm2"]
  assert args.shapes == ["8x4x32", "16x8x128"]
  assert args.systems == ["rl_jax", "tunix", "trl"]
  assert args.threads == 1 and args.steps == 2
  assert args.smollm2_dir == str(tmp_path / "smollm2")
  args = peers.parse_args(["--models=smollm2", "--shapes=2x2x4", "--systems=trl,rl_jax",
                           "--smollm2_dir=/x", "--threads=2"])
  assert args.models == ["smollm2"] and args.shapes == ["2x2x4"]
  assert args.systems == ["trl", "rl_jax"] and args.smollm2_dir == "/x" and args.threads == 2


@pytest.mark.parametrize("flag", ["--models=gpt5", "--systems=verl", "--shapes=8x4",
                                  "--steps=0", "--threads=0", "--models="])
def test_parse_args_rejects(flag):
  with pytest.raises(SystemExit):
    peers.parse_args([flag])


def test_thread_env():
  env = peers.thread_env(3, base={"PATH": "/bin"})
  assert env["OMP_NUM_THREADS"] == "3" and env["MKL_NUM_THREADS"] == "3"
  # Every token an `--xla_` flag: XLA stops reading XLA_FLAGS at the first that is not one.
  assert all(t.startswith("--xla_") for t in env["XLA_FLAGS"].split()), env["XLA_FLAGS"]
  assert "--xla_cpu_multi_thread_eigen=true" in env["XLA_FLAGS"]
  assert "--xla_cpu_multi_thread_eigen=false" in peers.thread_env(1, base={})["XLA_FLAGS"]
  assert env["PATH"] == "/bin" and env["PYTHONPATH"].startswith(peers.REPO)
  # The caller's other XLA flags stay; its thread flag, device count and any bare token do not.
  kept = peers.thread_env(1, base={"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=true "
                                                "--xla_force_host_platform_device_count=8 "
                                                "--xla_cpu_use_fusion_emitters=false stray=1"})
  assert kept["XLA_FLAGS"] == ("--xla_cpu_use_fusion_emitters=false "
                               "--xla_cpu_multi_thread_eigen=false")


def test_parse_result_takes_last_line():
  out = "noise\nPEER_RESULT {\"a\": 1}\nmore\nPEER_RESULT {\"a\": 2}\ntail\n"
  assert peers.parse_result(out) == {"a": 2}
  assert peers.parse_result("no result here") is None


def test_ratio_handles_nulls():
  assert peers.ratio(1.0, 4.0) == 0.25
  assert peers.ratio(None, 4.0) is None
  assert peers.ratio(1.0, None) is None
  assert peers.ratio(1.0, 0) is None


def _run(tps, step, rss, first=1.0):
  return {"gen_tokens_per_s": tps, "step_s": step, "peak_rss_bytes": rss, "first_step_s": first}


def test_ratios_and_goals():
  runs = {"rl_jax": _run(300.0, 2.0, 1000, 10.0), "tunix": _run(100.0, 8.0, 4000, 5.0),
          "trl": _run(150.0, 5.0, 2000, 1.0)}
  r = peers.ratios(runs)
  assert r["rl_jax/tunix"] == {"gen_tokens_per_s": 3.0, "step_s": 0.25, "first_step_s": 2.0,
                               "peak_rss_bytes": 0.25}
  assert r["rl_jax/trl"]["step_s"] == 0.4 and r["rl_jax/trl"]["first_step_s"] == 10.0
  g = peers.goals(runs)
  assert g["gen_vs_tunix"] == 3.0 and g["gen_goal_met"] is True
  # The faster peer is TRL (5 s): 2 / 5 = 0.4 <= 0.5.
  assert g["step_vs_faster_peer"] == 0.4 and g["step_goal_met"] is True
  assert g["rss_vs_trl"] == 0.5 and g["rss_goal_met"] is True
  runs["rl_jax"] = _run(150.0, 3.0, 3000)
  g = peers.goals(runs)
  assert (g["gen_goal_met"], g["step_goal_met"], g["rss_goal_met"]) == (False, False, False)


def test_ratios_and_goals_with_failed_peer():
  runs = {"rl_jax": _run(300.0, 2.0, 1000), "tunix": {"error": "timeout after 900 s"},
          "trl": None}
  r = peers.ratios(runs)
  assert all(v is None for v in r["rl_jax/tunix"].values())
  assert all(v is None for v in r["rl_jax/trl"].values())
  g = peers.goals(runs)
  assert g["gen_goal_met"] is None and g["step_goal_met"] is None and g["rss_goal_met"] is None
  # One peer left: the step goal compares against it.
  runs["trl"] = _run(100.0, 3.0, 500)
  g = peers.goals(runs)
  assert g["step_vs_faster_peer"] == pytest.approx(0.667) and g["step_goal_met"] is False
  assert g["rss_goal_met"] is False


def test_summarize_excludes_first_step():
  recs = [dict(step_s=10.0, gen_s=5.0, gen_tokens=64, ref_s=1.0),
          dict(step_s=2.0, gen_s=1.0, gen_tokens=64, ref_s=0.5),
          dict(step_s=4.0, gen_s=3.0, gen_tokens=32, ref_s=0.7)]
  s = common.summarize(recs, batch=2, group=2, tokens=16)
  assert s["first_step_s"] == 10.0 and s["step_s"] == 3.0 and s["gen_s"] == 2.0
  assert s["gen_tokens_per_s"] == 24.0  # (64 + 32) / (1 + 3).
  assert s["mean_completion_len"] == 12.0  # 96 tokens / 2 steps / 4 rows.
  assert s["phases_s"] == {"gen_s": 2.0, "ref_s": 0.6} and s["timed_steps"] == 2


def test_reward_fn():
  assert common.reward_fn(["eee", "", "abcd", "hello"]) == [1.0, 0.0, 0.0, 0.2]


def test_prompts_are_distinct_and_deterministic():
  assert common.prompts(16) == common.prompts(16)
  assert len(set(common.prompts(16))) == 16


# Hand count for a toy config: 1 layer, d=4, 2 heads of dim 2, 1 KV head, ffn 6, vocab 10.
TOY = dict(vocab_size=10, d_model=4, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=2, d_ff=6)


def test_layer_matmul_params_hand_count():
  # q 4*4 + k 4*2 + v 4*2 + o 4*4 + mlp 3*4*6 = 16 + 8 + 8 + 16 + 72 = 120.
  assert chips.layer_matmul_params(TOY) == 120


def test_sequence_flops_hand_count():
  # 3 tokens at positions 0..2: weights 2*120*3 = 720; attention keys 1+2+3 = 6, each
  # 4*heads*hd = 16 FLOPs: 96; unembedding of 2 tokens 2*4*10*2 = 160.
  assert chips.sequence_flops(TOY, 0, 3, 2) == 720 + 96 + 160
  # One token at position 5 attends to 6 keys.
  assert chips.sequence_flops(TOY, 5, 1, 1) == 240 + 16 * 6 + 80


def test_phase_flops_hand_count():
  # B=1, G=2, T=2, P=3: the prompt is prefilled once, sequence_flops(0, 3, 1) = 720 + 96 + 80
  # = 896; one decode token per row at position 3: 240 + 16*4 + 80 = 384. Two rows: 896 + 2*384.
  f = roofline.phase_flops(TOY, batch=1, group=2, tokens=2, prompt_len=3)
  assert f["generate"] == 896 + 2 * 384
  # Log-probs with the prompt shared by the group: the same work as generating.
  assert f["logprob"] == f["generate"]
  assert f["rl_step"] == 4 * f["logprob"]


def test_flops_accept_model_config():
  from rl_jax import models  # pylint: disable=g-import-not-at-top
  cfg = models.ModelConfig(**roofline.MODEL_SHAPES["smollm2"])
  assert chips.layer_matmul_params(cfg) == chips.layer_matmul_params(
      roofline.MODEL_SHAPES["smollm2"])
  # SmolLM2-135M: ~134.5M parameters = blocks + norms + the tied [V, D] embedding.
  total = chips.layer_matmul_params(cfg) + 49152 * 576
  assert 130e6 < total < 136e6


def test_roofline_fractions():
  out = roofline.roofline(1e9, {"a": 100, "b": 10}, {"a": 1e-6, "b": 1e-7})
  assert out["a"]["flops_per_s"] == 100_000_000 and out["a"]["fraction_of_roof"] == 0.1
  assert out["b"]["fraction_of_roof"] == 0.1


def test_roofline_parse_args():
  args = roofline.parse_args(["--models=tiny", "--shapes=2x2x4,4x2x8"])
  assert args.models == ["tiny"] and args.shapes == [("2x2x4", (2, 2, 4)), ("4x2x8", (4, 2, 8))]
  with pytest.raises(SystemExit):
    roofline.parse_args(["--models=huge"])
  with pytest.raises(SystemExit):
    roofline.parse_args(["--shapes=2x2"])
  assert isinstance(args, argparse.Namespace)


def test_rl_jax_cache_dir_off_cold_warm(tmp_path):
  args = peers.parse_args(["--models=smollm2", "--shapes=2x2x4"])
  assert args.rl_jax_cache_dir == ""  # Off unless asked for.
  cmd = peers.worker_cmd(args, "rl_jax", "/m", "2x2x4", "/w")
  assert cmd[cmd.index("--compile_cache_dir") + 1] == ""
  assert cmd[cmd.index("--batch") + 1: cmd.index("--batch") + 6:2] == ["2", "2", "4"]
  assert "--compile_cache_dir" not in peers.worker_cmd(args, "trl", "/m", "2x2x4", "/w")
  assert peers.cache_state("") == {"state": "off", "files": 0}
  cache = tmp_path / "jax_cache"
  args = peers.parse_args([f"--rl_jax_cache_dir={cache}"])
  cmd = peers.worker_cmd(args, "rl_jax", "/m", "8x4x32", "/w")
  assert cmd[cmd.index("--compile_cache_dir") + 1] == str(cache)
  assert common.worker_args(cmd[3:]).compile_cache_dir == str(cache)
  assert peers.cache_state(str(cache)) == {"state": "cold", "files": 0}  # Missing.
  cache.mkdir()
  assert peers.cache_state(str(cache)) == {"state": "cold", "files": 0}  # Empty.
  (cache / "jit_step-abc-cache").write_bytes(b"x")
  (cache / "sub").mkdir()
  (cache / "sub" / "entry").write_bytes(b"y")
  assert peers.cache_state(str(cache)) == {"state": "warm", "files": 2}
