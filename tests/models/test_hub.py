"""`model.path` as a local directory or a Hugging Face hub id, and the dtype parameters load in.

No network here: a hub id is resolved with HF_HUB_OFFLINE=1 against a cache laid out in a tmp dir
the way huggingface_hub lays it out (models--ORG--NAME/refs/main -> snapshots/REV/...), so the
real `snapshot_download(..., local_files_only=True)` finds it; the online call's arguments are
checked on a stand-in.
"""

import dataclasses
import os
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import transformers

from rl_jax import experiment, models
from rl_jax.models import hub
from test_hf_parity import hf_logits, make_hf_model, our_logits, padded_batch  # tests/models

REV = "0123456789abcdef0123456789abcdef01234567"
REPO = "tiny-org/tiny-gemma3"


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  """A tiny Gemma 3 checkpoint saved by transformers in 4 safetensors shards + index."""
  path = tmp_path_factory.mktemp("ckpt")
  make_hf_model("gemma3").save_pretrained(path, max_shard_size="40KB")
  return path


@pytest.fixture
def hub_cache(tmp_path, hf_dir, monkeypatch):
  """HF_HUB_CACHE with REPO at revision REV (refs/main), offline."""
  storage = tmp_path / "hub" / ("models--" + REPO.replace("/", "--"))
  snapshot = storage / "snapshots" / REV
  snapshot.mkdir(parents=True)
  for name in os.listdir(hf_dir):
    (snapshot / name).write_bytes((hf_dir / name).read_bytes())
  (storage / "refs").mkdir()
  (storage / "refs" / "main").write_text(REV)
  monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  monkeypatch.chdir(tmp_path)
  return snapshot


def test_sharded_checkpoint_from_transformers_loads(hf_dir):
  files = sorted(os.listdir(hf_dir))
  assert "model.safetensors.index.json" in files and "model.safetensors" not in files
  assert sum(f.startswith("model-") for f in files) > 2
  model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype="float32",
                                                            attn_implementation="eager").eval()
  tokens, mask = padded_batch()
  cfg, params = models.load_hf(hf_dir)
  np.testing.assert_allclose(our_logits(cfg, params, tokens, mask)[mask],
                             hf_logits(model, tokens, mask)[mask], atol=1e-4, rtol=0)


def test_hub_id_resolves_in_the_offline_cache(hub_cache, hf_dir):
  assert models.is_hub_id(REPO) and not models.is_hub_id(str(hf_dir))
  assert models.resolve_model_dir(REPO) == str(hub_cache)
  cfg, params = models.load_hf(REPO)
  want_cfg, want = models.load_hf(hf_dir)
  assert cfg == want_cfg and cfg.sliding_window == 3
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, want)
  assert models.read_hf_config(REPO)["model_type"] == "gemma3_text"


def test_unknown_hub_id_offline_is_one_line_naming_it(hub_cache):
  with pytest.raises(FileNotFoundError, match="tiny-org/absent.*HF_HUB_OFFLINE") as e:
    models.load_hf("tiny-org/absent")
  assert "\n" not in str(e.value)


def test_missing_local_path_is_not_a_hub_id(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "runs").mkdir()
  assert not models.is_hub_id("runs/model")  # Its first component exists: a local path.
  with pytest.raises(FileNotFoundError, match="'runs/model' does not exist"):
    models.load_hf("runs/model")
  with pytest.raises(FileNotFoundError, match="does not exist"):
    models.load_hf(tmp_path / "a" / "b")


def test_online_download_asks_for_checkpoint_files_only(tmp_path, monkeypatch, hf_dir):
  import huggingface_hub  # pylint: disable=g-import-not-at-top
  calls = []

  def fake(repo_id, **kwargs):
    calls.append((repo_id, kwargs))
    return str(hf_dir)

  monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
  monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
  monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "online"))
  monkeypatch.chdir(tmp_path)
  assert models.resolve_model_dir("some-org/some-model") == str(hf_dir)
  models.resolve_model_dir("some-org/some-model")  # Once per process: no second call.
  (repo_id, kwargs), = calls
  assert repo_id == "some-org/some-model" and not kwargs["local_files_only"]
  assert kwargs["cache_dir"] == str(tmp_path / "online")
  patterns = kwargs["allow_patterns"]
  assert {"config.json", "*.safetensors", "model.safetensors.index.json",
          "tokenizer.json"} <= set(patterns)
  assert not any(p.endswith((".bin", ".gguf", ".pt")) for p in patterns)


def test_hub_id_without_huggingface_hub_names_the_extra(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "huggingface_hub", None)
  monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
  monkeypatch.chdir(tmp_path)
  with pytest.raises(ImportError, match=r"'other-org/m'.*\.\[hf\]"):
    models.resolve_model_dir("other-org/m")


def test_experiment_model_path_accepts_a_hub_id(hub_cache):
  assert experiment.model_dir(REPO) == str(hub_cache)
  config = ml_collections.ConfigDict(dict(model=dict(
      path=REPO, dtype="bfloat16", param_dtype="bfloat16", remat="full", scan_layers=True)))
  cfg = experiment.model_config(config, vocab_size=100)
  assert (cfg.dtype, cfg.param_dtype, cfg.remat, cfg.scan_layers) == (
      "bfloat16", "bfloat16", "full", True)
  assert cfg.post_norms and cfg.sliding_window == 3
  with pytest.raises(experiment.ModelPathError, match="config.model.path='tiny-org/nope'") as e:
    experiment.check_model_dir("tiny-org/nope")
  assert "\n" not in str(e.value)


def test_bfloat16_loading_gives_bfloat16_leaves_close_logits(hf_dir):
  tokens, mask = padded_batch()
  cfg32, params32 = models.load_hf(hf_dir)
  cfg, params = models.load_hf(hf_dir, dtype="bfloat16", on_host=True)
  leaves = jax.tree_util.tree_leaves(params)
  assert all(isinstance(x, np.ndarray) for x in leaves)  # on_host: numpy, placed by the caller
  assert {x.dtype for x in leaves} == {jnp.dtype(jnp.bfloat16)}
  ref = our_logits(cfg32, params32, tokens, mask)
  ours = our_logits(cfg, jax.device_put(params), tokens, mask)
  assert ours.dtype == np.float32
  scale = np.abs(ref[mask]).max()
  assert np.abs(ours[mask] - ref[mask]).max() < 0.05 * scale
  assert np.abs(ours[mask] - ref[mask]).max() > 0  # It did compute in bfloat16.


@pytest.mark.parametrize("master", ["bfloat16", "float32"])
def test_run_loads_the_checkpoint_in_the_master_dtype_with_its_shardings(hub_cache, master):
  """`phases.init_params` of a run with model.path = a hub id: leaves in train.master_dtype,
  each placed with the sharding rules' NamedSharding."""
  import types  # pylint: disable=g-import-not-at-top
  from rl_jax import parallel  # pylint: disable=g-import-not-at-top
  from rl_jax.train import phases  # pylint: disable=g-import-not-at-top
  config = ml_collections.ConfigDict(dict(
      model=dict(path=REPO, dtype="float32", param_dtype="float32", remat="none",
                 scan_layers=False),
      train=dict(master_dtype=master)))
  model_cfg = experiment.model_config(config, vocab_size=100)
  mesh = parallel.make_mesh((1, 4, 2))
  exp = types.SimpleNamespace(config=config, model_cfg=model_cfg, mesh=mesh,
                              master_cfg=dataclasses.replace(model_cfg, param_dtype=master))
  params = phases.init_params(exp)
  leaves = jax.tree_util.tree_leaves_with_path(params)
  assert {x.dtype for _, x in leaves} == {jnp.dtype(master)}
  for path, x in leaves:
    want = parallel.param_spec(jax.tree_util.keystr(path), x.shape, mesh)
    assert x.sharding.spec == want
  embed = params["embed_tokens"]["embedding"]
  assert embed.sharding.spec != jax.sharding.PartitionSpec()  # Really split over the mesh.
