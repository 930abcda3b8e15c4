"""What the branches page shows of a multistart folder (docs/multistart.md): its ledger, and of each branch
its state, numbers, last papers and best score over ticks.

Everything is read, never written: the ledger (written whole by `station multistart`, so a read sees
one version), and each branch as the viewer opens any station, also one that is running. Branch
folders are named only by the ledger's branch numbers, and a folder that leads outside `branches/`
(a link) is not opened.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from station.apps import report
from station.apps.web import board, data, plots
from station.core.run_lock import is_running
from station.core.store import DB_NAME, Store

LEDGER = "multistart.json"  # as station/apps/multistart.py writes it
REPORTS = ("selection.md", "guidance.md")  # the administrator's reports, when its rule chose
PAPERS_SHOWN = 3
REPORT_CHARS = 100_000  # a longer report is cut: the page stays readable


def is_multistart(directory: Path) -> bool:
    return (directory / LEDGER).is_file() and not Store.exists(directory)


def read_ledger(directory: Path) -> dict[str, Any]:
    """The ledger, or ValueError naming the file and what is wrong."""
    path = directory / LEDGER
    try:
        ledger = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} cannot be read ({err}); it is not a multistart's ledger") from None
    if not isinstance(ledger, dict) or not isinstance(ledger.get("branch"), dict):
        raise ValueError(f"{path}: no `branch` table; it is not a multistart's ledger")
    return ledger


def branch_numbers(ledger: dict[str, Any]) -> list[int]:
    """The ledger's branch numbers; any other key (a hostile name) is no branch."""
    return sorted(int(key) for key in ledger["branch"] if isinstance(key, str) and key.isdigit() and len(key) < 7)


def branch_dir(directory: Path, number: int) -> Path | None:
    """Branch `number`'s station folder, if it is one and lies inside `branches/`."""
    branches = (directory / "branches").resolve()
    found = (branches / str(number)).resolve()
    return found if found.parent == branches and Store.exists(found) else None


def installed_dir(directory: Path) -> Path | None:
    found = (directory / "station").resolve()
    return found if found.parent == directory.resolve() and Store.exists(found) else None


@dataclass
class Column:
    """One branch as its column shows it."""

    number: int
    state: str
    seed: Any
    opened: bool = False  # its station exists (forked)
    tick: int | None = None
    agents: int | None = None
    best_task: str | None = None
    best_score: float | None = None
    evaluations: int | None = None
    spend_usd: float | None = None
    papers: list[dict[str, Any]] = field(default_factory=list)
    best_over_ticks: list[tuple[float, float]] = field(default_factory=list)
    error: str | None = None


def columns(directory: Path, ledger: dict[str, Any]) -> list[Column]:
    found = []
    carried = ledger.get("start_spend", {}).get("usd", 0.0) if isinstance(ledger.get("start_spend"), dict) else 0.0
    for number in branch_numbers(ledger):
        entry = ledger["branch"][str(number)]
        entry = entry if isinstance(entry, dict) else {}
        column = Column(number, str(entry.get("state", "?")), entry.get("branch_seed"))
        where = branch_dir(directory, number)
        if where is not None:
            try:
                _read_branch(where, column)
                if column.spend_usd is not None and isinstance(carried, (int, float)):
                    column.spend_usd -= carried  # a fork carries the start's spend: its own is shown, as in the table
            except Exception as err:  # noqa: BLE001 - one branch's damage is said in its column, the page stays
                column.error = f"{type(err).__name__}: {err}"
        found.append(column)
    return found


def _read_branch(where: Path, column: Column) -> None:
    from station.apps.world import Station

    station = Station.open_to_read(where)  # as the viewer opens any station, also a running one
    try:
        status = report.status(station, running=is_running(where))
    finally:
        station.close()
    counts = status["counts"]
    best = counts.get("research_best", {})
    first = min(best, key=report.natural_order) if best else None
    column.opened, column.tick, column.agents = True, status["tick"] - 1, len(status["agents"])
    column.best_task, column.best_score = first, best[first]["score"] if first else None
    column.evaluations = sum(
        v for k, v in counts["submissions"].items() if k not in ("queued", "running", "undelivered")
    )
    column.spend_usd = status["spend"]["usd"]
    db = sqlite3.connect(f"file:{where / DB_NAME}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        column.papers = data.papers(db)[:PAPERS_SHOWN]
        if first is not None:
            column.best_over_ticks = _best_over_ticks(board.points(db, board.Filters()), str(first))
    finally:
        db.close()


def _best_over_ticks(points: list[dict[str, Any]], task: str) -> list[tuple[float, float]]:
    """The task's best score so far as steps: it rises at the ticks it rose (the points keep every
    evaluation that raised it) and is flat between."""
    line: list[tuple[float, float]] = []
    for p in sorted((p for p in points if str(p["task"]) == task), key=lambda p: p["tick"]):
        tick, score = float(p["tick"]), float(p["score"])
        if line and score > line[-1][1]:
            line.append((tick, line[-1][1]))  # flat up to this tick, then up
        if not line or score > line[-1][1]:
            line.append((tick, score))
    return line


def best_plot(found: list[Column], until_tick: Any) -> Any:
    """One plot, a line per branch: its best score of the first task over ticks."""
    series = {}
    for c in found:
        if c.best_over_ticks:  # held flat to the branch's tick, so a branch whose best stopped rising shows it
            last_tick = max(c.tick or 0, int(c.best_over_ticks[-1][0]))
            series[f"branch {c.number}"] = [*c.best_over_ticks, (float(last_tick), c.best_over_ticks[-1][1])]
    until = until_tick if isinstance(until_tick, int) else None
    return plots.line_plot(
        series,
        x_label="tick",
        y_label="best score of the first task",
        svg_id="branches-best",
        x_range=(0, until) if until else None,
    )


def reports(directory: Path) -> dict[str, str]:
    """The administrator's selection and guidance reports that exist, by file name (cut when very long)."""
    found = {}
    for name in REPORTS:
        try:
            found[name] = (directory / name).read_text(encoding="utf-8", errors="replace")[:REPORT_CHARS]
        except OSError:
            continue
    return found


def multistart_of(station_dir: Path) -> tuple[Path, str] | None:
    """The multistart folder a station belongs to, and how: it was installed as its `station/`, or is
    one of its `branches/N/` (None: it belongs to none)."""
    station_dir = station_dir.resolve()
    if station_dir.name == "station" and is_multistart(station_dir.parent):
        return station_dir.parent, "was installed by"
    if station_dir.parent.name == "branches" and is_multistart(station_dir.parent.parent):
        return station_dir.parent.parent, f"is branch {station_dir.name} of"
    return None
