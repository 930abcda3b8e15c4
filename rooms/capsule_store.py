"""Capsule storage: the SQLite tables behind the four capsule rooms and the queries they need.

A capsule is a titled thread (message 1 is its body). Numbers are per room and scope (the
lineage for Private Memory); nothing is ever physically deleted. Read marks are kept per
*session*, so a guest's reading carries over when it ascends. Mail visibility is stored as
membership rows (author and recipients, by session) so listings stay indexed lookups.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from station.core.agents import Agent
from station.core.store import Store, dumps

MIGRATIONS = [
    """
    CREATE TABLE capsules (
        id INTEGER PRIMARY KEY,
        room TEXT NOT NULL,
        scope TEXT NOT NULL DEFAULT '',
        number INTEGER NOT NULL,
        author TEXT NOT NULL,
        author_session INTEGER,
        author_lineage TEXT,
        author_generation INTEGER,
        created_tick INTEGER NOT NULL,
        updated_tick INTEGER NOT NULL,
        title TEXT NOT NULL,
        abstract TEXT,
        tags TEXT NOT NULL DEFAULT '[]',
        recipients TEXT NOT NULL DEFAULT '[]',
        deleted INTEGER NOT NULL DEFAULT 0,
        message_count INTEGER NOT NULL DEFAULT 0,
        word_count INTEGER NOT NULL DEFAULT 0,
        UNIQUE (room, scope, number)
    );
    CREATE INDEX capsules_live ON capsules(room, scope, deleted, number);
    CREATE TABLE capsule_messages (
        id INTEGER PRIMARY KEY,
        capsule INTEGER NOT NULL REFERENCES capsules(id),
        k INTEGER NOT NULL,
        author TEXT NOT NULL,
        author_session INTEGER,
        author_lineage TEXT,
        author_generation INTEGER,
        tick INTEGER NOT NULL,
        title TEXT,
        content TEXT NOT NULL,
        word_count INTEGER NOT NULL,
        deleted INTEGER NOT NULL DEFAULT 0,
        UNIQUE (capsule, k)
    );
    CREATE TABLE capsule_tags (
        tag TEXT NOT NULL,
        capsule INTEGER NOT NULL,
        PRIMARY KEY (tag, capsule)
    ) WITHOUT ROWID;
    CREATE TABLE capsule_members (
        session INTEGER NOT NULL,
        capsule INTEGER NOT NULL,
        PRIMARY KEY (session, capsule)
    ) WITHOUT ROWID;
    CREATE INDEX capsule_members_capsule ON capsule_members(capsule);
    CREATE TABLE capsule_reads (
        session INTEGER NOT NULL,
        capsule INTEGER NOT NULL,
        k INTEGER NOT NULL,
        PRIMARY KEY (session, capsule, k)
    ) WITHOUT ROWID;
    CREATE INDEX capsule_reads_item ON capsule_reads(capsule, k);
    CREATE TABLE paper_submissions (
        id INTEGER PRIMARY KEY,
        tick INTEGER NOT NULL,
        agent TEXT NOT NULL,
        session INTEGER NOT NULL,
        lineage TEXT,
        generation INTEGER,
        title TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '[]',
        abstract TEXT NOT NULL,
        content TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        score INTEGER,
        verdict TEXT,
        decided_tick INTEGER,
        capsule_number INTEGER
    );
    CREATE INDEX paper_submissions_status ON paper_submissions(status, id);
    CREATE INDEX paper_submissions_agent ON paper_submissions(agent, tick);
    """,
    # v2: what the viewer reads by tick (the study page's talk) and by writer (an agent's page).
    """
    CREATE INDEX capsule_messages_tick ON capsule_messages(tick);
    CREATE INDEX capsule_messages_session ON capsule_messages(author_session);
    """,
    # v3: the tick of each read mark (who read whose words when: the study's read edges).
    "ALTER TABLE capsule_reads ADD COLUMN tick INTEGER",
]

CAPSULE_COLUMNS = (
    "id, room, scope, number, author, author_session, author_lineage, author_generation, "
    "created_tick, updated_tick, title, abstract, tags, recipients, deleted, message_count, "
    "word_count"
)
MAX_NUMBER = 2**63 - 1  # SQLite's largest integer
WHOLE = 0  # the k under which "the capsule itself was read" is stored


def word_count(text: str) -> int:
    return len(text.split())


@dataclass
class Author:
    """Who writes a capsule or message (an agent, or the reviewer posting a review)."""

    name: str
    session: int | None
    lineage: str | None
    generation: int | None

    @classmethod
    def of(cls, agent: Agent) -> Author:
        return cls(agent.name, agent.session, agent.lineage, agent.generation)


@dataclass
class Capsule:
    id: int
    room: str
    scope: str
    number: int
    author: str
    author_session: int | None
    author_lineage: str | None
    author_generation: int | None
    created_tick: int
    updated_tick: int
    title: str
    abstract: str | None
    tags: list[str] = field(default_factory=list)
    recipients: list[str] = field(default_factory=list)
    deleted: bool = False
    message_count: int = 0
    word_count: int = 0

    @classmethod
    def from_row(cls, row: Any) -> Capsule:
        data = dict(row)
        data["tags"] = json.loads(data["tags"])
        data["recipients"] = json.loads(data["recipients"])
        data["deleted"] = bool(data["deleted"])
        return cls(**data)

    @property
    def full_id(self) -> str:
        return full_id(self.room, self.scope, self.number)


@dataclass
class Message:
    id: int
    capsule: int
    k: int
    author: str
    author_session: int | None
    author_lineage: str | None
    author_generation: int | None
    tick: int
    title: str | None
    content: str
    word_count: int
    deleted: bool

    @classmethod
    def from_row(cls, row: Any) -> Message:
        data = dict(row)
        data["deleted"] = bool(data["deleted"])
        return cls(**data)


def lineage_key(lineage: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", lineage)


def full_id(room: str, scope: str, number: int) -> str:
    prefix = {"private_memory": f"{scope}_private", "public_memory": "public"}.get(room, room)
    return f"{prefix}_{number}"


class Capsules:
    """The capsules of one room, within one scope (a lineage for Private Memory, else '')."""

    def __init__(self, store: Store, room: str, scope: str = "") -> None:
        self.store, self.room, self.scope = store, room, scope

    # -- reading --------------------------------------------------------------------------
    def get(self, number: int) -> Capsule | None:
        """The capsule with this number, deleted or not."""
        if not 0 < number <= MAX_NUMBER:
            return None  # beyond any number SQLite stores: certainly not a capsule
        row = self.store.one(
            f"SELECT {CAPSULE_COLUMNS} FROM capsules WHERE room=? AND scope=? AND number=?",
            (self.room, self.scope, number),
        )
        return Capsule.from_row(row) if row else None

    def messages(self, capsule: Capsule, *, with_deleted: bool = False) -> list[Message]:
        rows = self.store.all(
            "SELECT * FROM capsule_messages WHERE capsule=?"
            + ("" if with_deleted else " AND deleted=0")
            + " ORDER BY k",
            (capsule.id,),
        )
        return [Message.from_row(r) for r in rows]

    def message(self, capsule: Capsule, k: int) -> Message | None:
        if not 0 < k <= MAX_NUMBER:
            return None
        row = self.store.one("SELECT * FROM capsule_messages WHERE capsule=? AND k=?", (capsule.id, k))
        return Message.from_row(row) if row else None

    def _visible(self, member: int | None) -> tuple[str, tuple]:
        if member is None:
            return "", ()
        return " AND id IN (SELECT capsule FROM capsule_members WHERE session=?)", (member,)

    def count(self, *, member: int | None = None, exclude: Sequence[int] = ()) -> int:
        extra, params = self._visible(member)
        skip = f" AND number NOT IN ({','.join('?' * len(exclude))})" if exclude else ""
        return (
            self.store.scalar(
                f"SELECT COUNT(*) FROM capsules WHERE room=? AND scope=? AND deleted=0{extra}{skip}",
                (self.room, self.scope, *params, *exclude),
            )
            or 0
        )

    def page(self, page: int, size: int, *, member: int | None = None, exclude: Sequence[int] = ()) -> list[Capsule]:
        """Live capsules, newest number first, without the excluded (pinned) numbers."""
        extra, params = self._visible(member)
        skip = f" AND number NOT IN ({','.join('?' * len(exclude))})" if exclude else ""
        rows = self.store.all(
            f"SELECT {CAPSULE_COLUMNS} FROM capsules WHERE room=? AND scope=? AND deleted=0{extra}{skip} "
            "ORDER BY number DESC LIMIT ? OFFSET ?",
            (self.room, self.scope, *params, *exclude, size, (page - 1) * size),
        )
        return [Capsule.from_row(r) for r in rows]

    def live(self, numbers: Iterable[int], *, member: int | None = None) -> list[Capsule]:
        wanted = list(numbers)
        if not wanted:
            return []
        extra, params = self._visible(member)
        rows = self.store.all(
            f"SELECT {CAPSULE_COLUMNS} FROM capsules WHERE room=? AND scope=? AND deleted=0{extra} "
            f"AND number IN ({','.join('?' * len(wanted))})",
            (self.room, self.scope, *params, *wanted),
        )
        return [Capsule.from_row(r) for r in rows]

    def all_live(self, *, member: int | None = None, limit: int) -> list[Capsule]:
        """Oldest first (for `preview all`), at most `limit`."""
        extra, params = self._visible(member)
        rows = self.store.all(
            f"SELECT {CAPSULE_COLUMNS} FROM capsules WHERE room=? AND scope=? AND deleted=0{extra} "
            "ORDER BY created_tick, number LIMIT ?",
            (self.room, self.scope, *params, limit),
        )
        return [Capsule.from_row(r) for r in rows]

    def tagged(self, tag: str, *, member: int | None = None, limit: int) -> list[Capsule]:
        extra, params = self._visible(member)
        rows = self.store.all(
            f"SELECT {CAPSULE_COLUMNS} FROM capsules WHERE room=? AND scope=? AND deleted=0{extra} "
            "AND id IN (SELECT capsule FROM capsule_tags WHERE tag=?) ORDER BY number DESC LIMIT ?",
            (self.room, self.scope, *params, tag.lower(), limit),
        )
        return [Capsule.from_row(r) for r in rows]

    # -- writing --------------------------------------------------------------------------
    def create(
        self,
        author: Author,
        tick: int,
        *,
        title: str,
        content: str,
        abstract: str | None = None,
        tags: Sequence[str] = (),
        recipients: Sequence[str] = (),
        members: Iterable[int] = (),
        created_tick: int | None = None,
    ) -> Capsule:
        number = 1 + (
            self.store.scalar("SELECT MAX(number) FROM capsules WHERE room=? AND scope=?", (self.room, self.scope)) or 0
        )
        cur = self.store.execute(
            "INSERT INTO capsules(room, scope, number, author, author_session, author_lineage, author_generation, "
            "created_tick, updated_tick, title, abstract, tags, recipients) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                self.room,
                self.scope,
                number,
                author.name,
                author.session,
                author.lineage,
                author.generation,
                tick if created_tick is None else created_tick,
                tick,
                title,
                abstract,
                dumps(list(tags)),
                dumps(list(recipients)),
            ),
        )
        capsule_id = cur.lastrowid
        assert capsule_id is not None  # an INSERT always sets it
        self._set_tags(capsule_id, tags)
        self.add_members(capsule_id, members)
        capsule = self.get(number)
        assert capsule is not None
        self.add_message(capsule, author, tick, title=title, content=content)
        return self.get(number)  # type: ignore[return-value]

    def add_message(self, capsule: Capsule, author: Author, tick: int, *, title: str | None, content: str) -> int:
        k = 1 + (self.store.scalar("SELECT MAX(k) FROM capsule_messages WHERE capsule=?", (capsule.id,)) or 0)
        self.store.execute(
            "INSERT INTO capsule_messages(capsule, k, author, author_session, author_lineage, author_generation, "
            "tick, title, content, word_count) VALUES(?,?,?,?,?,?,?,?,?,?)",
            (
                capsule.id,
                k,
                author.name,
                author.session,
                author.lineage,
                author.generation,
                tick,
                title,
                content,
                word_count(content),
            ),
        )
        self._recount(capsule.id, tick)
        return k

    def update_capsule(
        self,
        capsule: Capsule,
        tick: int,
        *,
        title: str | None = None,
        abstract: str | None = None,
        tags: Sequence[str] | None = None,
    ) -> None:
        if title is not None:
            self.store.execute("UPDATE capsules SET title=? WHERE id=?", (title, capsule.id))
        if abstract is not None:
            self.store.execute("UPDATE capsules SET abstract=? WHERE id=?", (abstract, capsule.id))
        if tags is not None:
            self.store.execute("UPDATE capsules SET tags=? WHERE id=?", (dumps(list(tags)), capsule.id))
            self.store.execute("DELETE FROM capsule_tags WHERE capsule=?", (capsule.id,))
            self._set_tags(capsule.id, tags)
        self.store.execute("UPDATE capsules SET updated_tick=? WHERE id=?", (tick, capsule.id))

    def update_message(
        self, capsule: Capsule, k: int, tick: int, *, title: str | None = None, content: str | None = None
    ) -> None:
        if title is not None:
            self.store.execute("UPDATE capsule_messages SET title=? WHERE capsule=? AND k=?", (title, capsule.id, k))
        if content is not None:
            self.store.execute(
                "UPDATE capsule_messages SET content=?, word_count=? WHERE capsule=? AND k=?",
                (content, word_count(content), capsule.id, k),
            )
        self._recount(capsule.id, tick)

    def delete_capsule(self, capsule: Capsule, tick: int) -> None:
        self.store.execute("UPDATE capsule_messages SET deleted=1 WHERE capsule=?", (capsule.id,))
        self.store.execute("UPDATE capsules SET deleted=1 WHERE id=?", (capsule.id,))
        self._recount(capsule.id, tick)

    def delete_message(self, capsule: Capsule, k: int, tick: int) -> None:
        self.store.execute("UPDATE capsule_messages SET deleted=1 WHERE capsule=? AND k=?", (capsule.id, k))
        self._recount(capsule.id, tick)
        if not self.store.scalar("SELECT message_count FROM capsules WHERE id=?", (capsule.id,)):
            self.store.execute("UPDATE capsules SET deleted=1 WHERE id=?", (capsule.id,))

    def add_recipients(self, capsule: Capsule, names: Sequence[str], sessions: Iterable[int], tick: int) -> None:
        self.store.execute(
            "UPDATE capsules SET recipients=?, updated_tick=? WHERE id=?",
            (dumps([*capsule.recipients, *names]), tick, capsule.id),
        )
        self.add_members(capsule.id, sessions)

    def add_members(self, capsule_id: int, sessions: Iterable[int]) -> None:
        self.store.executemany(
            "INSERT OR IGNORE INTO capsule_members(session, capsule) VALUES(?, ?)", [(s, capsule_id) for s in sessions]
        )

    def _set_tags(self, capsule_id: int, tags: Iterable[str]) -> None:
        self.store.executemany(
            "INSERT OR IGNORE INTO capsule_tags(tag, capsule) VALUES(?, ?)", [(t.lower(), capsule_id) for t in tags]
        )

    def _recount(self, capsule_id: int, tick: int) -> None:
        self.store.execute(
            "UPDATE capsules SET updated_tick=?, "
            "message_count=(SELECT COUNT(*) FROM capsule_messages WHERE capsule=capsules.id AND deleted=0), "
            "word_count=(SELECT COALESCE(SUM(word_count), 0) FROM capsule_messages "
            "            WHERE capsule=capsules.id AND deleted=0) WHERE id=?",
            (tick, capsule_id),
        )


# -- per-session read marks ------------------------------------------------------------------
def mark_read(store: Store, session: int, items: Iterable[tuple[int, int]], tick: int) -> None:
    """Mark (capsule id, k) pairs read at `tick`; k = WHOLE marks the capsule itself. The first read of
    an item keeps its tick."""
    store.executemany(
        "INSERT OR IGNORE INTO capsule_reads(session, capsule, k, tick) VALUES(?, ?, ?, ?)",
        [(session, c, k, tick) for c, k in items],
    )


def mark_unread(store: Store, session: int, items: Iterable[tuple[int, int]]) -> None:
    store.executemany(
        "DELETE FROM capsule_reads WHERE session=? AND capsule=? AND k=?", [(session, c, k) for c, k in items]
    )


def read_ks(store: Store, session: int, capsule: Capsule) -> set[int]:
    return {r[0] for r in store.all("SELECT k FROM capsule_reads WHERE session=? AND capsule=?", (session, capsule.id))}


def unread_counts(store: Store, session: int, capsules: Sequence[Capsule]) -> dict[int, int]:
    """Live messages not yet read by `session`, per capsule id."""
    if not capsules:
        return {}
    ids = [c.id for c in capsules]
    rows = store.all(
        "SELECT m.capsule, COUNT(*) FROM capsule_messages m JOIN capsule_reads r "
        "ON r.session=? AND r.capsule=m.capsule AND r.k=m.k "
        f"WHERE m.deleted=0 AND m.capsule IN ({','.join('?' * len(ids))}) GROUP BY m.capsule",
        (session, *ids),
    )
    seen = {r[0]: r[1] for r in rows}
    return {c.id: c.message_count - seen.get(c.id, 0) for c in capsules}


def is_member(store: Store, session: int, capsule: Capsule) -> bool:
    return store.one("SELECT 1 FROM capsule_members WHERE session=? AND capsule=?", (session, capsule.id)) is not None


def readers(store: Store, capsule: Capsule, k: int) -> list[int]:
    """Sessions that have read the item (the capsule itself when k = WHOLE)."""
    return [r[0] for r in store.all("SELECT session FROM capsule_reads WHERE capsule=? AND k=?", (capsule.id, k))]
