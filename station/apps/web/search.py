"""Full-text search over what agents wrote: replies (and their thinking), every capsule message
(forum, mail, notes, papers and their reviews) and the Common Room.

The index is SQLite FTS5 in its own file, `DIR/search.db`, derived from the station and never
part of it: delete it and it is rebuilt. It catches up incrementally before each search (new
turns by id); capsule messages, which agents may edit or delete, are re-indexed whenever their
fingerprint (count, last id, total words) changes.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from html import escape
from pathlib import Path
from typing import Any

from markupsafe import Markup

from rooms import capsule_views, common_views
from station.apps.web.data import has_table

INDEX_NAME = "search.db"
MARK_OPEN, MARK_CLOSE = "\x02", "\x03"  # snippet markers, escaped-safe
PER_PAGE = 30


def fts_query(text: str) -> str | None:
    """A user's words as an FTS5 query: every word must appear (quoted, so no syntax errors)."""
    words = [w for w in re.findall(r"\w+", text.lower()) if w][:12]
    return " ".join('"' + w.replace('"', '""') + '"' for w in words) or None


class SearchIndex:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / INDEX_NAME
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(
            "CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(body, kind UNINDEXED, ref UNINDEXED, "
            "title UNINDEXED, who UNINDEXED, tick UNINDEXED, tokenize='unicode61');"
            "CREATE TABLE IF NOT EXISTS progress (source TEXT PRIMARY KEY, mark TEXT NOT NULL);"
        )
        return db

    def refresh(self, world: sqlite3.Connection) -> None:
        """Bring the index up to date with the station (cheap when nothing changed)."""
        with self._lock:
            db = self._connect()
            try:
                with db:
                    # before reading the marks: a second process refreshing this index (two viewers
                    # of one station) waits here, rather than indexing the same rows again
                    db.execute("BEGIN IMMEDIATE")
                    self._turns(db, world)
                    self._capsules(db, world)
                    self._common(db, world)
            finally:
                db.close()

    @staticmethod
    def _mark(db: sqlite3.Connection, source: str) -> str | None:
        row = db.execute("SELECT mark FROM progress WHERE source=?", (source,)).fetchone()
        return row[0] if row else None

    @staticmethod
    def _set_mark(db: sqlite3.Connection, source: str, mark: str) -> None:
        db.execute(
            "INSERT INTO progress(source, mark) VALUES(?, ?) ON CONFLICT(source) DO UPDATE SET mark=?",
            (source, mark, mark),
        )

    def _turns(self, db: sqlite3.Connection, world: sqlite3.Connection) -> None:
        last = int(self._mark(db, "turns") or 0)
        rows = world.execute(
            "SELECT id, tick, agent, reply, thinking FROM turns WHERE id>? ORDER BY id", (last,)
        ).fetchall()
        db.executemany(
            "INSERT INTO docs(body, kind, ref, title, who, tick) VALUES(?, 'turn', ?, ?, ?, ?)",
            [(f"{r[3]}\n{r[4] or ''}", r[2], f"{r[2]} at tick {r[1]}", r[2], r[1]) for r in rows],
        )
        if rows:
            self._set_mark(db, "turns", str(rows[-1][0]))

    def _capsules(self, db: sqlite3.Connection, world: sqlite3.Connection) -> None:
        if not has_table(world, "capsule_messages"):
            return
        fingerprint = "by-number/" + capsule_views.change_mark(world)  # threads are linked by their number in the room
        if self._mark(db, "capsules") == fingerprint:
            return
        db.execute("DELETE FROM docs WHERE kind IN ('public_memory', 'mail', 'archive', 'private_memory')")
        db.executemany(
            "INSERT INTO docs(body, kind, ref, title, who, tick) VALUES(?, ?, ?, ?, ?, ?)",
            [
                (f"{m.title}\n{m.content}", m.room, str(m.number), m.title, m.author, m.tick)
                for m in capsule_views.live_messages(world)
            ],
        )
        self._set_mark(db, "capsules", fingerprint)

    def _common(self, db: sqlite3.Connection, world: sqlite3.Connection) -> None:
        if not has_table(world, "common_messages"):
            return
        last = int(self._mark(db, "common") or 0)
        said = common_views.messages_after(world, last)
        db.executemany(
            "INSERT INTO docs(body, kind, ref, title, who, tick) VALUES(?, 'common', ?, ?, ?, ?)",
            [(m.content, m.author, f"Common Room, tick {m.tick}", m.author, m.tick) for m in said],
        )
        if said:
            self._set_mark(db, "common", str(said[-1].id))

    def search(self, text: str, page: int = 1) -> tuple[list[dict[str, Any]], int]:
        query = fts_query(text)
        if query is None:
            return [], 0
        db = self._connect()
        try:
            total = db.execute("SELECT COUNT(*) FROM docs WHERE docs MATCH ?", (query,)).fetchone()[0]
            found = db.execute(
                f"SELECT kind, ref, title, who, tick, snippet(docs, 0, '{MARK_OPEN}', '{MARK_CLOSE}', ' … ', 16) "
                "FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ? OFFSET ?",
                (query, PER_PAGE, (max(1, page) - 1) * PER_PAGE),
            ).fetchall()
        finally:
            db.close()
        hits = [
            {"kind": k, "ref": ref, "title": title, "who": who, "tick": tick, "snippet": _snippet(snip)}
            for k, ref, title, who, tick, snip in found
        ]
        return hits, total


def _snippet(text: str) -> Markup:
    return Markup(escape(text).replace(MARK_OPEN, "<mark>").replace(MARK_CLOSE, "</mark>"))
