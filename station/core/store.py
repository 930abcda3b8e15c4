"""The station's single source of truth: one SQLite database (WAL) plus a files/ folder.

Every component (the engine core and each room) owns a list of migrations; the store applies
the missing ones at open time and records the version per component, so rooms can add
tables without the engine knowing them.  All writes of one agent turn happen inside one
`transaction()`; recorded inputs (model replies, verdicts, operator commands) are kept in the
`inputs` table, keyed so that a turn re-executed after a crash finds the reply it already got.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from station.core.safe_text import valid, valid_params

DB_NAME = "station.db"
FILES_DIR = "files"

CORE_MIGRATIONS: list[str] = [
    # v1: the engine's own tables.
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE inputs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        tick INTEGER NOT NULL,
        agent TEXT,
        payload TEXT NOT NULL,
        request_hash TEXT,
        latency_s REAL,
        recorded_at REAL NOT NULL
    );
    CREATE TABLE agents (
        name TEXT PRIMARY KEY,
        session INTEGER NOT NULL,
        state TEXT NOT NULL,
        position REAL NOT NULL,
        kind TEXT NOT NULL,
        lineage TEXT,
        model_name TEXT NOT NULL,
        successor TEXT,
        respawn_pending INTEGER NOT NULL DEFAULT 0,
        data TEXT NOT NULL
    );
    CREATE INDEX agents_state ON agents(state, position);
    CREATE INDEX agents_session ON agents(session);
    CREATE INDEX agents_position ON agents(position);
    CREATE INDEX agents_lineage ON agents(lineage);
    CREATE INDEX agents_heirless ON agents(state, kind, model_name, successor);
    CREATE INDEX agents_respawn ON agents(respawn_pending);
    CREATE TABLE turns (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tick INTEGER NOT NULL,
        session INTEGER NOT NULL,
        agent TEXT NOT NULL,
        room TEXT NOT NULL,
        prompt TEXT NOT NULL,
        reply TEXT NOT NULL,
        thinking TEXT,
        actions TEXT NOT NULL,
        internal TEXT NOT NULL,
        context_tokens INTEGER,
        tokens_spent INTEGER NOT NULL,
        started_at REAL NOT NULL,
        finished_at REAL NOT NULL,
        UNIQUE (tick, session)
    );
    CREATE INDEX turns_agent ON turns(agent, tick);
    CREATE TABLE conversation (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session INTEGER NOT NULL,
        tick INTEGER NOT NULL,
        role TEXT NOT NULL,
        text TEXT NOT NULL
    );
    CREATE INDEX conversation_session ON conversation(session, id);
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent TEXT NOT NULL,
        tick INTEGER NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        delivered_tick INTEGER
    );
    CREATE INDEX messages_inbox ON messages(agent, delivered_tick, id);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tick INTEGER NOT NULL,
        kind TEXT NOT NULL,
        agent TEXT,
        payload TEXT NOT NULL
    );
    CREATE INDEX events_tick ON events(tick);
    CREATE TABLE operator_queue (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        command TEXT NOT NULL,
        queued_at REAL NOT NULL,
        applied_input TEXT
    );
    """,
    # v2: what each turn's model calls used, every call's spend, and concurrent turns' prompts.
    """
    ALTER TABLE turns ADD COLUMN input_tokens INTEGER;
    ALTER TABLE turns ADD COLUMN cached_input_tokens INTEGER;
    ALTER TABLE turns ADD COLUMN output_tokens INTEGER;
    ALTER TABLE turns ADD COLUMN reasoning_tokens INTEGER;
    ALTER TABLE turns ADD COLUMN latency_s REAL;
    ALTER TABLE turns ADD COLUMN cost_usd REAL;
    CREATE TABLE spend (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        tick INTEGER,
        who TEXT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        input_tokens INTEGER NOT NULL,
        cached_input_tokens INTEGER NOT NULL,
        cache_write_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        reasoning_tokens INTEGER NOT NULL,
        cost_usd REAL NOT NULL,
        latency_s REAL,
        retries INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX spend_who ON spend(who);
    CREATE TABLE turn_prompts (
        tick INTEGER NOT NULL,
        session INTEGER NOT NULL,
        prompt TEXT NOT NULL,
        PRIMARY KEY (tick, session)
    );
    """,
    # v3: why the model stopped each turn's reply ("stop", "length" when max_output_tokens cut it, ...).
    """
    ALTER TABLE turns ADD COLUMN finish_reason TEXT;
    """,
    # v4: where each agent is and the ancestor a guest is offered, as columns, so "who is in this
    # room" and "is this ancestor offered to someone" are index lookups.
    """
    ALTER TABLE agents ADD COLUMN location TEXT NOT NULL DEFAULT 'lobby';
    ALTER TABLE agents ADD COLUMN offered TEXT;
    UPDATE agents SET location = COALESCE(json_extract(data, '$.location'), 'lobby'),
        offered = json_extract(data, '$.offered_ancestor');
    CREATE INDEX agents_location ON agents(state, location);
    CREATE INDEX agents_offered ON agents(offered)
    """,
    # v5: what the readers (status, the web pages) look up, as indexes and running totals, so that a
    # page costs the same at tick 10,000 as at tick 10: a session's turns, events of one kind, the
    # messages not delivered yet, and the spend per caller (kept by a trigger on every spend row).
    """
    CREATE INDEX turns_session ON turns(session, tick);
    CREATE INDEX events_kind ON events(kind);
    CREATE INDEX messages_pending ON messages(delivered_tick) WHERE delivered_tick IS NULL;
    CREATE TABLE spend_totals (
        who TEXT PRIMARY KEY,
        calls INTEGER NOT NULL,
        cost_usd REAL NOT NULL,
        input_tokens INTEGER NOT NULL,
        cached_input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        reasoning_tokens INTEGER NOT NULL,
        retries INTEGER NOT NULL,
        latency_s REAL NOT NULL,
        timed_calls INTEGER NOT NULL
    );
    INSERT INTO spend_totals SELECT who, COUNT(*), SUM(cost_usd), SUM(input_tokens), SUM(cached_input_tokens),
        SUM(output_tokens), SUM(reasoning_tokens), SUM(retries), COALESCE(SUM(latency_s), 0), COUNT(latency_s)
        FROM spend GROUP BY who;
    CREATE INDEX spend_totals_cost ON spend_totals(cost_usd);
    CREATE TRIGGER spend_totals_add AFTER INSERT ON spend BEGIN
        INSERT INTO spend_totals VALUES(NEW.who, 1, NEW.cost_usd, NEW.input_tokens, NEW.cached_input_tokens,
            NEW.output_tokens, NEW.reasoning_tokens, NEW.retries, COALESCE(NEW.latency_s, 0), NEW.latency_s IS NOT NULL)
        ON CONFLICT(who) DO UPDATE SET calls = calls + 1, cost_usd = cost_usd + excluded.cost_usd,
            input_tokens = input_tokens + excluded.input_tokens,
            cached_input_tokens = cached_input_tokens + excluded.cached_input_tokens,
            output_tokens = output_tokens + excluded.output_tokens,
            reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens, retries = retries + excluded.retries,
            latency_s = latency_s + excluded.latency_s, timed_calls = timed_calls + excluded.timed_calls;
    END
    """,
]


class StoreError(RuntimeError):
    pass


_WRITE_LOCKS: dict[str, threading.RLock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def write_lock(db_path: str | Path) -> threading.RLock:
    """The lock every writer in this process holds while it writes to one database file.

    SQLite makes a writer that finds the database locked sleep and retry (1 ms, 2, 5, ... up to
    100 ms a try); with a thousand model calls booking their spend while the engine records
    their replies, those sleeps cost more than the writes. Waiting here instead wakes a writer
    the moment the other is done. Writers in other processes still rely on SQLite's own timeout.
    """
    key = os.path.realpath(db_path)
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(key, threading.RLock())


def absolute(directory: str | Path) -> Path:
    """A station directory as an absolute path, fixed once when it is opened: everything below
    (the sandbox's mounts, the evaluator's threads, the web runner) may run with another cwd."""
    return Path(os.path.abspath(directory))


RECOVERY = (
    "Restore it from a backup (`station backup` makes one, safely, while a station runs) or move it "
    "away; nothing was changed"
)


def damaged(db_path: Path, err: sqlite3.DatabaseError) -> str:
    """One line for a station database SQLite cannot use: what, where, what to do."""
    return f"{db_path} is damaged or not a station database ({err}). {RECOVERY}"


@lru_cache(maxsize=4096)
def _scalar(text: str) -> Any:
    """A meta value that cannot be changed in place (number, string, true, null), decoded once:
    the engine reads the tick and the like dozens of times a turn."""
    return json.loads(text)


def dumps(value: Any) -> str:
    """Canonical JSON: sorted keys, so equal worlds give equal bytes; always valid UTF-8."""
    return valid(json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")))


class Store:
    """One open station database. Not thread-safe: one Store per thread."""

    def __init__(self, directory: str | Path, *, durability: str = "normal") -> None:
        self.dir = absolute(directory)
        self.files = self.dir / FILES_DIR
        db_path = self.dir / DB_NAME
        if not db_path.exists():
            raise StoreError(f"no station at {self.dir} (missing {DB_NAME})")
        if db_path.stat().st_size == 0:
            raise StoreError(f"{db_path} is empty: it holds no station. {RECOVERY}")
        try:
            self.db = self._connect(db_path, durability)
            self.db.execute("SELECT component FROM schema_versions LIMIT 1").fetchall()
        except sqlite3.DatabaseError as err:
            raise StoreError(damaged(db_path, err)) from None
        self._in_tx = False
        self._write_lock = write_lock(db_path)
        self._meta: dict[str, str | None] | None = None  # meta rows read or written in this write transaction
        self._committed_meta: dict[str, str | None] | None = None  # kept across transactions: see keep_meta

    def keep_meta(self) -> None:
        """Remember meta rows across transactions. Only for the connection that is meta's one
        writer while it is open (the running engine's): anyone else must read what is on disk."""
        self._committed_meta = {}

    @staticmethod
    def _connect(path: Path, durability: str) -> sqlite3.Connection:
        db = sqlite3.connect(path, isolation_level=None, timeout=30.0, check_same_thread=False)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL survives a killed process (the WAL is in the OS page cache); FULL also
        # survives power loss at the price of an fsync per commit.
        db.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
        db.execute("PRAGMA foreign_keys=ON")
        return db

    @classmethod
    def create(cls, directory: str | Path, **kwargs: Any) -> Store:
        d = Path(directory)
        if (d / DB_NAME).exists():
            raise StoreError(f"a station already exists at {d}")
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o700)  # dialogues, code and keys' traces are private: other local users stay out
        (d / FILES_DIR).mkdir(exist_ok=True)
        db = cls._connect(d / DB_NAME, kwargs.get("durability", "normal"))
        db.execute("CREATE TABLE schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
        db.close()
        return cls(d, **kwargs)

    @staticmethod
    def exists(directory: str | Path) -> bool:
        return (Path(directory) / DB_NAME).exists()

    def close(self) -> None:
        self.db.close()

    # -- schema ---------------------------------------------------------------------------
    def migrate(self, component: str, migrations: list[str]) -> None:
        """Apply the migrations of `component` that this database has not seen yet."""
        row = self.db.execute("SELECT version FROM schema_versions WHERE component=?", (component,)).fetchone()
        have = row["version"] if row else 0
        if have > len(migrations):
            raise StoreError(
                f"station database has {component} schema v{have}, newer than this code "
                f"(v{len(migrations)}); upgrade the station package"
            )
        for version in range(have + 1, len(migrations) + 1):
            # inside a unit's transaction (a room the operator enabled): a savepoint of it
            with self.savepoint("migrate") if self._in_tx else self.transaction():
                for statement in _split_sql(migrations[version - 1]):
                    self.db.execute(statement)
                self.db.execute(
                    "INSERT INTO schema_versions(component, version) VALUES(?, ?) "
                    "ON CONFLICT(component) DO UPDATE SET version=excluded.version",
                    (component, version),
                )

    # -- transactions ---------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT; rolls back on any exception."""
        if self._in_tx:
            raise StoreError("nested transaction")
        with self._write_lock:
            self.db.execute("BEGIN IMMEDIATE")
            # nobody else can write meta until COMMIT: cache its rows
            self._in_tx, self._meta = True, dict(self._committed_meta or {})
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            else:
                self.db.execute("COMMIT")
                if self._committed_meta is not None:
                    self._committed_meta = self._meta
            finally:
                self._in_tx, self._meta = False, None

    @contextmanager
    def savepoint(self, name: str = "action") -> Iterator[None]:
        """A nested unit inside a transaction: undone alone if its body raises."""
        self.db.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            self.db.execute(f"ROLLBACK TO {name}")
            self.db.execute(f"RELEASE {name}")
            if self._meta is not None:
                self._meta.clear()
            raise
        else:
            self.db.execute(f"RELEASE {name}")

    # -- meta -----------------------------------------------------------------------------
    def get_meta(self, key: str, default: Any = None) -> Any:
        cache = self._meta if self._meta is not None else self._committed_meta
        if cache is not None and key in cache:
            text = cache[key]
        else:
            row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
            text = row["value"] if row else None
            if cache is not None:
                cache[key] = text
        if text is None:
            return default
        return json.loads(text) if text[0] in "[{" else _scalar(text)  # a list or dict: the caller's own copy

    def set_meta(self, key: str, value: Any) -> None:
        text = dumps(value)
        self.db.execute(
            "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, text)
        )
        cache = self._meta if self._meta is not None else self._committed_meta
        if cache is not None:
            cache[key] = text

    # -- recorded inputs ------------------------------------------------------------------
    def get_input(self, key: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT payload FROM inputs WHERE key=?", (key,)).fetchone()
        return json.loads(row["payload"]) if row else None

    def has_input(self, key: str) -> bool:
        return self.db.execute("SELECT 1 FROM inputs WHERE key=?", (key,)).fetchone() is not None

    def put_input(
        self,
        key: str,
        kind: str,
        tick: int,
        agent: str | None,
        payload: dict[str, Any],
        request_hash: str | None = None,
        latency_s: float | None = None,
    ) -> None:
        self.execute(
            "INSERT INTO inputs(key, kind, tick, agent, payload, request_hash, latency_s, recorded_at) "
            "VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
            (key, kind, tick, agent, dumps(payload), request_hash, latency_s, time.time()),
        )

    def record_input(
        self,
        key: str,
        kind: str,
        tick: int,
        agent: str | None,
        payload: dict[str, Any],
        request_hash: str | None = None,
        latency_s: float | None = None,
    ) -> None:
        """Write one input in its own committed transaction (before it is applied)."""
        with self.transaction():
            self.put_input(key, kind, tick, agent, payload, request_hash, latency_s)

    # -- helpers --------------------------------------------------------------------------
    # Every text parameter is made valid UTF-8 on its way in (safe_text): one odd byte from a
    # model or a file name must not make SQLite raise in the middle of committing a turn.
    def one(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(sql, valid_params(params)).fetchone()
        return row

    def all(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return self.db.execute(sql, valid_params(params)).fetchall()

    def scalar(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        row = self.db.execute(sql, valid_params(params)).fetchone()
        return row[0] if row else None

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        return self.db.execute(sql, valid_params(params))

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        return self.db.executemany(sql, (valid_params(row) for row in rows))

    def backup(self, target: str | Path) -> Path:
        """A consistent copy of the database (SQLite's online backup; safe while running)."""
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(target.suffix + ".partial")
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))  # as private as the station
        out = sqlite3.connect(partial)
        try:
            self.db.backup(out)
        finally:
            out.close()
        partial.replace(target)
        return target

    def integrity_check(self) -> str:
        result: str = self.db.execute("PRAGMA integrity_check").fetchone()[0]
        return result


def _split_sql(script: str) -> list[str]:
    """Split a migration script into statements (our migrations hold no ';' in literals; a trigger's
    body, whose statements end in ';' too, stays whole: SQLite says when a statement is complete)."""
    statements, pending = [], ""
    for part in script.split(";"):
        pending += part + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                statements.append(pending.strip().removesuffix(";").strip())
            pending = ""
    if pending.strip(" \n;"):
        statements.append(pending.strip().removesuffix(";").strip())
    return statements


def canonical_dump(store: Store) -> dict[str, list[list[Any]]]:
    """Every world table, rows in key order, minus wall-clock columns: equal worlds, equal dumps."""
    volatile = {"recorded_at", "started_at", "finished_at", "queued_at", "latency_s"}
    # bookkeeping, not world: a replay spends nothing and runs nothing
    skip_tables = {"sqlite_sequence", "operator_queue", "evaluation_runs", "spend", "spend_totals", "endpoint_switches"}
    out: dict[str, list[list[Any]]] = {}
    tables = [r[0] for r in store.all("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    for table in tables:
        if table in skip_tables:
            continue
        cols = [r[1] for r in store.all(f"PRAGMA table_info({table})")]
        keep = [c for c in cols if c not in volatile]
        order = ", ".join(cols[:1])
        rows = store.all(f"SELECT {', '.join(keep)} FROM {table} ORDER BY {order}")
        out[table] = [keep] + [list(r) for r in rows]
    return out
