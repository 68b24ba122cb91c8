"""Step segmentation: delimiters, no delimiter, empty steps, a step cut at the length limit."""

import numpy as np

from rl_jax.value.prm import segments as steps_lib

NL, EOS, PAD = 9, 2, 0  # token ids: newline, EOS, padding; every other id is content


def _seg(rows, t=8, max_steps=4):
  tokens = np.full((len(rows), t), PAD, np.int32)
  mask = np.zeros((len(rows), t), bool)
  for i, r in enumerate(rows):
    tokens[i, :len(r)] = r
    mask[i, :len(r)] = True
  return steps_lib.segment(tokens, mask, (NL,), max_steps=max_steps, ignore_ids=(EOS,),
                           eos_id=EOS)


def test_lines_end_at_newlines_and_the_final_line_at_eos():
  s = _seg([[5, 6, NL, 7, NL, 8, EOS]])
  assert s.num_steps.tolist() == [3]
  assert s.end_pos.tolist() == [[2, 4, 6, 0]]
  assert s.step_mask.tolist() == [[True, True, True, False]]
  assert s.step_of.tolist() == [[0, 0, 0, 1, 1, 2, 2, 0]]
  assert s.truncated.tolist() == [False]


def test_no_delimiter_is_one_step_ending_at_the_last_token():
  s = _seg([[5, 6, 7, EOS]])
  assert s.num_steps.tolist() == [1]
  assert s.end_pos[0, 0] == 3
  assert s.step_of[0].tolist() == [0] * 8


def test_empty_steps_merge_into_the_next_step():
  # a leading newline and a blank line close no content: two steps, not four
  s = _seg([[NL, 5, NL, NL, 6, EOS]])
  assert s.num_steps.tolist() == [2]
  assert s.end_pos[0, :2].tolist() == [2, 5]
  assert s.step_of[0, :6].tolist() == [0, 0, 0, 1, 1, 1]


def test_trailing_newline_then_eos_adds_no_step():
  s = _seg([[5, NL, 6, NL, EOS]])
  assert s.num_steps.tolist() == [2]
  assert s.end_pos[0, :2].tolist() == [1, 3]
  assert s.step_of[0, 4] == 1  # the EOS belongs to the last step


def test_step_cut_at_the_length_limit():
  s = _seg([[5, NL, 6, 7, 8, 9 - 1, 3, 4]])  # 8 tokens, no EOS: cut mid-line
  assert s.truncated.tolist() == [True]
  assert s.num_steps.tolist() == [2]
  assert s.end_pos[0, :2].tolist() == [1, 7]


def test_more_steps_than_slots_and_empty_rows():
  s = _seg([[5, NL, 5, NL, 5, NL, 5, NL], []], max_steps=2)
  assert s.num_steps.tolist() == [4, 0]
  assert s.end_pos.tolist() == [[1, 3], [0, 0]]
  assert s.step_mask.tolist() == [[True, True], [False, False]]
  assert int(s.step_of.max()) == 1


def test_gather_steps_and_labels_round_trip():
  s = _seg([[5, 6, NL, 7, EOS]], t=5)
  values = np.arange(6, dtype=np.float32)[None] / 10  # after prompt, then after each token
  v0, q = steps_lib.gather_steps(values, s)
  assert float(v0[0]) == 0.0
  np.testing.assert_allclose(np.asarray(q), [[0.3, 0.5, 0.0, 0.0]])
  labels, w = steps_lib.step_labels_to_tokens(np.array([[0.25, 1.0, 0, 0]]), s, 5)
  assert w[0].tolist() == [0, 0, 0, 1, 0, 1]
  assert labels[0, 3] == 0.25 and labels[0, 5] == 1.0


class _Tok:
  vocab_size = 5

  def decode(self, ids):
    return {0: "", 1: "a", 2: "\n", 3: "\n-", 4: "7"}[ids[0]]


def test_delimiter_ids_from_the_tokenizer_and_bad_delimiters():
  assert steps_lib.delimiter_ids(_Tok(), "\n") == (2, 3)
  for bad in ("", ";"):
    try:
      steps_lib.delimiter_ids(_Tok(), bad)
    except ValueError as e:
      assert "delimiter" in str(e)
    else:
      raise AssertionError(bad)
