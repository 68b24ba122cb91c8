"""Scalar-head models and what they learn from: priors, V0 (v0/), PRMs (prm/), history."""
