"""Task sources: prompts with verifiable answers (see `tasks`)."""

from __future__ import annotations

from rl_jax.data.tasks import (TASKS, ReasoningGymTask, TaskExample, carry_class, demonstrations,
                               dropped_carry_answer, extract_answer, make_task)
from rl_jax.data.jsonl import JsonlTask

TASKS["jsonl"] = JsonlTask  # config: task.name='jsonl', task.options.path=FILE

__all__ = [
    "TASKS", "JsonlTask", "ReasoningGymTask", "TaskExample", "carry_class", "demonstrations",
    "dropped_carry_answer", "extract_answer", "make_task",
]
