"""Read models of the Common Room: the queries of its talk that the web viewer shows (the search
index, the study page's who-talks-to-whom), in plain lists.

Nothing here writes. The callers check that `common_messages` exists. Rows are read by position,
so any connection serves.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple


class Said(NamedTuple):
    """One Common Room message."""

    id: int
    tick: int
    author: str
    content: str


def messages_after(db: sqlite3.Connection, last_id: int) -> list[Said]:
    """The messages after id `last_id`, oldest first."""
    return [
        Said(*row)
        for row in db.execute(
            "SELECT id, tick, author, content FROM common_messages WHERE id>? ORDER BY id", (last_id,)
        )
    ]


def speakers(db: sqlite3.Connection, first: int, last: int) -> list[tuple[int, str]]:
    """(tick, author) of each message from tick `first` to `last`."""
    return [
        (tick, author)
        for tick, author in db.execute(
            "SELECT tick, author FROM common_messages WHERE tick BETWEEN ? AND ?", (first, last)
        )
    ]


class Heard(NamedTuple):
    """A Common Room message read by an agent other than its speaker."""

    message: int
    tick: int  # when it was said
    author: str
    reader: str
    read_tick: int


def hearings(db: sqlite3.Connection, first: int | None = None, last: int | None = None) -> list[Heard]:
    """Every read of a Common Room message said from tick `first` to `last` (default all) by someone
    other than its speaker, by message and reader."""
    span = (-(2**62) if first is None else first, 2**62 if last is None else last)
    return [
        Heard(*row)
        for row in db.execute(
            "SELECT m.id, m.tick, m.author, r.reader, r.tick FROM common_messages m "
            "JOIN common_reads r ON r.message=m.id WHERE r.reader!=m.author AND m.tick BETWEEN ? AND ? "
            "ORDER BY m.id, r.reader",
            span,
        )
    ]


def said_between(db: sqlite3.Connection, first: int | None = None, last: int | None = None) -> list[Said]:
    """The messages said from tick `first` to `last` (default all), by id."""
    return [
        Said(*row)
        for row in db.execute(
            "SELECT id, tick, author, content FROM common_messages WHERE tick BETWEEN ? AND ? ORDER BY id",
            (-(2**62) if first is None else first, 2**62 if last is None else last),
        )
    ]
