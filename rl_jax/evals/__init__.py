"""Evaluation of a finished run: pass@k / maj@k (`metrics`), the benchmark sets (`datasets`) and
the `experiments.eval` driver (`runner`); math answers are checked by `rl_jax.data.math_answers`,
the checker the `math` training task rewards with."""
