"""`station verify`: check a scored construction again, outside any station.

    station verify FOLDER CONSTRUCTION.json               a construction, or a certificate file
    station verify FOLDER --station DIR --evaluation ID   the certificate kept with a station's record

The folder's own scorer judges the construction in the scorer's sandbox, as an evaluation and
`station task check` run it; no submission runs. A certificate (evaluators/certificate.py) has its
SHA-256 checked first, and a record's re-verified value must equal the score the station recorded.
It prints the value and OK, or why not, and exits 0 or 1 (2 for a command that cannot start).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path
from typing import Any

from station.apps.cli_commands import CliError
from station.core.terminal_text import clean


def add_verify_command(sub: Any) -> None:
    s = sub.add_parser(
        "verify", help="check a construction, or the certificate kept with a station's record, with a task's scorer"
    )
    s.add_argument("folder", help="the task folder whose scorer verifies (a native, function-mode folder)")
    s.add_argument(
        "construction", nargs="?", help="a JSON file: the construction itself, or a certificate (sha256, construction)"
    )
    s.add_argument("--station", metavar="DIR", help="a station directory holding the record")
    s.add_argument("--evaluation", type=int, metavar="ID", help="with --station: the evaluation whose record to check")
    s.add_argument("--save", metavar="FILE", help="with --station: also write the record's certificate to FILE")
    s.add_argument("--executor", choices=("local", "ray"), default="local", help="where the scorer runs")
    s.set_defaults(fn=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from evaluators.base import ScorerFailure, create_task

    from_station = args.station is not None or args.evaluation is not None
    if from_station == (args.construction is not None) or (from_station and None in (args.station, args.evaluation)):
        raise CliError("give either CONSTRUCTION.json, or --station DIR with --evaluation ID")
    task = create_task("folder", {"path": args.folder})  # a TaskFolderError (a ValueError) says what is wrong
    if from_station:
        record = _record(Path(args.station), args.evaluation)
        certificate = record["certificate"]
        if args.save:
            Path(args.save).write_text(json.dumps(certificate, indent=1) + "\n", encoding="utf-8")
    else:
        record, certificate = None, _read_json(Path(args.construction))
    try:
        construction = _construction(certificate, certified=from_station)
        verdict = _verify(task, construction, args.executor)
    except ValueError as err:  # the certificate is not what it says
        print(clean(f"REFUSED: {err}"))
        return 1
    except ScorerFailure as err:  # the folder's scorer broke: no verdict either way
        print(clean(f"SCORER FAILED: {err}"))
        return 1
    if not verdict.success:
        print(clean(f"REFUSED: {verdict.details}"))
        return 1
    value = verdict.score if task.folder.settings.higher_is_better else -verdict.score  # type: ignore[attr-defined]
    lines = [f"value: {value!r}", f"details: {verdict.details}"]
    if verdict.certificate is not None:
        lines.append(f"certificate: SHA-256 {verdict.certificate['sha256']}")
    problem = _disagreement(record, verdict) if record is not None else ""
    print(clean("\n".join(lines)))
    if problem:
        print(clean(f"MISMATCH: {problem}"))
        return 1
    print("OK" + (f": evaluation #{args.evaluation}'s recorded score and certificate hold" if record else ""))
    return 0


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise CliError(f"cannot read {path}: {err}") from None
    except ValueError as err:
        raise CliError(f"{path} is not JSON: {err}") from None


def _construction(given: Any, *, certified: bool) -> Any:
    """The construction to verify: a certificate's, once its hash is checked (always so for a
    record's), else the file's content itself."""
    from evaluators import certificate

    if certified or (isinstance(given, dict) and set(given) == {"sha256", "construction"}):
        return certificate.opened(given)
    return given


def _verify(task: Any, construction: Any, executor_kind: str) -> Any:
    from station.core.config import ExecutorConfig
    from station.executors import create_executor

    executor = create_executor(ExecutorConfig(kind=executor_kind), hide=task.private_paths())
    try:
        return task.verify(executor, construction)
    finally:
        executor.close()


def _record(directory: Path, evaluation: int) -> dict[str, Any]:
    """The evaluation's recorded score and its reported run's certificate, read without opening the
    station (read-only: a running station is not disturbed, and its task folder is not needed)."""
    from rooms.research.views import reported_result
    from station.core.store import DB_NAME

    path = directory / DB_NAME
    if not path.is_file():
        raise CliError(f"{directory} is not a station directory (no {DB_NAME})")
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        row = db.execute(
            "SELECT status, score, reported_version FROM evaluations WHERE id = ?", (evaluation,)
        ).fetchone()
        if row is None:
            raise CliError(f"{directory} has no evaluation #{evaluation}")
        status, score, version = row
        payload = reported_result(db, evaluation, version) if version is not None else None
    finally:
        db.close()
    found = json.loads(payload).get("certificate") if payload else None
    if found is None:
        raise CliError(f"evaluation #{evaluation} ({status}) keeps no certificate: its scorer gave none, or it failed")
    return {"score": score, "certificate": found}


def _disagreement(record: dict[str, Any], verdict: Any) -> str:
    """Where the re-verification differs from the record ("" when it agrees)."""
    stated = record["certificate"].get("sha256")
    if verdict.certificate is None or verdict.certificate["sha256"] != stated:
        return "the scorer's certificate of this construction differs from the one recorded"
    if verdict.score != record["score"]:
        return f"the recorded score is {record['score']!r}, the scorer now gives {verdict.score!r}"
    return ""
