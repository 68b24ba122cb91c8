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
]

EXTRAS = {
    "test": ["pytest>=8", "pytest-xdist>=3.5"],
}

setuptools.setup(
    name="rl_jax",
    version="0.1.0",
    description="JAX-native RL with verifiable rewards (RLVR) for language models.",
    python_requires=">=3.11",
    packages=setuptools.find_packages(include=["rl_jax*", "kernels*", "experiments*"]),
    install_requires=CORE,
    extras_require=EXTRAS,
)
