"""Task sources: prompts with verifiable answers (see `tasks`)."""

from __future__ import annotations

from rl_jax.data.tasks import (TASKS, ReasoningGymTask, TaskExample, carry_class, demonstrations,
                               dropped_carry_answer, extract_answer, make_task)
from rl_jax.data.jsonl import JsonlTask
from rl_jax.data.ladder import LadderTask, StepCheck, check_steps
from rl_jax.data.math_tasks import MathTask

TASKS["jsonl"] = JsonlTask  # config: task.name='jsonl', task.options.path=FILE
TASKS["ladder"] = LadderTask  # the proving ground (experiments/configs/ladder.py)
TASKS["math"] = MathTask  # GSM8K / MATH / JSONL / TFDS / HF, graded by math-verify

__all__ = [
    "TASKS", "JsonlTask", "LadderTask", "MathTask", "ReasoningGymTask", "StepCheck", "check_steps", "TaskExample", "carry_class", "demonstrations",
    "dropped_carry_answer", "extract_answer", "make_task",
]
