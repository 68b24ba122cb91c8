"""RL maths: group advantage estimators and policy losses (pure, jittable).

Import the submodules directly: `from rl_jax.rl import advantages, losses`.
"""
