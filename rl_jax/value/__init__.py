"""Scalar-head models and their training: V0, V0.5, PRMs, and the rollout history they learn from."""
