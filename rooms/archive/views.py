"""Read models of the Archive: its papers (archive capsules), paper submissions with the
reviewer's exchanges, and surveys (their sessions: station.workers.views), as the terminal readers
and the web viewer show them, in plain dicts and lists.

Nothing here writes. The callers check that the tables exist (`capsules` for papers,
`paper_submissions` and `paper_reviews` for submissions, `surveys` for surveys). The connection's row factory is `sqlite3.Row`
(the store's and the web's are): the dicts are made of its rows.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, NamedTuple

from .room import REVIEWER
from .survey_session import prefix as survey_prefix  # the key prefix of survey N's session, for the viewer

Record = dict[str, Any]  # one row: column name -> its SQLite value
PARAMETER_LIMIT = 500  # numbers bound in one statement: under SQLite's limit on bound parameters


def _records(db: sqlite3.Connection, sql: str, params: tuple = ()) -> list[Record]:
    """Every row of the query, each as a dict by column name."""
    return [dict(row) for row in db.execute(sql, params)]


def _first(db: sqlite3.Connection, sql: str, params: tuple = ()) -> Record | None:
    found = _records(db, sql, params)
    return found[0] if found else None


# -- papers ---------------------------------------------------------------------------------------
def _papers_where(include_deleted: bool) -> str:
    return "c.room='archive' AND c.scope=''" + ("" if include_deleted else " AND c.deleted=0")


def paper_count(db: sqlite3.Connection, *, include_deleted: bool) -> int:
    """How many papers the Archive published (deleted ones only with `include_deleted`)."""
    return int(db.execute(f"SELECT COUNT(*) FROM capsules c WHERE {_papers_where(include_deleted)}").fetchone()[0])


def paper_page(db: sqlite3.Connection, *, include_deleted: bool, limit: int, offset: int) -> list[Record]:
    """One page of the Archive's papers by number: each capsule row with `replies` (live messages
    after the body that are not the review) and `review` (the reviewer's first message, or None)."""
    return _records(
        db,
        "SELECT c.*, (SELECT COUNT(*) FROM capsule_messages m WHERE m.capsule=c.id AND m.k>1 AND m.deleted=0 "
        "             AND NOT (m.author=? AND m.author_session IS NULL)) AS replies, "
        "       (SELECT m.content FROM capsule_messages m WHERE m.capsule=c.id AND m.author=? "
        "             AND m.author_session IS NULL ORDER BY m.k LIMIT 1) AS review "
        f"FROM capsules c WHERE {_papers_where(include_deleted)} ORDER BY c.number LIMIT ? OFFSET ?",
        (REVIEWER.name, REVIEWER.name, limit, offset),
    )


def published_papers(db: sqlite3.Connection, limit: int = 500) -> list[Record]:
    """The live papers, newest first, each capsule row with `score`: the best score of the
    submissions published as it (None: none was scored)."""
    return _records(
        db,
        "SELECT c.*, s.score FROM capsules c LEFT JOIN (SELECT capsule_number, MAX(score) AS score "
        "FROM paper_submissions WHERE capsule_number IS NOT NULL GROUP BY capsule_number) s "
        "ON s.capsule_number=c.number WHERE c.room='archive' AND c.deleted=0 ORDER BY c.number DESC LIMIT ?",
        (limit,),
    )


def papers_containing(db: sqlite3.Connection, text: str) -> list[Record]:
    """Live papers by number whose abstract or one of their author's live messages contains `text`:
    number, title, author, created_tick and that message's `content` (a paper once per message)."""
    return _records(
        db,
        "SELECT DISTINCT c.number, c.title, c.author, c.created_tick, m.content FROM capsule_messages m "
        "JOIN capsules c ON c.id=m.capsule WHERE c.room='archive' AND c.scope='' AND c.deleted=0 AND m.deleted=0 "
        "AND m.author=c.author AND (m.content LIKE ? OR c.abstract LIKE ?) ORDER BY c.number",
        (f"%{text}%", f"%{text}%"),
    )


# -- submissions ----------------------------------------------------------------------------------
def accepted_submissions(db: sqlite3.Connection, numbers: list[int]) -> dict[int, Record]:
    """The accepted submission ({"id", "score"}) behind each of these paper numbers (the latest, if several)."""
    found: dict[int, Record] = {}
    for start in range(0, len(numbers), PARAMETER_LIMIT):
        part = numbers[start : start + PARAMETER_LIMIT]
        rows = db.execute(
            "SELECT id, score, capsule_number FROM paper_submissions WHERE status='accepted' "
            f"AND capsule_number IN ({','.join('?' * len(part))}) ORDER BY id",
            tuple(part),
        )
        found.update({number: {"id": sid, "score": score} for sid, score, number in rows})  # the latest wins
    return found


def submission(db: sqlite3.Connection, sid: int) -> Record | None:
    """One submission's row (published or not), or None."""
    return _first(db, "SELECT * FROM paper_submissions WHERE id=?", (sid,))


def submission_ids(db: sqlite3.Connection) -> list[int]:
    """Every submission's id (to say which exist)."""
    return [r[0] for r in db.execute("SELECT id FROM paper_submissions")]


def verdict(db: sqlite3.Connection, sid: int) -> str | None:
    """The reviewer's verdict of a submission as stored (JSON text; None: none, or no such submission)."""
    row = db.execute("SELECT verdict FROM paper_submissions WHERE id=?", (sid,)).fetchone()
    return row[0] if row else None


def _unpublished_where(status: str | None) -> tuple[str, tuple]:
    return ("status=?", (status,)) if status else ("status!='accepted'", ())


def unpublished_count(db: sqlite3.Connection, status: str | None = None) -> int:
    """How many submissions have `status` (None: every status but accepted)."""
    where, params = _unpublished_where(status)
    return int(db.execute(f"SELECT COUNT(*) FROM paper_submissions WHERE {where}", params).fetchone()[0])


def unpublished_page(db: sqlite3.Connection, status: str | None, limit: int, offset: int) -> list[Record]:
    """One page by id of the submissions with `status` (None: every status but accepted)."""
    where, params = _unpublished_where(status)
    return _records(
        db, f"SELECT * FROM paper_submissions WHERE {where} ORDER BY id LIMIT ? OFFSET ?", (*params, limit, offset)
    )


def submissions(db: sqlite3.Connection, status: str | None = None, limit: int = 500) -> list[Record]:
    """Submissions newest first (published or not), optionally of one status: their headline fields."""
    where, params = ("status=?", (status,)) if status else ("1", ())
    return _records(
        db,
        "SELECT id, tick, agent, lineage, title, status, score, decided_tick, capsule_number "
        f"FROM paper_submissions WHERE {where} ORDER BY id DESC LIMIT ?",
        (*params, limit),
    )


def status_counts(db: sqlite3.Connection) -> dict[str, int]:
    """How many submissions have each status."""
    return {r[0]: r[1] for r in db.execute("SELECT status, COUNT(*) FROM paper_submissions GROUP BY status")}


def pending_count(db: sqlite3.Connection) -> int:
    """How many submissions wait for the reviewer."""
    return int(db.execute("SELECT COUNT(*) FROM paper_submissions WHERE status='pending'").fetchone()[0])


def first_submission_of_paper(db: sqlite3.Connection, number: int) -> int | None:
    """The id of the first submission published as paper `number`, or None."""
    row = db.execute(
        "SELECT id FROM paper_submissions WHERE capsule_number=? ORDER BY id LIMIT 1", (number,)
    ).fetchone()
    return row[0] if row else None


def submissions_of_session(db: sqlite3.Connection, session: int, limit: int) -> list[Record]:
    """One session's latest submissions: id, title, status, score, tick and capsule_number."""
    return _records(
        db,
        "SELECT id, title, status, score, tick, capsule_number FROM paper_submissions WHERE session=? "
        "ORDER BY id DESC LIMIT ?",
        (session, limit),
    )


def reviews(db: sqlite3.Connection, sid: int) -> list[Record]:
    """The reviewer's exchanges about one submission (context turns and attempts), in order."""
    return _records(db, "SELECT * FROM paper_reviews WHERE submission=? ORDER BY id", (sid,))


REVIEWER_NAME = REVIEWER.name  # who writes every review: not an agent
# "paper 7", "Paper #7", "paper no. 7", "Archive #7", "archive paper 7": how a text names a published paper.
PAPER_MENTION = re.compile(r"\b(?:archive\s+paper|paper|archive)\s*(?:no\.?\s*|#\s*)?(\d{1,9})\b", re.IGNORECASE)


def papers_named(text: str | None) -> list[int]:
    """Paper numbers the text names, in order of first mention."""
    return list(dict.fromkeys(int(match.group(1)) for match in PAPER_MENTION.finditer(text or "")))


class Decision(NamedTuple):
    """The reviewer's decision on one submission (a review that accepted or rejected it)."""

    submission: int
    tick: int
    decision: str  # accepted / rejected
    author: str
    session: int
    paper: int | None  # its paper number once published


def decisions(db: sqlite3.Connection, first: int | None = None, last: int | None = None) -> list[Decision]:
    """Every review that decided a submission from tick `first` to `last` (default all), by review id."""
    span = (-(2**62) if first is None else first, 2**62 if last is None else last)
    return [
        Decision(*row)
        for row in db.execute(
            "SELECT r.submission, r.tick, r.decision, s.agent, s.session, s.capsule_number FROM paper_reviews r "
            "JOIN paper_submissions s ON s.id=r.submission WHERE r.decision IN ('accepted', 'rejected') "
            "AND r.tick BETWEEN ? AND ? ORDER BY r.id",
            span,
        )
    ]


# -- surveys --------------------------------------------------------------------------------------
def survey(db: sqlite3.Connection, number: int) -> Record | None:
    """One survey's row (question, status, report, mail...), or None. Its session is read with
    station.workers.views.recorded_session under `survey_prefix(number)`."""
    return _first(db, "SELECT * FROM surveys WHERE id=?", (number,))


def surveys_of(db: sqlite3.Connection, names: list[str], limit: int) -> list[Record]:
    """The latest `limit` surveys asked for under any of these names (one life), newest first: id,
    tick, status, end_reason, prompt and finished_tick."""
    if not names:
        return []
    return _records(
        db,
        "SELECT id, tick, status, end_reason, prompt, finished_tick FROM surveys "
        f"WHERE agent IN ({','.join('?' * len(names))}) ORDER BY id DESC LIMIT ?",
        (*names, limit),
    )


def handed_in_report(db: sqlite3.Connection, number: int, turn: int, index: int) -> str | None:
    """The report that call `index` of turn `turn` of a survey's session handed in (its recorded
    result's `report`: the surveyor's finish), or None."""
    found = db.execute(
        "SELECT json_extract(payload, '$.report') FROM inputs WHERE key=?",
        (f"{survey_prefix(number)}/tool/{turn}/{index}",),
    ).fetchone()
    return found[0] if found and isinstance(found[0], str) else None
