"""`station external`: the paper's external evaluation of a station's best submissions.

The paper's tables do not report the Research Counter's scores: the top submission of each task
was evaluated again, externally, on the test split where the task has one, with more seeds or
budget (`Task.external` says how, per task). This does the same for a station: per task the
submission the leaderboard ranks first (or the evaluations named), its reported version's code
(the debugger's fix when it was one), run the task's external way on the station's own executor
(local, Ray, GPUs as `research.executor` configures them).

It stands outside the station's world: no agent sees the result, no world state changes, and the
run reads the author's storage read-only, and only as it was when the evaluation was scored: the
station kept content hashes of that storage with the result (fingerprint.py), and a re-run whose
storage changed since is refused, naming the changed files, unless the caller runs it anyway, and
then its protocol says so (storage_changes). What is kept is one row of `external_evaluations` per
evaluation run again: the mean and standard error over the seeds (the paper's ± values), each
seed's score, the secondary metrics and the evaluator's details; the viewer shows it beside the
internal score.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluators.base import ExternalPlan, ScorerFailure, Task
from station.core.run_types import Mount
from station.core.store import Store

from . import storage as rs
from .fingerprint import changed_files, storage_hashes
from .store import best_evaluation
from .worker import run_payload, scorer_failed_payload

MAX_NAMED = 10  # changed files named in a refusal


@dataclass
class ExternalOutcome:
    """One evaluation run again the external way."""

    evaluation: int
    task: str
    protocol: str
    executor: str
    samples: list[float] = field(default_factory=list)  # each seed's score
    failures: list[str] = field(default_factory=list)  # one line per run that gave no score
    metrics: dict[str, float | None] = field(default_factory=dict)  # mean over runs
    details: str = ""
    duration_s: float = 0.0

    @property
    def status(self) -> str:
        return "finished" if self.samples and not self.failures else "failed"

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.status == "finished" else None

    @property
    def standard_error(self) -> float | None:
        """The standard error of the mean over seeds (sample deviation / √n); None with one seed."""
        if self.status != "finished" or len(self.samples) < 2:
            return None
        return statistics.stdev(self.samples) / math.sqrt(len(self.samples))


def chosen(store: Store, tasks: dict[str, Task], task_ids: list[str], evaluation_ids: list[int]) -> list[Any]:
    """The evaluations to run again: those named, else the best finished one of each task asked
    for (default: every task). Raises ValueError naming what does not exist or has no result."""
    if evaluation_ids:
        rows = []
        for number in evaluation_ids:
            row = store.one("SELECT * FROM evaluations WHERE id=?", (number,))
            if row is None:
                raise ValueError(f"this station has no evaluation #{number}")
            if row["task"] not in tasks:
                raise ValueError(
                    f"evaluation #{number} belongs to task {row['task']}, which this station no longer has"
                )
            rows.append(row)
        return rows
    for task_id in task_ids:
        if task_id not in tasks:
            raise ValueError(f"this station has no task {task_id!r}; its tasks: {', '.join(tasks)}")
    rows = []
    for task_id in task_ids or list(tasks):
        best = best_evaluation(store.all, "e.task = ?", (task_id,))
        if best is None and task_ids:
            raise ValueError(f"task {task_id} has no scored evaluation yet")
        if best is not None:
            rows.append(best)
    if not rows:
        raise ValueError("no task of this station has a scored evaluation yet")
    return rows


def reported_code(store: Store, row: Any) -> str:
    """The code whose result the author was given: the debugger's version when it fixed the run."""
    version = row["reported_version"] or 1
    found = store.one("SELECT code FROM evaluation_versions WHERE evaluation=? AND version=?", (row["id"], version))
    return found["code"] if found is not None else row["code"]


def read_only_storage(store: Store, lineage: str | None) -> list[Mount]:
    """The storage the author's runs saw (shared, system, their lineage), none of it writable."""
    areas = rs.code_areas(rs.storage_root(store.files), lineage, cross_lineage=False)
    return [Mount(source, target, writable=False) for source, target, _ in areas]


def hidden_paths(plans: list[ExternalPlan]) -> list[Path]:
    """What no run may see: every task's private data, held-out datasets' included."""
    return list(dict.fromkeys(path for plan in plans for task in plan.runs for path in task.private_paths()))


def scored_storage(store: Store, row: Any) -> dict[str, str] | None:
    """What the storage held when the reported version was scored (fingerprint.py), as its recorded
    result keeps it; None when it keeps none (scored before the station kept them)."""
    found = store.one(
        "SELECT i.payload FROM evaluation_versions v JOIN inputs i ON i.key=v.input_key "
        "WHERE v.evaluation=? AND v.version=?",
        (row["id"], row["reported_version"] or 1),
    )
    try:
        kept = json.loads(found["payload"]).get("storage") if found is not None else None
    except (ValueError, AttributeError):
        return None
    return kept if isinstance(kept, dict) else None


def storage_changes(store: Store, row: Any) -> str:
    """Empty when the storage `row`'s re-run would read is the one it was scored with; else one line
    saying what changed (or that the scoring kept no record of it)."""
    kept = scored_storage(store, row)
    if kept is None:
        return f"evaluation #{row['id']} kept no record of the storage it was scored with (scored by an older station)"
    changed = changed_files(kept, storage_hashes(store.files, row["lineage"]))
    if not changed:
        return ""
    shown = ", ".join(changed[:MAX_NAMED]) + (
        f" and {len(changed) - MAX_NAMED} more" if len(changed) > MAX_NAMED else ""
    )
    return (
        f"the storage evaluation #{row['id']} was scored with has changed since: {len(changed)} "
        f"file{'s' * (len(changed) != 1)} differ ({shown})"
    )


def evaluate_externally(
    store: Store, plan: ExternalPlan, row: Any, executor: Any, say: Callable[[str], None], changed: str = ""
) -> ExternalOutcome:
    """Run evaluation `row`'s code as `plan` says (its task's `external`); every run's score is kept.
    The executor must hide `hidden_paths` of the plan. `changed` (storage_changes), when the caller
    runs it anyway, flags the outcome: its protocol says the run read changed storage."""
    protocol = plan.protocol + (f"; RUN AGAINST CHANGED STORAGE: {changed}" if changed else "")
    outcome = ExternalOutcome(row["id"], row["task"], protocol, executor.name)
    code, mounts = reported_code(store, row), read_only_storage(store, row["lineage"])
    began = time.monotonic()
    details, metric_runs = [], []
    for run, runner in enumerate(plan.runs, start=1):
        say(f"evaluation #{row['id']}: run {run} of {len(plan.runs)} ({plan.protocol})")
        try:
            result = runner.execute(executor, code, mounts=mounts, label=f"external-{row['id']}-{run}")
            payload = run_payload(runner, result, executor.name)
        except ScorerFailure as failure:
            payload = scorer_failed_payload(failure, executor.name)
        if payload["success"]:
            outcome.samples += payload.get("samples") or [payload["score"]]
            metric_runs.append(payload["metrics"])
        else:
            why = payload["error"] or (payload["details"] or "").split("\n")[0] or payload["status"]
            outcome.failures.append(f"run {run}: {payload['status']}: {why}")
        details.append(payload["details"] or payload["error"] or "")
    outcome.metrics = mean_metrics(metric_runs)
    outcome.details = "\n\n".join(d for d in details if d)
    outcome.duration_s = time.monotonic() - began
    return outcome


def mean_metrics(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each secondary metric's mean over the runs that gave it a number."""
    names = dict.fromkeys(name for metrics in runs for name in metrics)
    means: dict[str, float | None] = {}
    for name in names:
        values = [m[name] for m in runs if isinstance(m.get(name), (int, float)) and math.isfinite(m[name])]
        means[name] = statistics.fmean(values) if values else None
    return means


def record(store: Store, outcome: ExternalOutcome) -> int:
    """Keep one outcome; returns its row id."""
    with store.transaction():
        cur = store.execute(
            "INSERT INTO external_evaluations(evaluation, task, protocol, status, mean, se, samples, failures, "
            "metrics, details, executor, created_at, duration_s) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                outcome.evaluation,
                outcome.task,
                outcome.protocol,
                outcome.status,
                outcome.mean,
                outcome.standard_error,
                json.dumps(outcome.samples),
                json.dumps(outcome.failures),
                json.dumps(outcome.metrics),
                outcome.details,
                outcome.executor,
                time.time(),
                round(outcome.duration_s, 3),
            ),
        )
    return int(cur.lastrowid or 0)
