"""The PRM: scalar head on the policy architecture, training, saving, Monte Carlo labels."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl_jax import models, sampling
from rl_jax.models import heads
from rl_jax.value.prm import model as prm_lib
from rl_jax.value.prm import pav
from rl_jax.value.prm import segments as steps_lib

CFG = models.ModelConfig(vocab_size=16, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1,
                         d_ff=32, max_seq_len=32)
NL, EOS = 5, 2
# Jitted (eagerly, every primitive of the model would compile on its own).
_init_params = jax.jit(models.init_params, static_argnums=0)
_token_values = jax.jit(heads.token_values, static_argnums=0)


def _batch(r=4, p=3, t=6, seed=0):
  rng = np.random.default_rng(seed)
  prompt = rng.integers(6, 16, (r, p)).astype(np.int32)
  pmask = np.ones((r, p), bool)
  pmask[0, 0] = False
  tokens = rng.integers(6, 16, (r, t)).astype(np.int32)
  tokens[:, 2] = NL
  tokens[:, 4] = EOS
  mask = np.arange(t)[None] <= 4
  return prompt, pmask, tokens, np.broadcast_to(mask, (r, t)).copy()


def test_head_starts_at_the_base_rate_and_reads_causal_prefixes():
  policy = _init_params(CFG, jax.random.key(0))
  params = prm_lib.init_from_policy(CFG, policy, base_rate=0.25)
  prompt, pmask, tokens, mask = _batch()
  v = np.asarray(prm_lib.predict(params, prompt, pmask, tokens, mask, cfg=CFG))
  assert v.shape == (4, 7)
  np.testing.assert_allclose(v[:, 0], 0.25, atol=1e-6)  # zero head: the bias everywhere
  # with a non-zero head, index 0 (after the prompt) does not see the completion
  params["head"]["kernel"] = jnp.ones((CFG.d_model,))
  other = np.where(mask, (tokens + 1) % 16, tokens)
  a = _token_values(CFG, params, prompt, pmask, tokens, mask)
  b = _token_values(CFG, params, prompt, pmask, other, mask)
  np.testing.assert_allclose(np.asarray(a)[:, 0], np.asarray(b)[:, 0], atol=1e-5)
  assert not np.allclose(np.asarray(a)[:, 1:6], np.asarray(b)[:, 1:6])
  assert np.all(np.asarray(a)[:, 6] == 0)  # past the mask


def test_bce_matches_the_formula():
  z, y = jnp.array([0.04, -3.0, 5.0]), jnp.array([1.0, 0.25, 0.0])
  want = -(y * jax.nn.log_sigmoid(z) + (1 - y) * jax.nn.log_sigmoid(-z))
  np.testing.assert_allclose(np.asarray(prm_lib.bce_with_logits(z, y)), np.asarray(want),
                             atol=1e-6)
  assert float(prm_lib.bce_with_logits(jnp.array(0.04), 1.0)) == pytest.approx(0.6733, abs=1e-4)


def test_fit_lowers_the_loss_and_save_load_round_trips(tmp_path):
  prompt, pmask, tokens, mask = _batch(r=8)
  s = steps_lib.segment(tokens, mask, (NL,), max_steps=3, ignore_ids=(EOS,), eos_id=EOS)
  labels, w = steps_lib.step_labels_to_tokens(np.tile([[0.9, 0.1, 0.0]], (8, 1)), s, 6)
  batch = prm_lib.PRMBatch(prompt, pmask, tokens, mask, labels, w)
  params = prm_lib.init_from_policy(CFG, _init_params(CFG, jax.random.key(1)))
  from rl_jax.train_state import TrainState, make_optimizer, optim_config
  state = TrainState.create(params, make_optimizer(optim_config(1e-2), 30))
  step = jax.jit(lambda st, b: prm_lib.train_step(st, b, cfg=CFG))
  first = None
  for _ in range(30):
    state, m = step(state, batch)
    first = float(m["loss"]) if first is None else first
  assert float(m["loss"]) < 0.5 * first
  spec = prm_lib.PRMSpec(model=CFG, delimiters=(NL,), ignore_ids=(EOS,), kind="pav", prover_k=4)
  prm_lib.save(str(tmp_path / "prm"), spec, state.params, meta={"n_mc": 4})
  assert prm_lib.save(str(tmp_path / "prm"), spec, state.params) == 2  # a second save: newer
  spec2, params2, meta = prm_lib.load(str(tmp_path / "prm"))
  assert spec2 == spec and meta == {}
  np.testing.assert_array_equal(
      np.asarray(prm_lib.predict(params2, prompt, pmask, tokens, mask, cfg=CFG)),
      np.asarray(prm_lib.predict(state.params, prompt, pmask, tokens, mask, cfg=CFG)))
  with pytest.raises(FileNotFoundError, match="prm.json"):
    prm_lib.load(str(tmp_path / "missing"))


def test_mc_prefix_labels_with_a_counting_scorer():
  prompt, pmask, tokens, mask = _batch(r=2, t=6)
  s = steps_lib.segment(tokens, mask, (NL,), max_steps=3, ignore_ids=(EOS,), eos_id=EOS)
  assert np.asarray(s.num_steps).tolist() == [2, 2]  # 'x x NL' then 'x EOS'
  calls = []

  def score(rows, joined):
    calls.append((np.asarray(rows), np.asarray(joined)))
    return [float(j[3] % 2 == 0) for j in joined]  # the first continuation token's parity

  params = _init_params(CFG, jax.random.key(2))
  labels, w = pav.mc_prefix_labels(
      params, cfg=CFG, strategy=sampling.Sampling(temperature=1.0), prompt=prompt,
      prompt_mask=pmask, tokens=tokens, mask=mask, steps=s, outcomes=np.array([1.0, 0.0]),
      prompt_value=np.array([0.5, 0.5]), score=score, n_mc=3, rng=jax.random.key(0),
      eos_id=EOS, batch_size=8)
  rows, joined = calls[0]
  assert rows.tolist() == [0, 0, 0, 1, 1, 1]  # one prefix (the first step) per row, 3 each
  np.testing.assert_array_equal(joined[:, :3], np.repeat(tokens[:, :3], 3, 0))  # prefix kept
  want = [np.mean([float(j[3] % 2 == 0) for j in joined[3 * i:3 * i + 3]]) for i in range(2)]
  np.testing.assert_allclose(labels[:, 3], want)  # after the newline (token 2)
  np.testing.assert_allclose(labels[:, 5], [1.0, 0.0])  # the last step: the outcome
  np.testing.assert_allclose(labels[:, 0], [0.5, 0.5])
  assert w.tolist() == [[1, 0, 0, 1, 0, 1, 0]] * 2
