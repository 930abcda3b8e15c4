"""The research tasks of a station, built from `research.tasks` in its config (ids "1", "2", ...).

A station that runs builds them from their evaluators and folders. A station opened only to be read
never needs those: it gets what the station recorded of each task when it last prepared it to run
(its title, the statement agents read, how its scores show), so a task folder moved or broken while
the station is stopped never hides the station's history.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaluators.base import Task, create_task
from evaluators.folder.task import FolderTask
from rooms.research.config import ResearchConfig, TaskConfig
from station.core.config import ConfigError
from station.core.context import Context
from station.core.run_types import Mount, RunResult
from station.core.store import Store

RECORD_KEY = "research_tasks"  # the station's meta entry holding each task's record, by task id


class ResearchTasks(dict[str, Task]):
    """A station's research tasks by id, attached to its context by the world (`tasks_of`)."""


def tasks_of(ctx: Context) -> ResearchTasks:
    """The station's research tasks (none for a station without research)."""
    return ctx.part(ResearchTasks) or ResearchTasks()


def load_tasks(config: ResearchConfig) -> ResearchTasks:
    """The tasks of a config (a new station, or `station evaluate`): a problem is the config's."""
    return _built(config, _config_error)


def open_tasks(config: ResearchConfig) -> ResearchTasks:
    """The tasks of an existing station that is going to run or score: a task folder that is gone or
    cannot be used is named in one line, with what to do."""
    return _built(config, _unusable)


def _built(config: ResearchConfig, refusal: Callable[[int, TaskConfig, ValueError], ValueError]) -> ResearchTasks:
    tasks = ResearchTasks()
    for number, entry in enumerate(config.tasks, 1):
        try:
            tasks[str(number)] = _task(entry)
        except ValueError as err:
            raise refusal(number, entry, err) from None
    return tasks


def _task(entry: TaskConfig) -> Task:
    if entry.folder is not None:
        task = create_task("folder", {"path": entry.folder})
    else:
        task = create_task(entry.evaluator or "", entry.params)
    if entry.timeout_s is not None:
        task.timeout_s = entry.timeout_s
    return task


def _config_error(number: int, entry: TaskConfig, err: ValueError) -> ValueError:
    return ConfigError(f"invalid station config: research.tasks.{number - 1}: {err}")


def _unusable(number: int, entry: TaskConfig, err: ValueError) -> ValueError:
    if entry.folder is None:
        return _config_error(number, entry, err)
    folder = Path(entry.folder)
    if not folder.is_dir():
        problem = f"task {number}'s folder {folder} is gone (moved or deleted): put it back there, or a link to it"
    else:
        why = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
        problem = f"task {number}'s folder {folder} cannot be used ({why}): mend it (`station task check {folder}`)"
    return ValueError(
        f"{problem}. Only running and scoring need it: status, papers, evaluations and serve read the "
        "station without it"
    )


# -- the station's record of its tasks, for readers -----------------------------------------------
def task_record(task: Task) -> dict[str, Any]:
    """What readers show of a task, as plain JSON."""
    return {
        "kind": task.kind,
        "title": task.title,
        "description": task.description,
        "spec": task.spec(),
        "score": score_words(task),
        "display_precision": task.display_precision,
        "metric_formats": dict(task.metric_formats),
        "timeout_s": task.timeout_s,
    }


def score_words(task: Task) -> str:
    """What a task's shown score is (every stored score is higher-is-better): "" for the task's own
    score, else e.g. "minus the mean squared error" for a folder task whose measure falls as it improves."""
    if isinstance(task, RecordedTask):
        return str(task.record.get("score", ""))
    if isinstance(task, FolderTask):
        settings = task.folder.settings
        return settings.score_name if settings.higher_is_better else f"minus the {settings.score_name}"
    return ""


def record_tasks(store: Store, tasks: ResearchTasks) -> None:
    """Keep the station's record of its tasks as they are now (where it prepares them to run)."""
    records = {number: task_record(task) for number, task in tasks.items()}
    if records and store.get_meta(RECORD_KEY) != records:
        with store.transaction():
            store.set_meta(RECORD_KEY, records)


class RecordedTask(Task):
    """A task as its station recorded it: what readers show. Nothing runs or scores with it."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        self.kind = str(record.get("kind", "task"))
        self.title = str(record.get("title", ""))
        self.description = str(record.get("description", ""))
        self.display_precision = int(record.get("display_precision", Task.display_precision))
        self.metric_formats = dict(record.get("metric_formats") or {})
        self.timeout_s = float(record.get("timeout_s", Task.timeout_s))

    def spec(self) -> str:
        return str(self.record.get("spec", ""))

    def execute(
        self, executor: Any, code: str, *, mounts: list[Mount], label: str, cpu_only: bool = False
    ) -> RunResult:
        # a reader's station never scores: a run here would record a scorer failure for nothing
        raise RuntimeError(f"task {self.title!r} was opened for reading only: open the station to run it")


def recorded_tasks(config: ResearchConfig, store: Store) -> ResearchTasks:
    """The tasks as the station recorded them, for readers. A task it holds no record of yet (a station
    from before records, or never prepared to run) is built as a running station builds it, or, when
    that fails, named from the config."""
    records = store.get_meta(RECORD_KEY) or {}
    tasks = ResearchTasks()
    for number, entry in enumerate(config.tasks, 1):
        record = records.get(str(number))
        if isinstance(record, dict):
            tasks[str(number)] = RecordedTask(record)
            continue
        try:
            tasks[str(number)] = _task(entry)
        except (ValueError, OSError):
            tasks[str(number)] = RecordedTask(_config_record(entry))
    return tasks


def _config_record(entry: TaskConfig) -> dict[str, Any]:
    if entry.folder is not None:
        title = f"the task in {entry.folder}"
        source = f"its folder {entry.folder}"
    else:
        params = ", ".join(f"{key}={value}" for key, value in entry.params.items())
        title = f"{entry.evaluator} ({params})" if params else str(entry.evaluator)
        source = f"its evaluator {entry.evaluator}"
    spec = f"(This station holds no record of the task's statement, and {source} could not be read.)"
    record: dict[str, Any] = {"title": title, "spec": spec}
    if entry.timeout_s is not None:
        record["timeout_s"] = entry.timeout_s
    return record
