"""Agent records, naming (guests, lineages, Roman generations) and the choice of an ancestor.

An agent *session* is one life: a guest and the recursive agent it ascends into share the
session (and so the conversation), while each has its own record under its own name.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from station.core.store import Store, dumps

GUEST = "guest"
RECURSIVE = "recursive"
ACTIVE, ENDED, ASCENDED = "active", "ended", "ascended"
RESERVED_LINEAGES = {"shared", "architect", "lineage", "guest", "system"}
GUEST_DESCRIPTION = "A new guest agent."

_ROMAN = [
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]


def roman(n: int) -> str:
    """Roman numeral for n >= 1, with no upper bound (4000 = MMMM)."""
    if n < 1:
        raise ValueError("generations start at 1")
    out = []
    for value, letters in _ROMAN:
        count, n = divmod(n, value)
        out.append(letters * count)
    return "".join(out)


def lineage_name_problem(name: str) -> str | None:
    """Why `name` cannot be a lineage name, or None if it can."""
    if not name:
        return "the lineage name is empty"
    if not re.fullmatch(r"[A-Za-z]+", name):
        return "a lineage name is a single word of letters only (no spaces, digits or symbols)"
    if not name[0].isupper():
        return "a lineage name starts with a capital letter"
    if sum(c.isupper() for c in name) != 1:
        return "a lineage name has exactly one capital letter (e.g. 'Spiro', not 'SpiroAI')"
    if name.lower() in RESERVED_LINEAGES:
        return f"'{name}' is reserved"
    return None


# The fields the registry's SQL queries and active index read (the table's columns, birth tick).
INDEXED_FIELDS = frozenset(
    {
        "name",
        "session",
        "state",
        "position",
        "kind",
        "lineage",
        "model",
        "succeeded_by",
        "location",
        "offered_ancestor",
        "birth_tick",
    }
)


@dataclass
class Agent:
    # `_changes`, outside the record's fields, is the registry's set of records whose indexed
    # fields were assigned since they were last written: a query writes only those first.
    __slots__ = ("__dict__", "_changes")

    name: str
    session: int
    kind: str
    model: dict[str, Any]
    birth_tick: int
    position: float
    state: str = ACTIVE
    description: str = GUEST_DESCRIPTION
    lineage: str | None = None
    generation: int | None = None
    ascend_tick: int | None = None
    exit_tick: int | None = None
    exit_reason: str | None = None
    max_age: int | None = None
    token_budget: int = 1_000_000
    context_tokens: int | None = None
    tokens_spent: int = 0
    role: str | None = None
    system_prompt: str | None = None
    meta_prompt: str | None = None
    note: str = ""
    assigned_ancestor: str | None = None
    succeeded_by: str | None = None
    ascended_to: str | None = None
    offered_ancestor: str | None = None
    location: str = "lobby"
    flags: dict[str, Any] = field(default_factory=dict)
    rooms: dict[str, dict[str, Any]] = field(default_factory=dict)
    pruned: list[dict[str, Any]] = field(default_factory=list)
    last_history: list[dict[str, Any]] = field(default_factory=list)
    last_summary: list[str] = field(default_factory=list)

    def __setattr__(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)
        if key in INDEXED_FIELDS:
            changes = getattr(self, "_changes", None)
            if changes is not None:
                changes.add(self.name)

    @property
    def is_guest(self) -> bool:
        return self.kind == GUEST

    @property
    def active(self) -> bool:
        return self.state == ACTIVE

    def age(self, tick: int) -> int:
        return tick - self.birth_tick

    def room_state(self, short: str) -> dict[str, Any]:
        return self.rooms.setdefault(short, {})

    def to_row(self) -> tuple[Any, ...]:
        # vars() holds exactly the fields (from_json refuses any other key), and dumps sorts
        # keys: the same bytes as serialising dataclasses.asdict, without its deep copy.
        return (
            self.name,
            self.session,
            self.state,
            self.position,
            self.kind,
            self.lineage,
            self.model.get("name", ""),
            self.succeeded_by,
            int(bool(self.flags.get("respawn_pending"))),
            self.location,
            self.offered_ancestor,
            dumps(vars(self)),
        )

    @classmethod
    def from_json(cls, text: str) -> Agent:
        return cls(**json.loads(text))


# The row columns the active index depends on (to_row's state, position and kind).
_STATE, _POSITION, _KIND = 2, 3, 4
Checkpoint = tuple[dict[str, tuple[Agent, str, tuple[Any, ...] | None]], set[str]]


@dataclass(frozen=True)
class ActiveIndex:
    """The active agents in turn order, as the registry keeps them between units (shared: read only)."""

    turns: tuple[tuple[int, str], ...]  # (session, name)
    roster: tuple[tuple[str, str, int], ...]  # (name, kind, birth tick)
    names: tuple[str, ...]
    births: dict[str, int]


class AgentRegistry:
    """Reads and writes agent records for the engine (the only writer), and keeps them.

    Cost per unit is what the unit touches, not the population: records stay cached across
    units (the cache equals the committed rows after each commit), only the records handed
    out since the last commit are compared with their stored row and written if changed,
    and the turn order is an index kept between units, rebuilt only when a record's state
    or position changes. A rollback forgets what the unit touched, so the next unit reads
    those records' committed rows.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[str, Agent] = {}
        self._stored: dict[str, tuple[Any, ...]] = {}  # each cached record's row as last read or written
        self._touched: set[str] = set()  # handed out since the last commit: the only ones that may differ
        self._changes: set[str] = set()  # touched records whose indexed fields were assigned since written
        self._order: ActiveIndex | None = None  # the active agents in turn order
        self._order_moved = False  # the turn order changed since the last commit

    def invalidate(self) -> None:
        """Forget every record (after a rollback, or when another connection may have written)."""
        self._cache.clear()
        self._stored.clear()
        self._touched.clear()
        self._changes.clear()
        self._order = None

    def committed(self) -> None:
        """The unit committed: every cached record now equals its stored row."""
        self._touched.clear()
        self._changes.clear()
        self._order_moved = False

    def rolled_back(self) -> None:
        """The unit was rolled back: forget the records it touched; the others still equal their rows."""
        for name in self._touched:
            self._cache.pop(name, None)
            self._stored.pop(name, None)
        self._touched.clear()
        self._changes.clear()
        if self._order_moved:
            self._order, self._order_moved = None, False

    def flush(self) -> None:
        """Write every record handed out since the last commit that changed since it was read or
        saved. The engine calls this before each unit commits."""
        self._write_changed(self._touched)

    def _write_changed(self, names: set[str]) -> None:
        for name in list(names):
            agent = self._cache.get(name)
            if agent is not None and agent.to_row() != self._stored.get(name):
                self.save(agent)

    def _sync(self) -> None:
        """Before a query: write the records whose indexed fields changed, so SQL sees them."""
        if self._changes:
            self._write_changed(self._changes)
            self._changes.clear()

    def checkpoint(self, only: Iterable[str] | None = None) -> Checkpoint:
        """The state of every record this unit has touched (or of those named in `only` that it
        has), to undo an action that failed half-way. Records first touched after it are
        forgotten by `restore` whatever `only` says."""
        names = self._touched if only is None else self._touched.intersection(only)
        saved = {
            name: (self._cache[name], self._cache[name].to_row()[-1], self._stored.get(name))
            for name in names
            if name in self._cache
        }
        return saved, set(self._touched)

    def restore(self, checkpoint: Checkpoint) -> None:
        """Put touched records back as they were (same objects). Records first touched since are
        forgotten: the savepoint undid any write of theirs, so the next read is the committed row."""
        saved, touched = checkpoint
        for name in self._touched - touched:
            self._cache.pop(name, None)
            self._stored.pop(name, None)
        for name, (agent, state, stored) in saved.items():
            agent.__dict__.clear()
            agent.__dict__.update(json.loads(state))  # the record as it would be read back
            self._cache[name] = agent
            if stored is None:
                self._stored.pop(name, None)
            else:
                self._stored[name] = stored
        self._touched = touched
        keep = set(saved) | (self._changes & touched)  # restored fields may differ from what a query sees
        self._changes.clear()
        self._changes.update(keep)
        self._order, self._order_moved = None, True

    def get(self, name: str) -> Agent | None:
        agent = self._load(name)
        if agent is not None:
            self._touched.add(name)  # handed out: the unit's flush writes it if it changed
        return agent

    def _load(self, name: str) -> Agent | None:
        agent = self._cache.get(name)
        if agent is None:
            row = self.store.one("SELECT data FROM agents WHERE name=?", (name,))
            if row is None:
                return None
            agent = self._cache[name] = Agent.from_json(row["data"])
            object.__setattr__(agent, "_changes", self._changes)
            self._stored[name] = agent.to_row()
        return agent

    def save(self, agent: Agent) -> None:
        row = agent.to_row()
        before = self._stored.get(agent.name)
        if row == before:
            pass  # the stored row already says this
        elif before is not None and before[:-1] == row[:-1]:  # only the record's JSON: no index to update
            self.store.execute("UPDATE agents SET data=? WHERE name=?", (row[-1], agent.name))
        else:
            self._upsert(row)
        if self._moves_index(agent, before, row):
            self._order, self._order_moved = None, True
        self._cache[agent.name] = agent
        self._stored[agent.name] = row
        self._touched.add(agent.name)
        self._changes.discard(agent.name)
        object.__setattr__(agent, "_changes", self._changes)

    def _upsert(self, row: tuple[Any, ...]) -> None:
        self.store.execute(
            "INSERT INTO agents(name, session, state, position, kind, lineage, model_name, successor, "
            "respawn_pending, location, offered, data) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET session=excluded.session, state=excluded.state, "
            "position=excluded.position, kind=excluded.kind, lineage=excluded.lineage, "
            "model_name=excluded.model_name, successor=excluded.successor, "
            "respawn_pending=excluded.respawn_pending, location=excluded.location, offered=excluded.offered, "
            "data=excluded.data",
            row,
        )

    def _moves_index(self, agent: Agent, before: tuple[Any, ...] | None, row: tuple[Any, ...]) -> bool:
        """Whether writing `row` changes the active index: state, position or kind changed, or
        the birth tick (only tests and the operator's tools rewrite it)."""
        if before is None or any(before[i] != row[i] for i in (_STATE, _POSITION, _KIND)):
            return True
        return self._order is not None and self._order.births.get(agent.name, agent.birth_tick) != agent.birth_tick

    def names(self, condition: str = "1", params: tuple[Any, ...] = (), order: str = "session, name") -> list[str]:
        """Names of the agents matching an SQL condition on the indexed columns, touching none."""
        self._sync()
        return [r[0] for r in self.store.all(f"SELECT name FROM agents WHERE {condition} ORDER BY {order}", params)]

    def where(self, condition: str = "1", params: tuple[Any, ...] = (), order: str = "session, name") -> list[Agent]:
        """Agents matching an SQL condition on the indexed columns (state, kind, lineage, location, ...)."""
        return [a for a in (self.get(n) for n in self.names(condition, params, order)) if a is not None]

    def peek(self, condition: str = "1", params: tuple[Any, ...] = (), order: str = "session, name") -> list[Agent]:
        """As `where`, for reading only: the records are not handed out, so the unit's flush does
        not compare them with their rows (a lineage's ancestors: hundreds after 5,000 ticks).
        Never change one: the change would not be written."""
        return [a for a in (self._load(n) for n in self.names(condition, params, order)) if a is not None]

    def turn_order(self) -> tuple[tuple[int, str], ...]:
        """(session, name) of the active agents in turn order, from an index kept between units."""
        return self._active_index().turns

    def roster(self) -> tuple[tuple[str, str, int], ...]:
        """(name, kind, birth tick) of the active agents in turn order, touching no record."""
        return self._active_index().roster

    def active_names(self) -> tuple[str, ...]:
        """Names of the active agents in turn order, touching no record."""
        return self._active_index().names

    def active_count(self) -> int:
        return len(self._active_index().names)

    def _active_index(self) -> ActiveIndex:
        # A record's session, name, kind and birth tick never change: only joining or leaving
        # the active set (state) or moving in the order (position) rebuilds this.
        self._sync()
        if self._order is None:
            rows = self.store.all(
                "SELECT session, name, kind, json_extract(data, '$.birth_tick') FROM agents WHERE state=? "
                "ORDER BY position",
                (ACTIVE,),
            )
            self._order = ActiveIndex(
                turns=tuple((r[0], r[1]) for r in rows),
                roster=tuple((r[1], r[2], r[3]) for r in rows),
                names=tuple(r[1] for r in rows),
                births={r[1]: r[3] for r in rows},
            )
        return self._order

    def active(self) -> list[Agent]:
        """Active agents in turn order (every record: for walks that need them all)."""
        return [a for a in (self.get(name) for name in self.active_names()) if a is not None]

    def active_of_session(self, session: int) -> Agent | None:
        """The active agent living `session`, if any (a session has at most one)."""
        names = self.names("session=? AND state=?", (session, ACTIVE))
        return self.get(names[0]) if names else None

    def recursive_names(self, *, besides: str) -> list[str]:
        """Names of the active recursive (ascended) agents other than `besides`, sorted."""
        return self.names("state=? AND kind=? AND name<>?", (ACTIVE, RECURSIVE, besides), order="name")

    def active_of_lineage(self, lineage: str) -> list[Agent]:
        """The active agents of a lineage, in turn order."""
        return self.where("state=? AND lineage=?", (ACTIVE, lineage), order="position")

    def active_in(self, location: str, *, order: str = "name") -> list[str]:
        """Names of the active agents in a room, sorted by name (or `order="position"`: turn order)."""
        return self.names("state=? AND location=?", (ACTIVE, location), order=order)

    def all(self) -> list[Agent]:
        return self.where()

    def awaiting_respawn(self) -> list[Agent]:
        return self.where("respawn_pending=1", order="position")

    def exists(self, name: str) -> bool:
        return name in self._cache or self.store.one("SELECT 1 FROM agents WHERE name=?", (name,)) is not None

    def next_guest_name(self) -> str:
        # Guest numbers are never reused: take one above the highest ever issued.
        highest = self.store.get_meta("last_guest_number", 0)
        self.store.set_meta("last_guest_number", highest + 1)
        return f"Guest_{highest + 1}"

    def next_session(self) -> int:
        self._sync()
        return (self.store.scalar("SELECT MAX(session) FROM agents") or 0) + 1

    def next_position(self) -> float:
        self._sync()
        return (self.store.scalar("SELECT MAX(position) FROM agents") or 0.0) + 1.0

    def offered_to_another(self, ancestor: str, *, besides: str) -> bool:
        """Whether an active guest other than `besides` has been offered `ancestor`."""
        self._sync()
        return (
            self.store.one(
                "SELECT 1 FROM agents WHERE offered=? AND state=? AND kind=? AND name<>?",
                (ancestor, ACTIVE, GUEST, besides),
            )
            is not None
        )

    def by_lineage(self, lineage: str) -> list[Agent]:
        """Every agent of a lineage, ended ones too, for reading only (see `peek`)."""
        return self.peek("lineage=?", (lineage,))

    def lineages(self) -> list[str]:
        self._sync()
        return [
            r[0] for r in self.store.all("SELECT DISTINCT lineage FROM agents WHERE lineage IS NOT NULL ORDER BY 1")
        ]


def ancestor_candidates(registry: AgentRegistry, guest: Agent) -> list[Agent]:
    """Ended recursive agents of the same model with no successor, not offered to another guest
    (for reading only, see `AgentRegistry.peek`)."""
    heirless = registry.peek(
        "state=? AND kind=? AND model_name=? AND successor IS NULL AND lineage IS NOT NULL",
        (ENDED, RECURSIVE, guest.model.get("name", "")),
    )
    return [a for a in heirless if not registry.offered_to_another(a.name, besides=guest.name)]


def assigned_candidate(registry: AgentRegistry, guest: Agent, same_model: list[Agent]) -> Agent | None:
    """The operator-assigned ancestor, by agent name then lineage, same model first."""
    wanted = guest.assigned_ancestor
    any_model = registry.peek("state=? AND kind=? AND successor IS NULL AND lineage IS NOT NULL", (ENDED, RECURSIVE))
    for pool in (same_model, any_model):
        for match in ([a for a in pool if a.name == wanted], [a for a in pool if a.lineage == wanted]):
            if match:
                return max(match, key=lambda a: a.generation or 0)
    return None


def lineage_utility(
    registry: AgentRegistry, lineage: str, tick: int, penalty: float, credits: dict[str, float]
) -> float:
    """Credits earned by the lineage (breakthroughs, good papers) minus a lifespan penalty."""
    lifespan = sum(
        ((a.exit_tick if a.exit_tick is not None else tick) - (a.ascend_tick or a.birth_tick))
        for a in registry.by_lineage(lineage)
        if a.kind == RECURSIVE
    )
    return credits.get(lineage, 0.0) - penalty * lifespan


def softmax_choice(options: list[tuple[str | None, float]], temperature: float, u: float) -> str | None:
    """Pick an option with probability softmax(utility / temperature), using u in [0, 1)."""
    top = max(util for _, util in options)
    weights = [math.exp((util - top) / temperature) for _, util in options]
    total = sum(weights)
    acc = 0.0
    for (choice, _), w in zip(options, weights):
        acc += w / total
        if u < acc:
            return choice
    return options[-1][0]


def latest_of_lineage(candidates: Iterable[Agent], lineage: str) -> Agent:
    return max((a for a in candidates if a.lineage == lineage), key=lambda a: a.generation or 0)


# The headline fields of the lists of agents the apps show (the CLI, the web pages).
SUMMARY_FIELDS = ("birth_tick", "exit_tick", "exit_reason", "generation", "ascended_to", "ascend_tick", "location")


def agent_summaries(
    db: sqlite3.Connection,
    where: str = "1",
    params: tuple[Any, ...] = (),
    *,
    limit: int = -1,
    offset: int = 0,
    newest_first: bool = False,
    fields: tuple[str, ...] = SUMMARY_FIELDS,
) -> list[dict[str, Any]]:
    """Agents' headline fields, read inside SQLite (a long station has tens of thousands of records).
    The page is chosen on the position index alone (no record is read for the rows skipped), then
    only its rows are read."""
    extracted = "".join(f", json_extract(a.data, '$.{f}') AS {f}" for f in fields)
    way = " DESC" if newest_first else ""
    cursor = db.execute(
        f"SELECT a.name, a.session, a.state, a.kind, a.lineage, a.model_name, a.successor{extracted} FROM "
        f"(SELECT rowid AS id FROM agents WHERE {where} ORDER BY position{way}, name{way} LIMIT ? OFFSET ?) page "
        f"JOIN agents a ON a.rowid = page.id ORDER BY a.position{way}, a.name{way}",
        (*params, limit, offset),
    )
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor]
