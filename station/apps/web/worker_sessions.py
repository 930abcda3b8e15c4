"""What the pages of the workers' sessions show: the research coder's session of an evaluation
with its official attempts' station verdicts (the tools back-end's turns, or a command back-end's
starts, relayed model calls and end), and the archive surveyor's sessions with their
request and report, composed of the recorded sessions (station.workers.views) and the rooms' read
models (rooms.research.views, rooms.archive.views). Nothing here writes.
"""

from __future__ import annotations

import sqlite3
from typing import Any, NamedTuple

from rooms.archive import views as archive_views
from rooms.research import views as research_views
from station.apps.web.data import has_table
from station.workers.views import RecordedCommand, RecordedSession, has_session, recorded_command, recorded_session

SURVEYS_LISTED = 50  # of one life, on its agent page (newest first)
ERROR_CHARS = 300  # of a failed attempt's error, shown beside it (the whole run is on the evaluation page)


def has_coder_session(db: sqlite3.Connection, evaluation: int) -> bool:
    return has_session(db, research_views.coder_prefix(evaluation))


def coder_session(db: sqlite3.Connection, evaluation: int, page: int) -> tuple[RecordedSession, dict[tuple, Any]]:
    """One page of the coder's session, and for each of its calls that became an official attempt,
    (turn, call index) -> {"number", "status", "score", "scored", "error"} (status None: not run yet)."""
    session = recorded_session(db, research_views.coder_prefix(evaluation), page=page)
    places = [(turn.number, call.index) for turn in session.turns for call in turn.calls]
    return session, research_views.coder_attempts(db, evaluation, places, error_chars=ERROR_CHARS)


class CommandSession(NamedTuple):
    """A command back-end's session of an evaluation: a page of its relayed model calls (with its
    starts), its official attempts with the station's verdicts, and its end (None: not yet)."""

    calls: RecordedCommand
    attempts: list[dict[str, Any]]
    end: dict[str, Any] | None


def is_command_session(db: sqlite3.Connection, evaluation: int) -> bool:
    """Whether the coder of this evaluation is a command back-end (it recorded a start of its CLI)."""
    return has_session(db, f"{research_views.coder_prefix(evaluation)}/spawn")


def command_session(db: sqlite3.Connection, evaluation: int, page: int) -> CommandSession:
    return CommandSession(
        recorded_command(db, research_views.coder_prefix(evaluation), page=page),
        research_views.command_attempts(db, evaluation, error_chars=ERROR_CHARS),
        research_views.command_end(db, evaluation),
    )


def survey(db: sqlite3.Connection, number: int) -> dict[str, Any] | None:
    """A survey request's row (None: no such survey, or no Archive Surveyor in this station)."""
    return archive_views.survey(db, number) if has_table(db, "surveys") else None


def survey_session(db: sqlite3.Connection, survey_row: dict[str, Any], page: int) -> tuple[RecordedSession, str | None]:
    """One page of the survey's session, and the surveyor's report: the one mailed, or (delivered
    later) the one its finish handed in (None: none yet)."""
    number = survey_row["id"]
    session = recorded_session(db, archive_views.survey_prefix(number), page=page)
    if survey_row.get("report"):
        return session, str(survey_row["report"])
    last = session.turns[-1] if session.last_page and session.turns else None
    final = next((call for call in last.calls if call.final), None) if last else None
    if last is None or final is None:
        return session, None
    return session, archive_views.handed_in_report(db, number, last.number, final.index)


def surveys_of(db: sqlite3.Connection, names: list[str]) -> list[dict[str, Any]]:
    """The surveys asked for under any of these names (one life), newest first."""
    return archive_views.surveys_of(db, names, SURVEYS_LISTED) if has_table(db, "surveys") else []
