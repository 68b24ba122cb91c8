"""Scanned layers (`ModelConfig.scan_layers`) compute what unrolled layers compute.

Equivalences, on the tiny preset and a tiny model with q/k RMSNorm and q/k/v biases (and
Gemma's switches): logits, loss and gradients (float32, <= 1e-6 relative); cached decoding,
slot-refill writes and the shared-prompt prefix path; the fused log-prob path; every sampler
(tokens and log-probs, and sampler log-probs == trainer log-probs); scalar heads; Hugging Face
import and export (tiny qwen3 with qk-norm and qwen2 with biases, against transformers);
a checkpoint saved in one layout restores in the other with identical logits; 8 devices == 1.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl_jax import models, parallel, sampling
from rl_jax.checkpoint import CheckpointMismatchError, Checkpointer
from rl_jax.models import heads
from rl_jax.rl import logprobs
from rl_jax.sampling import echo, eptree, latr, refill, treepo

# Compiling dominates these tiny shapes; the comparisons hold with or without XLA's optimizations.
pytestmark = pytest.mark.usefixtures("fast_compiles")

VARIANTS = {
    "tiny": models.get_preset("tiny", vocab_size=48),
    "qknorm_bias": models.ModelConfig(vocab_size=48, d_model=32, n_layers=3, n_heads=4,
                                      n_kv_heads=2, head_dim=16, d_ff=64, max_seq_len=32,
                                      qk_norm=True, qkv_bias=True, tie_embeddings=False),
    "gemma": models.ModelConfig(vocab_size=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=1,
                                d_ff=64, max_seq_len=32, mlp_activation="gelu_tanh",
                                scale_embeddings=True, norm_plus_one=True),
}
REL = 1e-6


def _scanned(cfg: models.ModelConfig) -> models.ModelConfig:
  return dataclasses.replace(cfg, scan_layers=True)


@functools.cache
def _params(name: str):
  """Unrolled params of VARIANTS[name] (norm weights perturbed) and the stacked copy."""
  cfg = VARIANTS[name]
  params = jax.jit(models.init_params, static_argnums=0)(cfg, jax.random.key(0))
  params = jax.tree_util.tree_map_with_path(
      lambda p, x: x + 0.1 if "norm" in jax.tree_util.keystr(p) else x, params)
  return params, models.stack_layers(params)


def _left_padded(rng, rows, length, vocab, lengths=None):
  lengths = rng.integers(1, length + 1, rows) if lengths is None else np.asarray(lengths)
  mask = np.arange(length)[None, :] >= (length - lengths)[:, None]
  return np.where(mask, rng.integers(3, vocab, (rows, length)), 0).astype(np.int32), mask


def _right_padded(rng, rows, length, vocab):
  lengths = rng.integers(1, length + 1, rows)
  mask = np.arange(length)[None, :] < lengths[:, None]
  return np.where(mask, rng.integers(3, vocab, (rows, length)), 0).astype(np.int32), mask


def _rel_close(got, want, rel=REL, what=""):
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
  assert err <= rel, f"{what}: relative error {err:.3g} > {rel:g}"


def test_stack_and_unstack_layers_round_trip_any_tree():
  params, stacked = _params("qknorm_bias")
  cfg = VARIANTS["qknorm_bias"]
  want = jax.eval_shape(functools.partial(models.init_params, _scanned(cfg)), jax.random.key(0))
  assert jax.tree.structure(stacked) == jax.tree.structure(want)
  assert stacked["layers"]["self_attn"]["q_proj"]["kernel"].shape == (3, 32, 64)
  assert models.is_stacked(stacked) and not models.is_stacked(params)
  back = models.unstack_layers(stacked)
  assert jax.tree.structure(back) == jax.tree.structure(params)
  jax.tree.map(np.testing.assert_array_equal, back, params)
  # Idempotent, and through containers (an Adam state, a value model's body).
  jax.tree.map(np.testing.assert_array_equal, models.stack_layers(stacked), stacked)
  opt = optax.adam(1e-3).init(params)
  opt_stacked = models.stack_layers(opt)
  assert jax.tree.structure(opt_stacked) == jax.tree.structure(optax.adam(1e-3).init(stacked))
  value = heads.init_value_params(cfg, params)
  assert models.is_stacked(models.stack_layers(value)["body"])


@pytest.mark.parametrize("remat", ["none", "full", "dots_saveable"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_scanned_equals_unrolled_logits_loss_and_gradients(name, remat):
  cfg = dataclasses.replace(VARIANTS[name], remat=remat)
  params, stacked = _params(name)
  rng = np.random.default_rng(1)
  prompt, prompt_mask = _left_padded(rng, 4, 6, cfg.vocab_size)
  tokens, mask = _right_padded(rng, 4, 5, cfg.vocab_size)
  seq, seq_mask = np.concatenate([prompt, tokens], 1), np.concatenate([prompt_mask, mask], 1)

  @functools.partial(jax.jit, static_argnums=0)
  def loss_and_grad(c, p):
    def loss(p):
      logp = logprobs.completion_logprobs(c, p, prompt, prompt_mask, tokens, mask)
      return -jnp.sum(logp) / mask.sum()
    return jax.value_and_grad(loss)(p)

  forward = jax.jit(models.forward, static_argnums=0)
  _rel_close(forward(_scanned(cfg), stacked, seq, seq_mask), forward(cfg, params, seq, seq_mask),
             what="logits")
  (l1, g1), (l2, g2) = loss_and_grad(cfg, params), loss_and_grad(_scanned(cfg), stacked)
  _rel_close(l2, l1, what="loss")
  assert float(jnp.abs(g1["embed_tokens"]["embedding"]).sum()) > 0
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(models.stack_layers(g1)),
                          jax.tree_util.tree_leaves(g2)):
    _rel_close(b, a, what=jax.tree_util.keystr(path))


@pytest.mark.parametrize("name", ["tiny", "qknorm_bias"])
def test_cached_decode_refill_writes_and_prefix_path(name):
  """prefill + decode_step, per-row write slots (slot refill) and hidden_states_and_kv/after:
  the stacked cache holds the unrolled cache's keys and values, and the logits agree."""
  cfg = VARIANTS[name]
  params, stacked = _params(name)
  rng = np.random.default_rng(2)
  b, p, t = 3, 6, 4
  prompt, prompt_mask = _left_padded(rng, b, p, cfg.vocab_size, lengths=[6, 3, 1])
  completion = rng.integers(3, cfg.vocab_size, (b, t)).astype(np.int32)
  prefill = jax.jit(models.prefill, static_argnums=0)
  decode_step = jax.jit(models.decode_step, static_argnums=0)
  extend = jax.jit(models.extend, static_argnums=0)
  runs = {}
  for c, w in ((cfg, params), (_scanned(cfg), stacked)):
    cache = models.init_cache(c, b, p + t + 2)
    assert cache.stacked == c.scan_layers
    logits, cache = prefill(c, w, cache, prompt, prompt_mask)
    out = [logits]
    for i in range(t):
      logits, cache = decode_step(c, w, cache, jnp.asarray(completion[:, i]))
      out.append(logits)
    # Per-row write slots: rows at different slots append two tokens.
    cache = cache.replace(index=jnp.array([p + t, p + 1, p + 2], jnp.int32))
    hidden, cache = extend(c, w, cache, jnp.asarray(completion[:, :2]), jnp.ones((b, 2), bool))
    runs[c.scan_layers] = np.stack(out, 1), np.asarray(hidden), cache
  (l1, h1, c1), (l2, h2, c2) = runs[False], runs[True]
  _rel_close(l2, l1, what="decode logits")
  _rel_close(h2, h1, what="refill hidden")
  assert c2.k.shape == (b, cfg.n_layers, cfg.n_kv_heads, p + t + 2, cfg.hd)
  _rel_close(c2.k, np.stack(c1.k, 1), what="keys")
  _rel_close(c2.v, np.stack(c1.v, 1), what="values")
  np.testing.assert_array_equal(c2.mask, c1.mask)
  # A fork (row gather) and a concatenation act on rows in both layouts.
  rows = jnp.array([2, 0, 0])
  _rel_close(c2.take_rows(rows).k, np.stack(c1.take_rows(rows).k, 1), what="take_rows")
  both = c2.map_kv(lambda x, y: jnp.concatenate([x, y]), c2)
  assert both.k.shape[0] == 2 * b and both.size == c2.size

  # The shared-prompt prefix path (rl.logprobs' group_size > 1).
  tokens, mask = _right_padded(rng, b, t, cfg.vocab_size)
  kv_fn = jax.jit(models.hidden_states_and_kv, static_argnums=0)
  after = jax.jit(models.hidden_states_after, static_argnums=0)
  (h1, kv1), (h2, kv2) = kv_fn(cfg, params, prompt, prompt_mask), kv_fn(
      _scanned(cfg), stacked, prompt, prompt_mask)
  assert kv2[0].shape == kv1[0].shape == (cfg.n_layers, b, cfg.n_kv_heads, p, cfg.hd)
  _rel_close(kv2[0], kv1[0], what="prefix keys")
  _rel_close(h2, h1, what="prefix hidden")
  _rel_close(after(_scanned(cfg), stacked, kv2, prompt_mask, tokens, mask),
             after(cfg, params, kv1, prompt_mask, tokens, mask), what="hidden after prefix")


@pytest.mark.parametrize("group_size", [1, 2])
def test_fused_logprob_path_and_value_heads(group_size):
  cfg = VARIANTS["qknorm_bias"]
  params, stacked = _params("qknorm_bias")
  rng = np.random.default_rng(3)
  prompt, prompt_mask = _left_padded(rng, 2, 5, cfg.vocab_size)
  prompt, prompt_mask = np.repeat(prompt, 2, 0), np.repeat(prompt_mask, 2, 0)
  tokens, mask = _right_padded(rng, 4, 6, cfg.vocab_size)
  fn = jax.jit(functools.partial(logprobs.completion_logprobs, temperature=0.7,
                                 with_entropy=True, group_size=group_size), static_argnums=0)
  (lp1, ent1), (lp2, ent2) = (fn(cfg, params, prompt, prompt_mask, tokens, mask),
                              fn(_scanned(cfg), stacked, prompt, prompt_mask, tokens, mask))
  _rel_close(lp2, lp1, what="logp")
  _rel_close(ent2, ent1, what="entropy")
  values = jax.jit(heads.token_values, static_argnums=0)
  v1 = heads.init_value_params(cfg, params, bias=0.3)
  v1["head"]["kernel"] = jnp.linspace(-1, 1, cfg.d_model)
  v2 = models.stack_layers(v1)
  _rel_close(values(_scanned(cfg), v2, prompt, prompt_mask, tokens, mask),
             values(cfg, v1, prompt, prompt_mask, tokens, mask), what="token values")


def _sampler_runs(cfg, params, prompt, prompt_mask):
  """Every sampler on `prompt` at temperature 1: name -> (output, rows' prompt index)."""
  s, key = sampling.Sampling(1.0), jax.random.key(7)
  b = len(prompt)
  gen = sampling.generate(params, prompt, prompt_mask, key, cfg=cfg, strategy=s,
                          max_new_tokens=6, eos_id=1, pad_id=0, num_samples=2)
  ref = refill.refill_generate(params, prompt, prompt_mask, key, cfg=cfg, strategy=s,
                               max_new_tokens=6, eos_id=1, pad_id=0, num_samples=2,
                               num_slots=4).samples
  lt = latr.latr_generate(params, prompt, prompt_mask, key, cfg=cfg, strategy=s,
                          options=latr.LatrOptions(tau_abs=0.0, tau_rel=1.0, windows=(2, 3),
                                                   sm_threshold=None, rl_threshold=0.99),
                          num_slots=3, max_new_tokens=6, eos_id=1)
  ep = eptree.eptree_rollout(params, np.asarray(prompt),
                             np.asarray(prompt_mask), key, cfg=cfg, strategy=s,
                             options=eptree.EPTreeOptions(num_chains=2, forks_per_round=1,
                                                          rounds=1, branches=2),
                             max_new_tokens=6, eos_id=-1)
  tp = treepo.treepo_rollout(params, np.asarray(prompt), np.asarray(prompt_mask), key, cfg=cfg,
                             strategy=s, options=treepo.TreePOOptions(segment_len=2,
                                                                      first_width=2, branches=2),
                             group=4, max_new_tokens=6, eos_id=cfg.vocab_size)
  ec = echo.echo_generate(params, prompt, prompt_mask, key, cfg=cfg, strategy=s,
                          options=echo.EchoOptions(), num_slots=4, max_new_tokens=6,
                          eos_id=cfg.vocab_size)
  leaves = eptree.EPTreeOptions(num_chains=2, forks_per_round=1, rounds=1, branches=2).leaves
  return {"generate": (gen, np.repeat(np.arange(b), 2)),
          "refill": (ref, np.repeat(np.arange(b), 2)),
          "latr": (lt, np.repeat(np.arange(b), 3)),
          "eptree": (ep, np.repeat(np.arange(b), leaves)),
          "treepo": (tp, np.repeat(np.arange(b), 4)),
          "echo": (ec, np.repeat(np.arange(b), 4))}


def test_samplers_scanned_equal_unrolled_and_trainer_logprobs():
  cfg = VARIANTS["qknorm_bias"]
  params, stacked = _params("qknorm_bias")
  params = dict(params, lm_head=params["lm_head"] * 0.3)  # flatter: more forks and branches
  stacked = dict(stacked, lm_head=params["lm_head"])
  rng = np.random.default_rng(4)
  prompt, prompt_mask = _left_padded(rng, 3, 4, cfg.vocab_size, lengths=[4, 2, 3])
  prompt, prompt_mask = jnp.asarray(prompt), jnp.asarray(prompt_mask)
  one = jax.device_get(_sampler_runs(cfg, params, prompt, prompt_mask))
  two = jax.device_get(_sampler_runs(_scanned(cfg), stacked, prompt, prompt_mask))
  trainer = jax.jit(logprobs.completion_logprobs, static_argnums=0)
  for name, (out, rows) in two.items():
    ref = one[name][0]
    np.testing.assert_array_equal(out.tokens, ref.tokens, err_msg=name)
    np.testing.assert_array_equal(out.mask, ref.mask, err_msg=name)
    np.testing.assert_allclose(out.logp, ref.logp, atol=1e-6, err_msg=name)
    assert np.asarray(out.mask).sum() > len(rows), name
    want = trainer(_scanned(cfg), stacked, prompt[rows], prompt_mask[rows],
                   jnp.asarray(out.tokens), jnp.asarray(out.mask))
    np.testing.assert_allclose(out.logp, want, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("saved_scanned", [False, True])
def test_checkpoint_restores_across_layouts(tmp_path, saved_scanned):
  """A train state (params + Adam moments) saved in one layout restores in the other, placed
  with the target's shardings on a 2 x 2 x 2 mesh, and gives identical logits."""
  cfg = VARIANTS["qknorm_bias"]
  params, _ = _params("qknorm_bias")
  tx = optax.adam(1e-2)
  grads = jax.tree.map(lambda x: jnp.full_like(x, 0.5), params)
  _, opt = tx.update(grads, tx.init(params), params)
  state = {"params": params, "opt": opt, "step": jnp.asarray(3)}
  target_cfg = cfg if saved_scanned else _scanned(cfg)
  with Checkpointer(tmp_path / "ckpt", save_every=1) as ckpt:
    ckpt.maybe_save(3, models.to_layout(state, saved_scanned), {"phase": "rl"})
    mesh = parallel.make_mesh((2, 2, 2))
    abstract = jax.eval_shape(lambda: models.to_layout(state, target_cfg.scan_layers))
    shardings = parallel.tree_shardings(abstract, mesh)
    target = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                          abstract, shardings)
    restored, meta = ckpt.restore(3, target)
  assert meta == {"phase": "rl"}
  assert jax.tree.structure(restored) == jax.tree.structure(target)
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(target)):
    assert got.sharding == want.sharding and got.shape == want.shape
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(restored),
               jax.device_get(models.to_layout(state, target_cfg.scan_layers)))
  rng = np.random.default_rng(5)
  tokens, mask = _left_padded(rng, 4, 8, cfg.vocab_size)
  forward = jax.jit(models.forward, static_argnums=0)
  same_place = jax.device_put(models.to_layout(params, target_cfg.scan_layers),
                              jax.tree.map(lambda x: x.sharding, restored["params"]))
  np.testing.assert_array_equal(forward(target_cfg, restored["params"], tokens, mask),
                                forward(target_cfg, same_place, tokens, mask))
  _rel_close(forward(target_cfg, restored["params"], tokens, mask),
             forward(cfg, params, tokens, mask), what="restored logits")


def test_checkpoint_of_another_model_still_mismatches(tmp_path):
  params, _ = _params("tiny")
  other = dataclasses.replace(VARIANTS["tiny"], n_layers=2, scan_layers=True)
  with Checkpointer(tmp_path / "ckpt", save_every=1) as ckpt:
    ckpt.maybe_save(1, {"params": params})
    target = {"params": jax.eval_shape(functools.partial(models.init_params, other),
                                       jax.random.key(0))}
    with pytest.raises(CheckpointMismatchError):
      ckpt.restore(1, target)


def test_scanned_layer_axis_is_not_sharded_and_8_devices_equal_1():
  """Param specs give the layer axis no mesh axis; loss, gradients and sampled tokens on a
  2 x 2 x 2 (data x fsdp x tensor) mesh of 8 host devices equal one device's."""
  assert len(jax.devices()) >= 8, "tests/conftest.py should force 8 host devices"
  cfg = _scanned(dataclasses.replace(VARIANTS["tiny"], remat="full"))
  _, stacked = _params("tiny")
  mesh8 = parallel.make_mesh((2, 2, 2))
  specs = parallel.tree_shardings(stacked, mesh8)
  q = specs["layers"]["self_attn"]["q_proj"]["kernel"].spec
  assert tuple(q) == (None, "fsdp", "tensor"), q
  assert tuple(specs["layers"]["mlp"]["down_proj"]["kernel"].spec) == (None, "tensor", "fsdp")
  assert all(tuple(s.spec)[:1] in ((), (None,)) for s in jax.tree.leaves(specs["layers"]))
  rng = np.random.default_rng(6)
  prompt, prompt_mask = _left_padded(rng, 8, 6, cfg.vocab_size)
  tokens, mask = _right_padded(rng, 8, 5, cfg.vocab_size)

  def loss(p, prompt, prompt_mask, tokens, mask):
    logp = logprobs.completion_logprobs(cfg, p, prompt, prompt_mask, tokens, mask, group_size=2)
    return -jnp.sum(logp) / jnp.sum(mask)

  outs = {}
  for shape in ((1, 1, 1), (2, 2, 2)):
    mesh = parallel.make_mesh(shape)
    p_sh = parallel.tree_shardings(stacked, mesh)
    rows = parallel.batch_sharding(mesh, 2, 8)
    placed = jax.device_put(stacked, p_sh)
    batch = jax.device_put((prompt, prompt_mask, tokens, mask), rows)
    grad = jax.jit(jax.value_and_grad(loss), out_shardings=(parallel.replicated(mesh), p_sh))
    value, g = grad(placed, *batch)
    with jax.set_mesh(mesh):
      samples = sampling.generate(placed, batch[0], batch[1], jax.random.key(2), cfg=cfg,
                                  strategy=sampling.Sampling(), max_new_tokens=4, eos_id=1,
                                  pad_id=0)
    outs[shape] = jax.device_get((value, g, samples))
  assert len(g["layers"]["self_attn"]["q_proj"]["kernel"].sharding.device_set) == 8
  (v1, g1, s1), (v8, g8, s8) = outs.values()
  np.testing.assert_allclose(v8, v1, rtol=1e-5)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g1), jax.tree.leaves(g8)):
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6, err_msg=jax.tree_util.keystr(path))
  np.testing.assert_array_equal(s8.tokens, s1.tokens)
  np.testing.assert_allclose(s8.logp, s1.logp, atol=1e-5)


@pytest.mark.parametrize("family", ["qwen3", "qwen2"])
def test_hf_import_stacks_and_export_unstacks(tmp_path, family):
  """A tiny transformers model (qwen3: q/k RMSNorm; qwen2: q/k/v biases) loads scanned with
  its logits, and a scanned model's export opens in transformers with the same logits."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  config_cls = {"qwen3": transformers.Qwen3Config, "qwen2": transformers.Qwen2Config}[family]
  config = config_cls(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      max_position_embeddings=64, tie_word_embeddings=family == "qwen3")
  config._attn_implementation = "eager"  # pylint: disable=protected-access
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
  with torch.no_grad():
    for p in model.parameters():
      p.add_(0.1 * torch.randn_like(p))
  model.eval().save_pretrained(tmp_path / "hf")
  rng = np.random.default_rng(8)
  tokens, mask = _left_padded(rng, 3, 7, 64, lengths=[7, 4, 1])

  def hf_logits(m):
    positions = np.maximum(np.cumsum(mask, axis=-1) - 1, 0)
    with torch.no_grad():
      return m(input_ids=torch.tensor(tokens, dtype=torch.int64),
               attention_mask=torch.tensor(mask.astype(np.int64)),
               position_ids=torch.tensor(positions)).logits.float().numpy()

  cfg, params = models.load_hf(tmp_path / "hf", scan_layers=True)
  assert cfg.scan_layers and (cfg.qk_norm if family == "qwen3" else cfg.qkv_bias)
  assert params["layers"]["self_attn"]["k_proj"]["kernel"].shape == (3, 32, 32)
  ours = np.asarray(jax.jit(models.forward, static_argnums=0)(cfg, params, tokens, mask))
  ref = hf_logits(model)
  np.testing.assert_allclose(ours[mask], ref[mask], atol=1e-4, rtol=0)
  _, unrolled = models.load_hf(tmp_path / "hf")
  jax.tree.map(np.testing.assert_array_equal, models.unstack_layers(params), unrolled)
  models.save_hf(tmp_path / "ours", cfg, params)
  with open(tmp_path / "ours" / "config.json") as f:
    assert "scan_layers" not in f.read()
  back = transformers.AutoModelForCausalLM.from_pretrained(
      tmp_path / "ours", dtype=torch.float32, attn_implementation="eager").eval()
  np.testing.assert_allclose(hf_logits(back)[mask], ref[mask], atol=1e-5, rtol=0)
