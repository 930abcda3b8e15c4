"""Where every open evaluation honestly is, for people: queued, running, or finished but not delivered.

An evaluation is *open* while its row says 'queued' (the engine has not applied its result). Within
that, this module tells apart:

    queued       waiting for a free slot (or for a station that is not running)
    running      a sandbox run (or a debugger call) in flight now, with its elapsed time and,
                 for training tasks, the progress the harness last reported
    undelivered  every input recorded; the engine delivers it at the author's next turn

`evaluation_runs` is the evaluation worker's bookkeeping. When no process runs the station,
a row it left 'running' is stale (the run died with the process and starts again on resume), so
a stopped station never shows anything running.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from .pipeline import walk

RECENT_EVALUATIONS = 20  # the failure rate is over this many delivered evaluations
# A task's scorer is failing while one of the task's last SCORER_WINDOW delivered evaluations
# ended `scorer_failed`: a mended scorer stops the alarm after that many evaluations without one.
SCORER_WINDOW = 5


@dataclass
class OpenEvaluation:
    id: int
    task: str
    author: str
    title: str
    submitted_tick: int
    state: str  # queued / running / undelivered
    elapsed_s: float | None = None  # running: since its current run started
    progress: str | None = None  # running: what the harness last reported ("epoch 3", "step 1200")
    version: int | None = None  # running: 1 the author's code, 2... a debugger version (a coder's: None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        if self.state == "running":
            what = f"#{self.id} running {self.elapsed_s or 0:.0f}s"
            return what + (f" ({self.progress})" if self.progress else "")
        return f"#{self.id} {'finished, not delivered yet' if self.state == 'undelivered' else 'queued'}"


def _debugger_settings(store: Any) -> dict[str, Any]:
    cfg = (store.get_meta("config") or {}).get("debugger") or {}
    return {"debugger_enabled": bool(cfg.get("enabled", True)), "max_attempts": int(cfg.get("max_attempts", 1))}


def open_evaluations(store: Any, *, live: bool, now: float | None = None) -> list[OpenEvaluation]:
    """Every undelivered evaluation, oldest first. `live`: a process is running the station now."""
    if not _has_table(store, "evaluations"):
        return []
    now = time.time() if now is None else now
    rows = store.all("SELECT * FROM evaluations WHERE status='queued' ORDER BY id")
    runs: dict[int, Any] = {}
    if live and rows:
        for run in store.all("SELECT * FROM evaluation_runs WHERE state='running' ORDER BY started_at"):
            runs.setdefault(run["evaluation"], run)
    settings = _debugger_settings(store) if rows else {}
    found = []
    for row in rows:
        entry = OpenEvaluation(row["id"], row["task"], row["author"], row["title"], row["tick"], "queued")
        run = runs.get(row["id"])
        if row["instruction"] is not None:  # the research coder's: its session says where it is
            _coder_state(store, row["id"], entry, run, live, now)
        elif run is not None:
            entry.state, entry.version = "running", run["version"]
            entry.elapsed_s = round(max(0.0, now - run["started_at"]), 1)
            entry.progress = run["progress"] if "progress" in run.keys() else None
        elif walk(row, lambda key, kind, make: store.get_input(key), run_code=None, debug=None, **settings) is not None:
            entry.state = "undelivered"
        found.append(entry)
    return found


def _coder_state(store: Any, evaluation: int, entry: OpenEvaluation, run: Any, live: bool, now: float) -> None:
    """A coder's evaluation: undelivered once its session handed in its report (or a command
    back-end's session ended), else running while the coder works (its turns, or a command
    back-end's model calls, so far and the attempt running, if one is), else queued."""
    low, high = f"coder/{evaluation}/", f"coder/{evaluation}0"
    found = store.one(
        "SELECT SUM(kind IN ('worker_turn', 'worker_call')), "
        "MAX((kind='worker_tool' AND json_extract(payload, '$.final') = 1) OR kind='worker_end') "
        "FROM inputs WHERE key >= ? AND key < ?",
        (low, high),
    )
    turns, final = (found[0], found[1]) if found is not None else (0, 0)
    if final:
        entry.state = "undelivered"
    elif live and (turns or run is not None):
        entry.state, entry.progress = "running", f"coder turn {(turns or 0) + 1}"
        if run is not None:  # (no `version`: that names a debugger's version)
            entry.elapsed_s = round(max(0.0, now - run["started_at"]), 1)
            entry.progress += f", official attempt {run['version']}"


def counts(store: Any, *, live: bool, recent_ticks: int | None = None, tick: int | None = None) -> dict[str, int]:
    """queued / running / undelivered now, and delivered outcomes other than a score, overall or over
    the last `recent_ticks` ticks before `tick`: `failed` (failed or timed out: the code's doing),
    `scorer_failed` (the task's scorer broke) and `system_failed` (given up after repeated system errors)."""
    found = open_evaluations(store, live=live)
    out = {state: sum(1 for e in found if e.state == state) for state in ("queued", "running", "undelivered")}
    out.update(failed=0, scorer_failed=0, system_failed=0)
    if not _has_table(store, "evaluations"):
        return out
    sql = "SELECT status, COUNT(*) FROM evaluations WHERE status NOT IN ('queued', 'finished')"
    params: tuple = ()
    if recent_ticks is not None and tick is not None:
        sql += " AND finished_tick > ?"
        params = (tick - recent_ticks,)
    for status, number in store.all(sql + " GROUP BY status", params):
        key = "failed" if status in ("failed", "timed_out") else status
        if key in out:
            out[key] += number
    return out


def recent_failure_rate(store: Any, last: int = RECENT_EVALUATIONS) -> tuple[int, int]:
    """(failed or timed out, delivered) among the last `last` delivered evaluations by agents."""
    if not _has_table(store, "evaluations"):
        return 0, 0
    rows = store.all(
        "SELECT status FROM evaluations WHERE status != 'queued' AND author != 'System' "
        "ORDER BY finished_tick DESC, id DESC LIMIT ?",
        (last,),
    )
    return sum(1 for r in rows if r["status"] in ("failed", "timed_out")), len(rows)  # the others are no one's fault


def recent_scorer_failures(store: Any, last: int = RECENT_EVALUATIONS) -> list[dict[str, Any]]:
    """Among the last `last` delivered evaluations, those the task's own scorer failed to judge
    (newest first): id, task and the first line of the error, for the operator's alerts."""
    return _recent(store, "scorer_failed", last)


def recent_system_failures(store: Any, last: int = RECENT_EVALUATIONS) -> list[dict[str, Any]]:
    """Among the last `last` delivered evaluations, those given up after repeated identical system
    errors (newest first), as `recent_scorer_failures` lists its own."""
    return _recent(store, "system_failed", last)


def _recent(store: Any, status: str, last: int) -> list[dict[str, Any]]:
    if not _has_table(store, "evaluations"):
        return []
    rows = store.all(
        "SELECT id, task, status, error FROM evaluations WHERE status != 'queued' "
        "ORDER BY finished_tick DESC, id DESC LIMIT ?",
        (last,),
    )
    return [
        {"id": r["id"], "task": r["task"], "error": _first_line(r["error"] or "")}
        for r in rows
        if r["status"] == status
    ]


def scorer_health(store: Any, window: int = SCORER_WINDOW) -> dict[str, dict[str, Any]]:
    """Per task whose scorer ever failed: `failed` (scorer failures in all), `recent_failed` among
    its last `recent` delivered evaluations (at most `window`), `failing` (recent_failed > 0: the
    station is not Healthy), and the newest failure's evaluation and first error line."""
    if not _has_table(store, "evaluations"):
        return {}
    found: dict[str, dict[str, Any]] = {}
    tasks = store.all(
        "SELECT task, COUNT(*) AS failed, MAX(id) AS last FROM evaluations WHERE status='scorer_failed' GROUP BY task"
    )
    for row in tasks:
        recent = [
            r["status"]
            for r in store.all(
                "SELECT status FROM evaluations WHERE task=? AND status != 'queued' "
                "ORDER BY finished_tick DESC, id DESC LIMIT ?",
                (row["task"], window),
            )
        ]
        error = store.scalar("SELECT error FROM evaluations WHERE id=?", (row["last"],)) or ""
        recent_failed = recent.count("scorer_failed")
        found[row["task"]] = {
            "failed": row["failed"],
            "recent_failed": recent_failed,
            "recent": len(recent),
            "failing": recent_failed > 0,
            "last_evaluation": row["last"],
            "last_error": _first_line(error),
        }
    return found


def _first_line(text: str) -> str:
    return text.strip().split("\n")[0][:300]


def summary(store: Any, *, live: bool) -> str:
    """One short line for the live status display, e.g. "evals: #3 running 41s (epoch 2), 2 queued"."""
    found = open_evaluations(store, live=live)
    if not found:
        return ""
    running = [e.describe() for e in found if e.state == "running"]
    queued = sum(1 for e in found if e.state == "queued")
    waiting = sum(1 for e in found if e.state == "undelivered")
    parts = running + ([f"{queued} queued"] if queued else []) + ([f"{waiting} to deliver"] if waiting else [])
    return "evals: " + ", ".join(parts)


def _has_table(store: Any, name: str) -> bool:
    return store.one("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)) is not None
