"""Read models of the capsule rooms (forum, mail, private notes, papers): the queries of the capsule
tables that the terminal readers and the web viewer show, returning plain dicts, lists and numbers.

Nothing here writes. The callers check that the capsule tables exist (a station without capsule
rooms has none). The connection's row factory is `sqlite3.Row` (the store's and the web's are): the
dicts are made of its rows.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any, NamedTuple

Record = dict[str, Any]  # one row: column name -> its SQLite value

# The orders a room's thread list can be shown in (the web's `sort`), as SQL over `capsules`.
THREAD_SORTS = {
    "recent": "updated_tick DESC, id DESC",
    "oldest": "number",
    "longest": "message_count DESC, updated_tick DESC",
}


def _records(db: sqlite3.Connection, sql: str, params: tuple = ()) -> list[Record]:
    """Every row of the query, each as a dict by column name."""
    return [dict(row) for row in db.execute(sql, params)]


def find_capsule(db: sqlite3.Connection, room: str, number: int, scope: str = "") -> Record | None:
    """One capsule's row (deleted or not), or None when the room has no such number in `scope`."""
    found = _records(db, "SELECT * FROM capsules WHERE room=? AND scope=? AND number=?", (room, scope, number))
    return found[0] if found else None


def capsule_numbers(db: sqlite3.Connection, room: str, scope: str = "") -> list[int]:
    """Every capsule number of a room's scope, deleted ones too (to say which numbers exist)."""
    return [r[0] for r in db.execute("SELECT number FROM capsules WHERE room=? AND scope=?", (room, scope))]


def messages(db: sqlite3.Connection, capsule_id: int, *, limit: int = -1, offset: int = 0) -> list[Record]:
    """A capsule's message rows by k (deleted ones too), from `offset` on, at most `limit` (-1: all)."""
    return _records(
        db, "SELECT * FROM capsule_messages WHERE capsule=? ORDER BY k LIMIT ? OFFSET ?", (capsule_id, limit, offset)
    )


def message_counts(db: sqlite3.Connection, capsule_id: int) -> tuple[int, int]:
    """(messages, messages not deleted) of one capsule."""
    total, live = db.execute(
        "SELECT COUNT(*), COALESCE(SUM(deleted=0), 0) FROM capsule_messages WHERE capsule=?", (capsule_id,)
    ).fetchone()
    return total, live


def writers(db: sqlite3.Connection, capsule_id: int) -> list[str]:
    """The names that wrote in a capsule, in the order of their first message."""
    return [
        r[0]
        for r in db.execute(
            "SELECT author FROM capsule_messages WHERE capsule=? GROUP BY author ORDER BY MIN(k)", (capsule_id,)
        )
    ]


def private_scopes(db: sqlite3.Connection) -> list[str]:
    """The lineages (scopes) that hold private notes, sorted."""
    return [r[0] for r in db.execute("SELECT DISTINCT scope FROM capsules WHERE room='private_memory' ORDER BY scope")]


def private_scopes_of(db: sqlite3.Connection, number: int) -> list[str]:
    """The lineages that hold a private note of this number, sorted."""
    return [
        r[0]
        for r in db.execute(
            "SELECT scope FROM capsules WHERE room='private_memory' AND number=? ORDER BY scope", (number,)
        )
    ]


def room_threads(
    db: sqlite3.Connection, room: str, limit: int, *, writer: str = "", sort: str = "recent"
) -> list[Record]:
    """A room's live threads in a THREAD_SORTS order (unknown: "recent"), recipients decoded;
    `writer`: only those this agent wrote in (or, for mail, was sent)."""
    where, params = "room=? AND deleted=0", [room]
    if writer:
        where += " AND (id IN (SELECT capsule FROM capsule_messages WHERE author=?)"
        where += " OR EXISTS (SELECT 1 FROM json_each(recipients) WHERE value=?))" if room == "mail" else ")"
        params += [writer, writer] if room == "mail" else [writer]
    found = _records(
        db,
        f"SELECT * FROM capsules WHERE {where} ORDER BY {THREAD_SORTS.get(sort, THREAD_SORTS['recent'])} LIMIT ?",
        (*params, limit),
    )
    for thread in found:
        thread["recipients"] = json.loads(thread["recipients"])
    return found


def threads_written(db: sqlite3.Connection, session: int, room: str, limit: int) -> list[Record]:
    """The live threads of a room one session wrote in, latest activity first: number, title, author,
    updated_tick and `mine` (how many of its messages are that session's)."""
    return _records(
        db,
        "SELECT c.number, c.title, c.author, c.updated_tick, COUNT(*) AS mine FROM capsule_messages m "
        "JOIN capsules c ON c.id=m.capsule WHERE m.author_session=? AND c.room=? AND c.deleted=0 "
        "GROUP BY c.id ORDER BY c.updated_tick DESC LIMIT ?",
        (session, room, limit),
    )


def change_mark(db: sqlite3.Connection) -> str:
    """A fingerprint of every capsule message and deletion: it changes whenever a message is added,
    edited (its words), or a message or capsule deleted."""
    counts = db.execute("SELECT COUNT(*), MAX(id), SUM(word_count), SUM(deleted) FROM capsule_messages").fetchone()
    deleted = db.execute("SELECT SUM(deleted) FROM capsules").fetchone()[0]
    return "/".join(str(v) for v in counts) + "/" + str(deleted)


class LiveMessage(NamedTuple):
    """One message of a thread, with the thread's room, number and title."""

    capsule: int
    room: str
    number: int
    title: str
    author: str
    tick: int
    content: str


def live_messages(db: sqlite3.Connection) -> list[LiveMessage]:
    """Every message not deleted of every capsule not deleted (what a full-text index holds)."""
    return [
        LiveMessage(*row)
        for row in db.execute(
            "SELECT c.id, c.room, c.number, c.title, m.author, m.tick, m.content FROM capsule_messages m "
            "JOIN capsules c ON c.id=m.capsule WHERE m.deleted=0 AND c.deleted=0"
        )
    ]


@dataclass(frozen=True)
class Talk:
    """One mail or forum message and whom it could address: the thread's recipients and starter
    (mail), or those who wrote in the thread before it (forum)."""

    room: str
    author: str
    recipients: list[str]
    starter: str
    earlier_writers: list[str]


def talk_between(db: sqlite3.Connection, first: int, last: int) -> list[Talk]:
    """The mail and forum messages written from tick `first` to `last`."""
    return [
        Talk(room, author, json.loads(recipients), starter, json.loads(earlier))
        for room, author, recipients, starter, earlier in db.execute(
            "SELECT c.room, m.author, c.recipients, c.author, "
            "(SELECT json_group_array(DISTINCT p.author) FROM capsule_messages p WHERE p.capsule=c.id AND p.k<m.k) "
            "FROM capsule_messages m JOIN capsules c ON c.id=m.capsule "
            "WHERE c.room IN ('mail', 'public_memory') AND m.tick BETWEEN ? AND ?",
            (first, last),
        )
    ]


class ThreadMessage(NamedTuple):
    """One message of a capsule, with its capsule's room, scope, number, starter and recipients."""

    room: str
    scope: str
    number: int
    k: int
    starter: str
    starter_session: int | None
    recipients: str  # the capsule's recipients now, as JSON text (mail)
    author: str
    author_session: int | None
    tick: int
    title: str | None
    abstract: str | None  # the capsule's abstract (shown with message 1)
    content: str


def thread_messages(db: sqlite3.Connection, first: int | None = None, last: int | None = None) -> list[tuple[Any, ...]]:
    """Every capsule message of every room written from tick `first` to `last` (default all), deleted
    ones too (what was written stays written), by id: plain tuples in ThreadMessage's field order (a
    station holds hundreds of thousands)."""
    span = "" if first is None and last is None else "WHERE m.tick BETWEEN ? AND ? "
    return db.execute(
        "SELECT c.room, c.scope, c.number, m.k, c.author, c.author_session, c.recipients, m.author, "
        "m.author_session, m.tick, m.title, c.abstract, m.content FROM capsule_messages m "
        f"JOIN capsules c ON c.id=m.capsule {span}ORDER BY m.id",
        _span(first, last) if span else (),
    ).fetchall()


def _span(first: int | None, last: int | None) -> tuple[int, int]:
    """BETWEEN's bounds for an optional first and last tick."""
    return (-(2**62) if first is None else first, 2**62 if last is None else last)


def openings(db: sqlite3.Connection, room: str, numbers: list[int]) -> list[tuple[int, int, int | None]]:
    """(number, tick, author_session) of the first message of the room's threads of these numbers."""
    return db.execute(
        "SELECT c.number, m.tick, m.author_session FROM capsules c JOIN capsule_messages m ON m.capsule=c.id "
        "AND m.k=1 WHERE c.room=? AND c.number IN (SELECT value FROM json_each(?)) ORDER BY m.id",
        (room, json.dumps(numbers)),
    ).fetchall()


class MessageRead(NamedTuple):
    """One session's first read of another writer's capsule message."""

    session: int
    tick: int
    room: str
    scope: str
    number: int
    k: int
    author: str
    author_session: int


def message_reads(db: sqlite3.Connection, first: int | None = None, last: int | None = None) -> list[tuple[Any, ...]]:
    """Every read mark of a message written by another session (the reviewer's messages and one's own
    are left out) from tick `first` to `last` (default all), by reader and message. A mark made before
    reads had ticks (capsule store v3) is given the message's own tick. Plain tuples in MessageRead's
    field order."""
    has_tick = any(row[1] == "tick" for row in db.execute("PRAGMA table_info(capsule_reads)"))
    tick = "COALESCE(r.tick, m.tick)" if has_tick else "m.tick"
    span = "" if first is None and last is None else f"AND {tick} BETWEEN ? AND ? "
    return db.execute(
        f"SELECT r.session, {tick}, c.room, c.scope, c.number, m.k, m.author, m.author_session "
        "FROM capsule_reads r JOIN capsule_messages m ON m.capsule=r.capsule AND m.k=r.k "
        "JOIN capsules c ON c.id=m.capsule WHERE m.author_session IS NOT NULL AND m.author_session!=r.session "
        f"{span}ORDER BY r.session, m.id",
        _span(first, last) if span else (),
    ).fetchall()
