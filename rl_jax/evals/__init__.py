"""Evaluation of a finished run: pass@k / maj@k (`metrics`), math answers checked with math-verify
(`math_answers`), the benchmark sets (`datasets`) and the `experiments.eval` driver (`runner`)."""
