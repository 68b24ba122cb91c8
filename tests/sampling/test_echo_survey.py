"""ECHO's survey of decision tokens (rl_jax/tools/echo_survey.py) and the measured thresholds of
methods_v2's `echo_measured` preset: they branch at a 0.6/0.4 decision, the reference's do not."""

from __future__ import annotations

import numpy as np

from experiments.sweeps import methods_v2
from rl_jax.sampling import echo_rules
from rl_jax.tools import echo_survey as es

C, R, K = es.CARRY, es.RESULT, es.COPY


def test_char_kinds_of_hand_worked_scratchpads():
  # 17+8 carries (25 vs dropped 15: the tens digit decides); 25-5 does not; answer line copies.
  text = "17+8=25\n25-5=20\n20"
  want = [K] * 5 + [C, R] + [K] + [K] * 5 + [R, R] + [K] + [K, K]
  assert es.char_kinds(text).tolist() == want
  # 4-5 borrows: -1 against the dropped 9 differ at the first character.
  assert es.char_kinds("4-5=-1").tolist() == [K, K, K, K, C, R]
  assert es.char_kinds("no steps").tolist() == [K] * 8


class _CharTokenizer:
  """Token i decodes to chars[i]; '=-' is one token, as the ladder tokenizer merges it."""

  def __init__(self, pieces):
    self.pieces = pieces

  def decode(self, ids):
    return "".join(self.pieces[i] for i in ids)


def test_token_kinds_take_the_largest_kind_of_their_characters():
  pieces = ["4", "-", "5", "=-", "1", "\n"]
  tok = _CharTokenizer(pieces)
  text = "4-5=-1\n"
  kinds = es.token_kinds(tok, np.arange(6), 6, text)
  assert kinds.tolist() == [K, K, K, C, R, K]  # '=-' holds the decision character '-'


def _logits(t=12, v=70, decision=6, p=(0.6, 0.4)):
  """[1, t, v]: every step one token ahead by 8 nats (a copy), step `decision` a p choice."""
  x = np.zeros((1, t, v), np.float32)
  x[0, np.arange(t), np.arange(t) % v] = 8.0
  x[0, decision] = -30.0
  x[0, decision, [3, 4]] = np.log(p)
  return x


def test_measured_thresholds_branch_once_at_a_06_04_decision_and_the_reference_never():
  mask = np.ones((1, 12), bool)
  measured = echo_rules.EchoOptions(**methods_v2.ECHO_MEASURED)
  st = es.statistics(_logits(), mask, measured)
  assert np.flatnonzero(st["branch"][0]).tolist() == [6]
  assert abs(st["entropy"][0, 6] - 0.673) < 1e-3  # −(0.6 ln 0.6 + 0.4 ln 0.4)
  assert int(echo_rules.branch_width(st["entropy"][:, 6], st["group_confidence"][:, 6],
                                     measured)[0]) == 2
  assert not st["pruned"].any()
  reference = es.statistics(_logits(), mask, echo_rules.EchoOptions())
  assert not reference["branch"].any()  # H_high 3.5 sits above any two-way choice
  # A confident step (0.99/0.01) stays below the measured H_high.
  assert not es.statistics(_logits(p=(0.99, 0.01)), mask, measured)["branch"].any()


def test_cli_refuses_a_bad_override_in_one_line_before_any_work(tmp_path):
  import subprocess, sys  # pylint: disable=import-outside-toplevel,multiple-imports
  out = subprocess.run([sys.executable, "-m", "experiments.echo_survey",
                        f"--workdir={tmp_path}", "--echo=entropy_high"], capture_output=True,
                       text=True)
  assert out.returncode != 0
  assert "--echo='entropy_high': expected K=V" in out.stderr


def test_an_unknown_override_is_named_before_the_run_is_read(tmp_path):
  import pytest  # pylint: disable=import-outside-toplevel
  with pytest.raises(ValueError, match=r"echo overrides \['entropy_hi'\] are not fields"):
    es.survey(str(tmp_path / "no_run"), overrides={"entropy_hi": 0.3})
