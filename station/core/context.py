"""The API rooms and hooks act through: clock, agents, inbox, events, randomness, recorded inputs.

Everything here runs inside the engine's open transaction, so whatever a room or hook does
is committed together with the turn (or rolled back with it).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from station.core.agents import GUEST, Agent, AgentRegistry
from station.core.config import StationConfig
from station.core.conversation import Conversations
from station.core.events import EVENT_TYPES, Event, handlers_of
from station.core.registry import PLUGINS, Registry
from station.core.store import Store, dumps
from station.core.texts import Texts

if TYPE_CHECKING:
    from station.core.model_api import ModelSource
    from station.core.room import Room


class NeedInput(Exception):
    """Raised inside a transaction when an input must be fetched from the outside world.

    The engine rolls the transaction back, calls `produce()` outside it, records the result
    under `key`, and runs the unit of work again; the second time `obtain` finds the input.
    """

    def __init__(
        self,
        key: str,
        kind: str,
        agent: str | None,
        produce: Callable[[], dict[str, Any]],
        request_hash: str | None = None,
    ) -> None:
        super().__init__(key)
        self.key, self.kind, self.agent, self.produce = key, kind, agent, produce
        self.request_hash = request_hash
        self.also: list[NeedInput] = []  # further inputs the unit needs, fetched at the same time
        self.model: Any = None  # the model `produce` calls, where known: sizes the engine's thread pool
        # Sends the call without a thread waiting for it (request processes); (payload, latency) comes in the future.
        self.send: Callable[[], Any] | None = None

    @property
    def needs(self) -> list[NeedInput]:
        return [self, *self.also]


# What `Context.obtain` takes: key, kind, agent, producer, request hash.
InputRequest = tuple[str, str, "str | None", Callable[[], dict[str, Any]], "str | None"]


class ReplayDiverged(RuntimeError):
    pass


class WaitInterrupted(RuntimeError):
    """The station was asked to stop while a unit waited for an outside input (e.g. an evaluation)."""


class StationPaused(RuntimeError):
    """The station cannot go on without an operator (a model's permanent error, a broken sandbox)."""


class Hook:
    """A watcher of engine events (maturity, tips, grading, ...): one method per kind it handles,
    marked `@on(SomeEvent)` and called as `(ctx, agent, event)`."""

    name = "hook"
    handlers: ClassVar[dict[str, str]] = {}  # event kind -> method name (from the @on marks)
    events: ClassVar[tuple[str, ...]] = ()  # the kinds it handles
    migrations: list[str] = []  # tables the hook owns, applied as component "hook:<name>"
    # Hooks of one event run in this order (lower first; ties in load order). It is part of
    # the world's determinism: changing it changes what a replay of an older station writes.
    order: int = 100

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.handlers = handlers_of(cls)
        cls.events = tuple(cls.handlers)

    def handle(self, ctx: Context, agent: str | None, event: Event) -> None:
        method = self.handlers.get(event.kind)
        if method is not None:
            getattr(self, method)(ctx, agent, event)


# Hooks that belong to no room (a room brings its own through `Room.hooks`), by name.
STATION_HOOKS: Registry[type[Hook]] = Registry("hook", plugins=PLUGINS)


def register_hook(cls: type[Hook]) -> type[Hook]:
    """Register a station-wide hook class under its name; every station loads it."""
    return STATION_HOOKS.register(cls.name)(cls)


# Who receives a broadcast of a given kind while immature (spec capsules §10.2-10.3).
MATURE_ONLY_KINDS = {"termination", "publication", "public_memory"}


P = TypeVar("P")


def _no_room_opener(before: StationConfig, after: StationConfig) -> None:
    raise ValueError("this station cannot open rooms while it runs")


class Context:
    def __init__(
        self, store: Store, config: StationConfig, texts: Texts, agents: AgentRegistry, conversations: Conversations
    ) -> None:
        self.store, self.config, self.texts = store, config, texts
        self.agents, self.conversations = agents, conversations
        self.rooms: dict[str, Room] = {}
        self.hooks: list[Hook] = []
        self.models: ModelSource = None  # type: ignore[assignment]  # set by the world: the providers' ModelPool
        self._parts: dict[type[Any], object] = {}  # features' station-wide objects, by type (attach)
        self.replay_source: Store | None = None
        self.replay_strict = False
        self.stop_event: Any = None  # set by the engine: a threading.Event asking the run to stop
        self.on_wait: Callable[[str], None] = lambda text: None  # progress while a unit waits
        # set by the world: opens the rooms a changed config adds (before, after); ValueError if it removes one
        self.open_rooms: Callable[[StationConfig, StationConfig], None] = _no_room_opener

    def attach(self, part: object) -> None:
        """Keep a feature's station-wide object (the research tasks, ...) for its rooms to find by its
        type: the engine holds it without knowing what it is."""
        self._parts[type(part)] = part

    def part(self, kind: type[P]) -> P | None:
        """The object of exactly this type that a feature attached, if any."""
        part = self._parts.get(kind)
        return part if isinstance(part, kind) else None

    def report_wait(self, text: str) -> None:
        self.on_wait(text)

    # -- clock ----------------------------------------------------------------------------
    @property
    def tick(self) -> int:
        tick: int = self.store.get_meta("tick", 1)
        return tick

    # -- randomness: derived from the seed and where it is used, so nothing to persist ----
    def rng(self, *parts: Any) -> random.Random:
        digest = hashlib.sha256(dumps([self.config.seed, *parts]).encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    # -- maturity -------------------------------------------------------------------------
    def is_mature(self, agent: Agent) -> bool:
        limit = self.config.lifecycle.maturity_ticks
        return limit is None or agent.age(self.tick) >= limit

    # -- inbox ----------------------------------------------------------------------------
    def notify(self, agent: Agent | str, text: str, kind: str = "system") -> None:
        name = agent if isinstance(agent, str) else agent.name
        self.store.execute(
            "INSERT INTO messages(agent, tick, kind, text) VALUES(?, ?, ?, ?)", (name, self.tick, kind, text.strip())
        )

    def broadcast(
        self, text: str, kind: str, *, exclude: Iterable[str] = (), recursive_only: bool = False
    ) -> list[str]:
        """Send to every active agent; kinds in MATURE_ONLY_KINDS skip immature agents."""
        skip, tick, limit = set(exclude), self.tick, self.config.lifecycle.maturity_ticks
        sent = []
        for name, agent_kind, birth_tick in self.agents.roster():  # read from the index: nobody's record is loaded
            if name in skip or (recursive_only and agent_kind == GUEST):
                continue
            if kind in MATURE_ONLY_KINDS and limit is not None and tick - birth_tick < limit:  # as is_mature
                continue
            sent.append(name)
        self.store.executemany(
            "INSERT INTO messages(agent, tick, kind, text) VALUES(?, ?, ?, ?)",
            [(name, tick, kind, text.strip()) for name in sent],
        )
        return sent

    def pending_messages(self, agent: Agent) -> list[tuple[int, str]]:
        rows = self.store.all(
            "SELECT id, text FROM messages WHERE agent=? AND delivered_tick IS NULL ORDER BY id", (agent.name,)
        )
        return [(r["id"], r["text"]) for r in rows]

    def mark_delivered(self, ids: list[int]) -> None:
        self.store.executemany("UPDATE messages SET delivered_tick=? WHERE id=?", [(self.tick, i) for i in ids])

    # -- events and hooks -----------------------------------------------------------------
    def emit(self, event: Event, agent: str | None = None) -> None:
        """Record `event` (about `agent`, if it concerns one) and hand it to the hooks that handle its kind."""
        if event.kind not in EVENT_TYPES:
            raise ValueError(f"{type(event).__name__} is not a registered event kind (@event_kind)")
        self.store.execute(
            "INSERT INTO events(tick, kind, agent, payload) VALUES(?, ?, ?, ?)",
            (self.tick, event.kind, agent, dumps(event.payload())),
        )
        for hook in self.hooks:
            if event.kind in hook.handlers:
                hook.handle(self, agent, event)

    # -- recorded inputs ------------------------------------------------------------------
    def obtain(
        self,
        key: str,
        kind: str,
        agent: str | None,
        produce: Callable[[], dict[str, Any]],
        request_hash: str | None = None,
        *,
        inline: bool = False,
    ) -> dict[str, Any]:
        """The recorded input under `key`; fetched (via NeedInput) the first time only.

        `inline`: `produce` only reads the store and returns at once (which evaluations are
        complete, say), so it is produced here and recorded in the unit's own transaction:
        committed with what it causes, or rolled back with it, and no rollback and second run of
        the unit is needed to fetch it."""
        payload = self.store.get_input(key)
        if payload is not None:
            return payload
        if self.replay_source is not None:
            row = self.replay_source.one("SELECT payload, request_hash FROM inputs WHERE key=?", (key,))
            if row is not None:
                if self.replay_strict and row["request_hash"] != request_hash:
                    raise ReplayDiverged(f"input {key!r} answered a different request in the source station")
                recorded: dict[str, Any] = json.loads(row["payload"])
                self.store.put_input(key, kind, self.tick, agent, recorded, request_hash)
                return recorded
            if self.replay_strict:
                raise ReplayDiverged(f"the source station has no recorded input {key!r}")
        if inline:
            payload = produce()
            self.store.put_input(key, kind, self.tick, agent, payload, request_hash)
            return payload
        raise NeedInput(key, kind, agent, produce, request_hash)

    def obtain_all(self, requests: Iterable[InputRequest]) -> None:
        """Make sure every request's input is recorded: the missing ones are fetched together
        (concurrently, in one rollback) instead of one rollback and re-run per input."""
        missing: list[NeedInput] = []
        for request in requests:
            try:
                self.obtain(*request)
            except NeedInput as need:
                missing.append(need)
        if missing:
            missing[0].also = missing[1:]
            raise missing[0]

    # -- rooms ----------------------------------------------------------------------------
    def room(self, short: str) -> Room | None:
        return self.rooms.get(short)

    # -- what rooms tell each other (declared on Room, each with a do-nothing default) -----------
    def task_summary(self) -> str | None:
        """The research task in short, from the room that has one (for reviewers)."""
        return next((text for room in self.rooms.values() if (text := room.task_summary(self))), None)

    def offered_ancestor(self, agent: Agent) -> Agent | None:
        """The ancestor a guest has been offered, from the room that makes offers."""
        return next((found for room in self.rooms.values() if (found := room.offered_ancestor(self, agent))), None)

    def lineage_credits(self) -> dict[str, float]:
        """Credit per lineage from every room, added up (a guest's choice of lineage weighs it)."""
        credits: dict[str, float] = {}
        for room in self.rooms.values():
            for lineage, value in room.lineage_credits(self).items():
                credits[lineage] = credits.get(lineage, 0.0) + value
        return credits

    def room_name(self, short: str) -> str:
        room = self.rooms.get(short)
        return room.name if room else short


def request_hash(messages: list[dict[str, str]]) -> str:
    """A short fingerprint of what was sent to a model, to spot a diverging replay."""
    return hashlib.sha256(json.dumps(messages[-1:], sort_keys=True).encode()).hexdigest()[:16]
