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
