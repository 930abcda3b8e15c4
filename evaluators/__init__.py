"""Research tasks: what agents read, how a submission runs, and how its returned data is scored."""

from .base import Baseline, Task, Verdict, create_task, has_real_code, register

__all__ = ["Baseline", "Task", "Verdict", "create_task", "has_real_code", "register"]
