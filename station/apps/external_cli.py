"""`station external DIR`: the paper's external evaluation of a station's best submissions, printed
as its tables print them (mean ± standard error over seeds) and kept for the viewer.

What is run, and how, is the Research Counter's (rooms/research/external_evaluation.py); here:
the command's arguments, its progress lines and what it prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from station.apps.cli_commands import CliError
from station.core.terminal_text import clean


def add_external_command(sub: Any) -> None:
    s = sub.add_parser(
        "external",
        help="run a station's best submissions again the paper's external way (test split, more seeds) "
        "and record mean ± s.e.",
    )
    s.add_argument("dir")
    s.add_argument("--task", action="append", default=[], metavar="N", help="only this task's best (repeatable)")
    s.add_argument(
        "--evaluation",
        action="append",
        type=int,
        default=[],
        metavar="ID",
        help="run these evaluations instead of each task's best (repeatable)",
    )
    s.add_argument("--seeds", type=int, help="seeds per submission (default: the paper's count for the task)")
    s.add_argument("--json", action="store_true", help="print the results as JSON")
    s.add_argument(
        "--allow-changed-storage",
        action="store_true",
        help="run a submission even though the research storage it reads changed since it was scored "
        "(its result is flagged as run against changed storage)",
    )
    s.set_defaults(fn=cmd_external)


def cmd_external(args: argparse.Namespace) -> int:
    from rooms.research.config import ResearchConfig
    from rooms.research.external_evaluation import chosen, evaluate_externally, hidden_paths, record, storage_changes
    from rooms.research.tasks import tasks_of
    from station.apps.world import Station
    from station.executors import create_executor

    if args.seeds is not None and args.seeds < 1:
        raise CliError("--seeds must be at least 1")
    station = Station.open(args.dir)
    try:
        tasks = tasks_of(station.ctx)
        if not tasks:
            raise CliError(f"{args.dir} has no research task to evaluate")
        try:
            rows = chosen(station.store, tasks, args.task, args.evaluation)
            # said before anything runs: a task without an external protocol, a dataset that has no test split
            plans = [tasks[row["task"]].external(args.seeds) for row in rows]
        except ValueError as err:
            raise CliError(str(err)) from None
        changes = unchanged_storage(station.store, rows, args.allow_changed_storage)
        config = station.config.section(ResearchConfig).executor
        hidden = [
            station.dir,
            *(path for task in tasks.values() for path in task.private_paths()),
            *hidden_paths(plans),
        ]
        executor = create_executor(config, hide=hidden, scratch_base=config.scratch_dir)
        results = []
        try:
            for row, plan in zip(rows, plans):
                outcome = evaluate_externally(station.store, plan, row, executor, say, changes[row["id"]])
                during = storage_changes(station.store, row)
                if during and during != changes[row["id"]]:  # written while it ran (a station running beside)
                    outcome.protocol += f"; STORAGE CHANGED DURING THE RUN: {during}"
                record(station.store, outcome)
                results.append(shown_result(row, tasks[row["task"]], outcome))
                if not args.json:
                    print(clean(result_text(results[-1])), flush=True)
        finally:
            executor.close()
    finally:
        station.close()
    if args.json:
        print(json.dumps(results, indent=2))
    return 0 if all(r["status"] == "finished" for r in results) else 1


def unchanged_storage(store: Any, rows: list[Any], allowed: bool) -> dict[int, str]:
    """Each evaluation's storage_changes ("" when its storage is as it was scored). A submission runs
    only against the storage it was scored with (code planted there since would run as its own),
    unless `allowed`: then its result is flagged."""
    from rooms.research.external_evaluation import storage_changes

    changes = {row["id"]: storage_changes(store, row) for row in rows}
    refused = [line for line in changes.values() if line]
    if refused and not allowed:
        raise CliError(
            "; ".join(refused) + ". Not run: a re-run would read other inputs than its scoring did. Pass "
            "--allow-changed-storage to run it anyway (the result is flagged as run against changed storage)"
        )
    return changes


def say(line: str) -> None:
    print(f"external: {line}", file=sys.stderr, flush=True)


def shown_result(row: Any, task: Any, outcome: Any) -> dict[str, Any]:
    return {
        "task": row["task"],
        "task_title": task.title,
        "evaluation": row["id"],
        "title": row["title"],
        "author": row["author"],
        "internal": row["score"],
        "protocol": outcome.protocol,
        "status": outcome.status,
        "mean": outcome.mean,
        "se": outcome.standard_error,
        "samples": outcome.samples,
        "failures": outcome.failures,
        "metrics": outcome.metrics,
        "executor": outcome.executor,
        "changed_storage": "CHANGED STORAGE" in outcome.protocol,
        "duration_s": round(outcome.duration_s, 1),
        "precision": task.display_precision,
    }


def result_text(result: dict[str, Any]) -> str:
    digits = result["precision"]
    if result["status"] == "finished":
        external = f"{result['mean']:.{digits}f}"
        external += f" ± {result['se']:.{digits}f}" if result["se"] is not None else " (one score: no ±)"
    else:
        external = "no score: " + "; ".join(result["failures"])
    scores = len(result["samples"])  # one per seed (or per run of a deterministic task)
    lines = [
        f"task {result['task']} ({result['task_title']}): evaluation #{result['evaluation']} "
        f'"{result["title"]}" by {result["author"]}',
        f"  internal:  {result['internal']:.{digits}f}" if result["internal"] is not None else "  internal:  n.a.",
        f"  external:  {external}",
        f"  protocol:  {result['protocol']}; {scores} score{'s' * (scores != 1)}; "
        f"{result['executor']} executor, {result['duration_s']:.0f} s",
    ]
    lines += [f"    {name}: {value:.4g}" for name, value in result["metrics"].items() if value is not None]
    return "\n".join(lines)
