"""What happens in a station, as typed records: each kind of event is a frozen dataclass.

The engine's own kinds are here; a feature defines its kinds in its own package with
`@event_kind("name")`. `ctx.emit(SomeEvent(...), agent)` stores the record in the `events`
table (its fields as a JSON object) and hands it to every hook with a handler for that type:
a hook method marked `@on(SomeEvent)`, one method per kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from station.core.registry import Registry

if TYPE_CHECKING:
    from station.core.context import Context


@dataclass(frozen=True)
class Event:
    """A kind of event. Fields declared with `optional()` are stored only when set, so that a
    record carries only the facts that apply (a respawned guest names whom it replaces)."""

    kind: ClassVar[str] = ""

    def payload(self) -> dict[str, Any]:
        """The fields as the `events` table stores them."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if not (f.metadata.get("optional") and getattr(self, f.name) is None)
        }


def optional() -> Any:
    """A field stored only when it is not None."""
    return field(default=None, metadata={"optional": True})


E = TypeVar("E", bound=type[Event])
EVENT_TYPES: Registry[type[Event]] = Registry("event kind")


def event_kind(kind: str) -> Callable[[E], E]:
    """Name and register an event class (a frozen dataclass subclass of Event)."""

    def register(cls: E) -> E:
        cls.kind = kind
        EVENT_TYPES.register(kind)(cls)
        return cls

    return register


Handler = Callable[[Any, "Context", "str | None", Any], None]


def on(kind: type[Event]) -> Callable[[Handler], Handler]:
    """Mark a hook method as the handler of one kind: `(self, ctx, agent, event)`."""

    def mark(method: Handler) -> Handler:
        method.handles = kind  # type: ignore[attr-defined]  # read by Hook.__init_subclass__
        return method

    return mark


def handlers_of(cls: type) -> dict[str, str]:
    """Event kind -> the name of the method that handles it, over a class and its bases."""
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            kind = getattr(value, "handles", None)
            if isinstance(kind, type) and issubclass(kind, Event):
                if not kind.kind:
                    raise TypeError(f"{cls.__name__}.{name} handles {kind.__name__}, which has no @event_kind")
                found[kind.kind] = name
    return found


# -- the engine's own kinds ------------------------------------------------------------------
@event_kind("station_created")
@dataclass(frozen=True)
class StationCreated(Event):
    pass


@event_kind("tick_started")
@dataclass(frozen=True)
class TickStarted(Event):
    pass


@event_kind("tick_ending")
@dataclass(frozen=True)
class TickEnding(Event):
    pass


@event_kind("turn_started")
@dataclass(frozen=True)
class TurnStarted(Event):
    pass


@event_kind("turn_finished")
@dataclass(frozen=True)
class TurnFinished(Event):
    actions: list[str]  # the actions of the turn that succeeded


@event_kind("agent_spawned")
@dataclass(frozen=True)
class AgentSpawned(Event):
    agent_kind: str
    model: str
    replaces: str | None = optional()  # a respawned guest: the agent who left


@event_kind("agent_ascended")
@dataclass(frozen=True)
class AgentAscended(Event):
    guest: str
    lineage: str
    generation: int
    ancestor: str | None


@event_kind("agent_departed")
@dataclass(frozen=True)
class AgentDeparted(Event):
    reason: str
    respawn: bool


@event_kind("agents_model_changed")
@dataclass(frozen=True)
class AgentsModelChanged(Event):
    key: str
    model: str
    agents: list[str]


@event_kind("operator_command")
@dataclass(frozen=True)
class OperatorCommand(Event):
    command: dict[str, Any]


@event_kind("operator_pause")
@dataclass(frozen=True)
class OperatorPause(Event):
    pass


@event_kind("operator_alert")
@dataclass(frozen=True)
class OperatorAlert(Event):
    """Something the operator should look at. `details`: what it concerns, in the feature's own
    terms (the evaluation, the paper), stored beside the problem."""

    problem: str
    traceback: str | None = optional()
    details: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        stored = {"problem": self.problem, **self.details}
        if self.traceback is not None:
            stored["traceback"] = self.traceback
        return stored
