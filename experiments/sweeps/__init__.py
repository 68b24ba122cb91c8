"""Ablations as data: each module's `get_sweep()` lists runs as dicts of config overrides."""
