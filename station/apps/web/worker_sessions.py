"""What the pages of the workers' sessions read: the research coder's session of an evaluation
(with its official attempts' station scores) and the archive surveyor's sessions (with their
request), over the recorded inputs (station.workers.views) and the rooms' rows. Nothing here writes.

An official attempt is the coder's submit_attempt whose recorded input holds the file's code
(rooms/research/coder.py): the k-th such input, in turn and call order, is attempt k, run and scored
by the station under `eval-run/<evaluation>/<k>`.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from station.apps.web.data import has_table, rows
from station.workers.views import KEY, RecordedSession, has_session, recorded_session

SURVEYS_LISTED = 50  # of one life, on its agent page (newest first)
ERROR_CHARS = 300  # of a failed attempt's error, shown beside it (the whole run is on the evaluation page)


def coder_prefix(evaluation: int) -> str:
    return f"coder/{evaluation}"


def survey_prefix(number: int) -> str:
    return f"survey/{number}"


def has_coder_session(db: sqlite3.Connection, evaluation: int) -> bool:
    return has_session(db, coder_prefix(evaluation))


def coder_session(db: sqlite3.Connection, evaluation: int, page: int) -> tuple[RecordedSession, dict[tuple, Any]]:
    """One page of the coder's session, and for each of its submit_attempt calls that became an
    official attempt, (turn, call index) -> {"number", "status", "score", "scored", "error"}
    (status None: not run yet)."""
    session = recorded_session(db, coder_prefix(evaluation), page=page)
    order = _attempt_calls(db, evaluation)
    wanted = {
        (t.number, c.index): order[(t.number, c.index)]
        for t in session.turns
        for c in t.calls
        if (t.number, c.index) in order
    }
    runs = _runs(db, evaluation, sorted(wanted.values()))
    return session, {place: {"number": k, **runs.get(k, {"status": None})} for place, k in wanted.items()}


def _attempt_calls(db: sqlite3.Connection, evaluation: int) -> dict[tuple[int, int], int]:
    """(turn, call index) -> attempt number, for each recorded tool result that holds attempt code."""
    prefix = coder_prefix(evaluation)
    found = []
    for (key,) in db.execute(
        "SELECT key FROM inputs WHERE key >= ? AND key < ? AND kind='worker_tool' "
        "AND json_type(payload, '$.code') = 'text'",
        (f"{prefix}/tool/", f"{prefix}/tool0"),
    ):
        match = KEY.fullmatch(key[len(prefix) + 1 :])
        if match and match.group(3) is not None:
            found.append((int(match.group(2)), int(match.group(3))))
    return {place: k for k, place in enumerate(sorted(found), start=1)}


def _runs(db: sqlite3.Connection, evaluation: int, numbers: list[int]) -> dict[int, dict[str, Any]]:
    """Attempt k -> the station's verdict of its run: status, score, whether it scored, its error's first line."""
    if not numbers:
        return {}
    keys = [f"eval-run/{evaluation}/{k}" for k in numbers]
    found = db.execute(
        "SELECT key, json_extract(payload, '$.status'), json_extract(payload, '$.score'), "
        "json_extract(payload, '$.success'), substr(json_extract(payload, '$.error'), 1, ?) "
        f"FROM inputs WHERE key IN ({','.join('?' * len(keys))})",
        (ERROR_CHARS, *keys),
    )
    runs = {}
    for key, status, score, success, error in found:
        scored = status == "ok" and bool(success) and isinstance(score, int | float)
        runs[int(key.rsplit("/", 1)[1])] = {
            "status": status,
            "score": score if scored else None,
            "scored": scored,
            "error": error.splitlines()[0] if isinstance(error, str) and error.strip() else None,
        }
    return runs


def survey(db: sqlite3.Connection, number: int) -> dict[str, Any] | None:
    """A survey request's row (None: no such survey, or no Archive Surveyor in this station)."""
    if not has_table(db, "surveys"):
        return None
    found = rows(db, "SELECT * FROM surveys WHERE id=?", (number,))
    return found[0] if found else None


def survey_report(survey_row: dict[str, Any], session: RecordedSession, db: sqlite3.Connection) -> str | None:
    """The surveyor's report: the one mailed, or (delivered later) the one its finish handed in."""
    if survey_row.get("report"):
        return str(survey_row["report"])
    if not session.last_page or not session.turns or not any(c.final for c in session.turns[-1].calls):
        return None
    last = session.turns[-1]
    final = next(c for c in last.calls if c.final)
    found = db.execute(
        "SELECT json_extract(payload, '$.report') FROM inputs WHERE key=?",
        (f"{session.prefix}/tool/{last.number}/{final.index}",),
    ).fetchone()
    return found[0] if found and isinstance(found[0], str) else None


def surveys_of(db: sqlite3.Connection, names: list[str]) -> list[dict[str, Any]]:
    """The surveys asked for under any of these names (one life), newest first."""
    if not names or not has_table(db, "surveys"):
        return []
    return rows(
        db,
        "SELECT id, tick, status, end_reason, prompt, finished_tick FROM surveys "
        f"WHERE agent IN ({','.join('?' * len(names))}) ORDER BY id DESC LIMIT ?",
        (*names, SURVEYS_LISTED),
    )
