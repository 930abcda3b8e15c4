"""The research tasks of a station, built from `research.tasks` in its config (ids "1", "2", ...)."""

from __future__ import annotations

from evaluators.base import Task, create_task
from rooms.research.config import ResearchConfig
from station.core.config import ConfigError
from station.core.context import Context


class ResearchTasks(dict[str, Task]):
    """A station's research tasks by id, attached to its context by the world (`tasks_of`)."""


def tasks_of(ctx: Context) -> ResearchTasks:
    """The station's research tasks (none for a station without research)."""
    return ctx.part(ResearchTasks) or ResearchTasks()


def load_tasks(config: ResearchConfig) -> ResearchTasks:
    tasks = ResearchTasks()
    for number, entry in enumerate(config.tasks, 1):
        try:
            if entry.folder is not None:
                task = create_task("folder", {"path": entry.folder})
            else:
                task = create_task(entry.evaluator or "", entry.params)
        except ValueError as err:
            raise ConfigError(f"invalid station config: research.tasks.{number - 1}: {err}") from None
        if entry.timeout_s is not None:
            task.timeout_s = entry.timeout_s
        tasks[str(number)] = task
    return tasks
