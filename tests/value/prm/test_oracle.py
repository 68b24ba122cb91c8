"""config.rl.process_reward='oracle': PAV with a perfect prover, from the ladder's step checker,
on hand-worked scratchpads of 17 + 8 - 5 (running totals 25, 20)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from experiments.configs import ladder as ladder_config
from rl_jax.data import ladder
from rl_jax.train import config_check, rl_inputs
from rl_jax.train import steps as steps_lib
from rl_jax.types import Rollout
from rl_jax.value.prm import oracle, process

TERMS = [17, 8, -5]
# text -> (progress per step (line), reward)
WORKED = {
    "17+8=25\n25-5=20\n20": ([0, 0, 0], 1.0),     # every step and the answer right
    "17+8=35\n35-5=30\n30": ([-1, 0, 0], 0.0),    # step 0 wrong (a dropped carry)
    "17+8=25\n25-5=30\n30": ([0, -1, 0], 0.0),    # step 1 wrong
    "17+8=25\n25-5=20\n21": ([0, 0, -1], 0.0),    # steps right, answer wrong
    "17+8=35\n35-5=20\n20": ([-1, 0, 0], 1.0),    # right answer through a wrong step
    "17+8=25\n20": ([0, -1], 1.0),                # step 1 skipped: the answer line is wrong
    "17+8=25\n25-5=20": ([0, -1], 0.0),           # cut before the answer: the last step
    "": ([], 0.0),                                # no step: nothing
}


@pytest.mark.parametrize("text", list(WORKED))
def test_progress_of_hand_worked_scratchpads(text):
  want, reward = WORKED[text]
  check = ladder.check_scratchpad(text, TERMS, sum(TERMS))
  assert check.reward == reward
  h = len([line for line in text.split("\n") if line])
  prog = oracle.progress([check], np.array([h]), max_steps=4)
  assert prog[0].tolist() == want + [0.0] * (4 - len(want))
  assert oracle.progress([check], np.array([h]), max_steps=1)[0].tolist() == [
      -1.0 if any(want) else 0.0]  # past max_steps: on the last step slot


class _CharTokenizer:
  """One token per character; 0 = pad, 1 = EOS."""

  chars = "0123456789+-= \n"
  pad_id, eos_id, vocab_size = 0, 1, 17

  def encode(self, text):
    return [2 + self.chars.index(ch) for ch in text]

  def decode(self, ids):
    return "".join(self.chars[i - 2] for i in ids if i >= 2)


def _example(expression: str):
  entry = {"question": f"{expression} =", "answer": "0", "metadata": {"expression": expression}}
  return ladder.TaskExample(prompt=entry["question"], answer="0", meta={"entry": entry})


def _exp(alpha: float):
  config = ladder_config.get_config("smoke")
  config.rl.process_reward = "oracle"
  config.rl.process.alpha = alpha
  config_check.check(config)
  tok = _CharTokenizer()
  train = [_example("3 + 4"), _example("17 + 8 - 5")]
  prompts = np.array([[0, 0, 5, 12, 6], [3, 9, 12, 10, 13]], np.int32)  # any distinct rows
  task = types.SimpleNamespace(train=train, check_steps=ladder.check_steps)
  return types.SimpleNamespace(config=config, tokenizer=tok, task=task, train_prompts=prompts,
                               train_prompt_mask=prompts > 0)


def _batch(exp, texts, t=24):
  tok = exp.tokenizer
  tokens = np.zeros((len(texts), t), np.int32)
  mask = np.zeros((len(texts), t), bool)
  for i, text in enumerate(texts):
    ids = tok.encode(text) + [tok.eos_id]
    tokens[i, :len(ids)], mask[i, :len(ids)] = ids, True
  r = len(texts)
  return Rollout(prompt_tokens=np.repeat(exp.train_prompts[1:], r, 0),
                 prompt_mask=np.repeat(exp.train_prompt_mask[1:], r, 0), tokens=tokens, mask=mask,
                 logp=np.zeros((r, t), np.float32), group=np.zeros(r, np.int32),
                 valid=np.ones(r, bool))


def test_scorer_puts_progress_on_step_ends_and_the_pav_estimator_adds_it():
  """Four rows of one group: rewards (1, 0, 0, 0) -> GRPO advantages (1.5, -0.5, -0.5, -0.5);
  with alpha = 2 the tokens of each row's first wrong step get -0.5 + 2 * (-1) = -2.5."""
  exp = _exp(alpha=2.0)
  texts = list(WORKED)[:4]
  batch = _batch(exp, texts)
  scorer = process.ProcessScorer(exp, sft_params=None)
  assert not scorer.online
  out, metrics = scorer.score(batch, np.array([1.0, 0, 0, 0], np.float32), None)
  tokens, sr = np.asarray(out.tokens), np.asarray(out.step_rewards)
  newline, eos = 2 + _CharTokenizer.chars.index("\n"), _CharTokenizer.eos_id
  for i, text in enumerate(texts):
    want = WORKED[text][0]
    at = np.flatnonzero(sr[i])
    assert sr[i].sum() == sum(want) and len(at) == (1 if any(want) else 0)
    if any(want):  # a step's reward sits on its newline (the last line's on the EOS)
      step = want.index(-1)
      ends = np.flatnonzero(np.isin(tokens[i], (newline, eos)) & np.asarray(out.mask[i]))
      assert at[0] == ends[step] and tokens[i, at[0]] == (newline if step < 2 else eos)
  assert metrics["process/wrong_step_rows"] == 0.75
  hyper = steps_lib.RLHyper(group_size=4, process_reward="oracle",
                            process_options=process.estimator_options(exp.config))
  adv, w, _ = rl_inputs.advantages(np.array([1.0, 0, 0, 0], np.float32), out, hyper)
  adv, step_of, m = np.asarray(adv), np.asarray(out.step_of), np.asarray(out.mask)
  assert np.allclose(adv[0][m[0]], 1.5, atol=1e-4)
  for i in (1, 2, 3):
    wrong = WORKED[texts[i]][0].index(-1)
    want = np.where(step_of[i] == wrong, -2.5, -0.5)
    assert np.allclose(adv[i][m[i]], want[m[i]], atol=1e-4), (i, adv[i])
  assert np.asarray(w).tolist() == [1.0] * 4


def test_examples_are_found_by_prompt_tokens():
  exp = _exp(alpha=1.0)
  find = oracle.Examples(exp.task, exp.train_prompts, exp.train_prompt_mask)
  # The same prompt with more left padding is the same problem.
  rows = np.array([[0, 0, 0, 5, 12, 6], [0, 3, 9, 12, 10, 13]], np.int32)
  got = find(rows, rows > 0)
  assert [e.prompt for e in got] == ["3 + 4 =", "17 + 8 - 5 ="]
  with pytest.raises(ValueError, match="not a train prompt"):
    find(np.array([[4, 4]]), np.array([[True, True]]))


@pytest.mark.parametrize("field, value, match", [
    ("alpha", float("nan"), r"config.rl.process.alpha=nan: process_reward='oracle' needs alpha"),
    ("delimiter", ";", r"config.rl.process.delimiter=';'.*expected delimiter='\\n'"),
])
def test_config_errors_name_the_field(field, value, match):
  config = ladder_config.get_config("smoke")
  config.rl.process_reward = "oracle"
  config.rl.process.alpha = 1.0
  config.rl.process[field] = value
  with pytest.raises(config_check.ConfigError, match=match):
    config_check.check(config)


def test_a_task_without_a_step_checker_is_refused():
  exp = _exp(alpha=1.0)
  exp.task = types.SimpleNamespace(train=exp.task.train)
  with pytest.raises(ValueError, match=r"process_reward='oracle' needs a task with a step "
                     r"checker \(task.name='ladder'\)"):
    process.ProcessScorer(exp, sft_params=None)


def test_steps_align_with_the_checker_lines_on_the_ladder_tokenizer(tmp_path):
  """On the ladder's own (SentencePiece) tokenizer, the −1 of a flawed demonstration sits on the
  step segment of its first flawed step, and clean demonstrations get none."""
  from rl_jax import experiment, seeds  # pylint: disable=import-outside-toplevel
  config = ladder_config.get_config("smoke")
  config.rl.process_reward = "oracle"
  config.rl.process.alpha = 1.0
  exp = experiment.build(config, str(tmp_path))
  demos = exp.task.demonstrations(noise=config.task.demo_noise, rng=np.random.default_rng(
      [experiment.sft_seed(config), seeds.SFT_DEMOS]))
  rows = np.arange(64)
  r, t = len(rows), exp.demo_tokens.shape[1]
  batch = Rollout(prompt_tokens=exp.train_prompts[rows], prompt_mask=exp.train_prompt_mask[rows],
                  tokens=exp.demo_tokens[rows], mask=exp.demo_mask[rows],
                  logp=np.zeros((r, t), np.float32), group=rows.astype(np.int32) // 4,
                  valid=np.ones(r, bool))
  out, _ = process.ProcessScorer(exp, sft_params=None).score(batch, np.zeros(r), None)
  sr, step_of = np.asarray(out.step_rewards), np.asarray(out.step_of)
  flawed = 0
  for i in rows:
    first = demos[i].meta["flawed_steps"]
    check = ladder.check_steps(exp.tokenizer.decode(
        exp.demo_tokens[i][exp.demo_mask[i]].tolist()), demos[i])
    if not first and check.reward == 1.0:
      assert not sr[i].any()
      continue
    at = np.flatnonzero(sr[i])
    assert len(at) == 1 and sr[i, at[0]] == -1.0
    assert step_of[i, at[0]] == oracle.first_wrong_item(check)
    if first:  # the demonstration's own first flaw (a dropped carry)
      assert step_of[i, at[0]] == first[0]
      flawed += 1
  assert flawed >= 10
