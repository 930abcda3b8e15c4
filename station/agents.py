"""Agent records, naming (guests, lineages, Roman generations) and the choice of an ancestor.

An agent *session* is one life: a guest and the recursive agent it ascends into share the
session (and so the conversation), while each has its own record under its own name.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from .store import Store, dumps

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


@dataclass
class Agent:
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

    def to_row(self) -> tuple:
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
            dumps(asdict(self)),
        )

    @classmethod
    def from_json(cls, text: str) -> Agent:
        return cls(**json.loads(text))


class AgentRegistry:
    """Reads and writes agent records; caches them for the engine (the only writer)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[str, Agent] = {}
        self._stored: dict[str, tuple] = {}  # each cached record's row as last read or written

    def invalidate(self) -> None:
        self._cache.clear()
        self._stored.clear()

    def flush(self) -> None:
        """Write every cached record changed since it was read or saved. The engine calls this
        before each unit commits, so no change waits on a later save of the same object."""
        for agent in self._cache.values():
            if agent.to_row() != self._stored.get(agent.name):
                self.save(agent)

    def checkpoint(self) -> dict[str, tuple[Agent, dict[str, Any]]]:
        """The state of every cached record, to undo an action that failed half-way."""
        return {name: (agent, copy.deepcopy(agent.__dict__)) for name, agent in self._cache.items()}

    def restore(self, checkpoint: dict[str, tuple[Agent, dict[str, Any]]]) -> None:
        """Put cached records back as they were (same objects), forgetting ones loaded since."""
        for name in list(self._cache):
            if name not in checkpoint:
                del self._cache[name]
                self._stored.pop(name, None)
        for name, (agent, state) in checkpoint.items():
            agent.__dict__.clear()
            agent.__dict__.update(state)
            self._cache[name] = agent

    def get(self, name: str) -> Agent | None:
        if name not in self._cache:
            row = self.store.one("SELECT data FROM agents WHERE name=?", (name,))
            if row is None:
                return None
            agent = self._cache[name] = Agent.from_json(row["data"])
            self._stored[name] = agent.to_row()
        return self._cache[name]

    def save(self, agent: Agent) -> None:
        self.store.execute(
            "INSERT INTO agents(name, session, state, position, kind, lineage, model_name, successor, "
            "respawn_pending, data) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET session=excluded.session, state=excluded.state, "
            "position=excluded.position, kind=excluded.kind, lineage=excluded.lineage, "
            "model_name=excluded.model_name, successor=excluded.successor, "
            "respawn_pending=excluded.respawn_pending, data=excluded.data",
            agent.to_row(),
        )
        self._cache[agent.name] = agent
        self._stored[agent.name] = agent.to_row()

    def where(self, condition: str = "1", params: tuple = (), order: str = "session, name") -> list[Agent]:
        """Agents matching an SQL condition on the indexed columns (state, kind, lineage, ...)."""
        names = [
            r["name"] for r in self.store.all(f"SELECT name FROM agents WHERE {condition} ORDER BY {order}", params)
        ]
        return [a for a in (self.get(n) for n in names) if a is not None]

    def active(self) -> list[Agent]:
        """Active agents in turn order."""
        return self.where("state=?", (ACTIVE,), order="position")

    def all(self) -> list[Agent]:
        return self.where()

    def awaiting_respawn(self) -> list[Agent]:
        return self.where("respawn_pending=1", order="position")

    def exists(self, name: str) -> bool:
        return self.store.one("SELECT 1 FROM agents WHERE name=?", (name,)) is not None

    def next_guest_name(self) -> str:
        # Guest numbers are never reused: take one above the highest ever issued.
        highest = self.store.get_meta("last_guest_number", 0)
        self.store.set_meta("last_guest_number", highest + 1)
        return f"Guest_{highest + 1}"

    def next_session(self) -> int:
        return (self.store.scalar("SELECT MAX(session) FROM agents") or 0) + 1

    def next_position(self) -> float:
        return (self.store.scalar("SELECT MAX(position) FROM agents") or 0.0) + 1.0

    def by_lineage(self, lineage: str) -> list[Agent]:
        return self.where("lineage=?", (lineage,))

    def lineages(self) -> list[str]:
        return [
            r[0] for r in self.store.all("SELECT DISTINCT lineage FROM agents WHERE lineage IS NOT NULL ORDER BY 1")
        ]


def ancestor_candidates(registry: AgentRegistry, guest: Agent) -> list[Agent]:
    """Ended recursive agents of the same model with no successor, not offered to another guest."""
    offered = {a.offered_ancestor for a in registry.active() if a.is_guest and a.name != guest.name}
    heirless = registry.where(
        "state=? AND kind=? AND model_name=? AND successor IS NULL AND lineage IS NOT NULL",
        (ENDED, RECURSIVE, guest.model.get("name", "")),
    )
    return [a for a in heirless if a.name not in offered]


def assigned_candidate(registry: AgentRegistry, guest: Agent, same_model: list[Agent]) -> Agent | None:
    """The operator-assigned ancestor, by agent name then lineage, same model first."""
    wanted = guest.assigned_ancestor
    any_model = registry.where("state=? AND kind=? AND successor IS NULL AND lineage IS NOT NULL", (ENDED, RECURSIVE))
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
