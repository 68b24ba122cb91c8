"""Training: the SFT and RL phases (`phases`, `steps`), the default experiment's loop (`loop`),
evaluation during a run (`evaluate`), companions and the run's stores.

Import the submodules directly: `from rl_jax.train import loop`.
"""
