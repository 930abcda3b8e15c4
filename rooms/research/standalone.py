"""`station evaluate`: one submission through a task's evaluator in the sandbox, outside any station.

It runs exactly what a station runs (the same executor, limits and scoring), so a user can
check a submission, or a task's configuration, before a long run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluators.base import ScorerFailure, Task, create_task, has_real_code
from rooms.research.config import ResearchConfig
from station.core.config import ConfigError, load_config
from station.core.run_types import Mount, RunResult
from station.executors.runfiles import Refused, sweep, work_base, work_folder

from .tasks import load_tasks
from .worker import run_payload, scorer_failed_payload


def resolve_task(spec: str, task_id: str | None = None) -> tuple[Task, Any]:
    """A task from a station config file (its task `task_id`, default the first), a task folder, or
    `name[:key=value,...]`."""
    path = Path(spec)
    if path.is_dir():
        return create_task("folder", {"path": str(path)}), None
    if path.suffix in (".yaml", ".yml") or path.is_file():
        config = load_config(path)
        tasks = load_tasks(config.section(ResearchConfig))
        if not tasks:
            raise ConfigError(f"{path} configures no research task (research.tasks is empty)")
        wanted = task_id or "1"
        if wanted not in tasks:
            raise ConfigError(f"{path} has no task {wanted!r}; its tasks: {', '.join(tasks)}")
        return tasks[wanted], config.section(ResearchConfig).executor
    name, _, raw = spec.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, raw.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"task parameters look like name:key=value,key=value (got {item!r})")
        params[key.strip()] = _number(value.strip())
    return create_task(name, params), None


def _number(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def evaluate(task: Task, code: str, executor: Any, storage: Path | None = None) -> dict[str, Any]:
    """Run and score `code`; returns the recorded-result shape (status, score, metrics, details, logs)."""
    if not has_real_code(code):
        raise ValueError("the submission holds no code (only comments or docstrings)")
    problem = task.validate_code(code)
    if problem:
        raise ValueError(f"the task refuses this code: {problem}")
    sweep(work_base(executor))  # what a killed `station evaluate` or station left there
    with work_folder(work_base(executor), "evaluate") as scratch:
        root = storage or scratch
        mounts = []
        for area in ("shared", "system", "lineage"):
            (root / area).mkdir(parents=True, exist_ok=True)
            mounts.append(Mount(root / area, f"storage/{area}", writable=area != "system"))
        try:
            result = task.execute(executor, code, mounts=mounts, label="evaluate")
        except ScorerFailure as failure:
            return scorer_failed_payload(failure, executor.name)
        except Refused as err:  # what the submission left could not be handled: its failure
            result = RunResult(status="error", error=f"Refused: {err}")
    return run_payload(task, result, executor.name)


def evaluate_baselines(task: Task, executor: Any) -> list[dict[str, Any]]:
    """Each of the task's baselines evaluated as a station does at creation (`station task check`)."""
    return [{"title": b.title, **evaluate(task, b.code, executor)} for b in task.baselines()]
