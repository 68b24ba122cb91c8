"""GRPO recipes: a pretrained checkpoint, a math task, rewards and platform presets, one file each.

Each file's `get_config(preset)` builds the recipe for a platform (`base.PRESETS`); `base.py`
holds what they share and documents the presets.
"""
