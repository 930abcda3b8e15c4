"""The room plugin API: a room declares its actions (typed YAML params, access rules, handler).

The engine knows no room by name. It asks a room for its output, checks access, validates
an action's YAML against the action's pydantic model, and calls the handler with the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from station.core.registry import PLUGINS, Registry
from station.core.texts import fill

if TYPE_CHECKING:
    from station.core.agents import Agent
    from station.core.config import StationConfig
    from station.core.context import Context, Hook
    from station.core.store import Store


class Params(BaseModel):
    """Base of every action's YAML parameters; unknown keys are reported, not fatal."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=False)


class InternalAction(Protocol):
    """Extra model exchanges inside the same turn (codex reading, a test answer, exit)."""

    def first_prompt(self, ctx: Context, agent: Agent) -> str: ...

    def step(self, ctx: Context, agent: Agent, reply: str) -> tuple[str | None, list[str]]:
        """Take the agent's reply; return the next prompt (None ends it) and result lines."""


@dataclass
class Outcome:
    lines: list[str] = field(default_factory=list)
    internal: InternalAction | None = None


@dataclass(frozen=True)
class ActionSpec:
    name: str
    handler: Callable[..., Any]
    params: type[Params] | None
    internal: bool
    guests: bool | None  # None: the room's rule applies
    yaml_required: bool


_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def action(
    name: str,
    *,
    params: type[Params] | None = None,
    internal: bool = False,
    guests: bool | None = None,
    yaml_required: bool | None = None,
) -> Callable[[_Handler], _Handler]:
    """Declare a room method as the handler of `name`."""

    def mark(fn: _Handler) -> _Handler:
        fn.__action__ = ActionSpec(  # type: ignore[attr-defined]
            name=name,
            handler=fn,
            params=params,
            internal=internal,
            guests=guests,
            yaml_required=params is not None if yaml_required is None else yaml_required,
        )
        return fn

    return mark


class Room:
    short: ClassVar[str]
    name: ClassVar[str]
    guests_allowed: ClassVar[bool] = True
    maturity_gated: ClassVar[bool] = False
    listed: ClassVar[bool] = True
    migrations: ClassVar[list[str]] = []
    migration_component: ClassVar[str | None] = None  # rooms sharing tables share a component
    actions: ClassVar[dict[str, ActionSpec]] = {}
    lobby_order: ClassVar[int]  # where the Lobby lists the room (10, 20, ...: leave gaps for new rooms)
    # Actions that count as work for the inactivity warnings (e.g. `submit` at the Research Counter).
    productive_actions: ClassVar[tuple[str, ...]] = ()
    # The first-visit help a room package carries ($placeholders from help_values); a codex set's
    # help/<short>.md, where there is one, replaces it.
    help_text: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found: dict[str, ActionSpec] = {}
        for base in reversed(cls.__mro__):
            for value in vars(base).values():
                spec = getattr(value, "__action__", None)
                if spec is not None:
                    found[spec.name] = spec
        cls.actions = found

    def hooks(self, config: StationConfig) -> list[Hook]:
        """The hooks this room brings (its grader, reviewer, deliveries, housekeeping); they
        are loaded with the room, so a disabled room's hooks never run."""
        return []

    # -- what a room may tell the rest of the station (each default: nothing) -------------------
    def system_notices(self, ctx: Context, agent: Agent) -> list[str]:
        """Lines for the agent's System Messages this turn, wherever it is."""
        return []

    def status_lines(self, ctx: Context, agent: Agent) -> list[str]:
        """Lines for the agent's System Information (`- Label: value`), wherever it is: a countdown
        the room keeps for it, say."""
        return []

    def awaiting_operator(self, ctx: Context) -> list[str]:
        """What waits for the operator's answer (a tick-end pause names them)."""
        return []

    @classmethod
    def check_operator_answer(cls, store: Store, request: int) -> bool:
        """Before an operator's answer is queued: True when request number `request` is this
        room's and still open. One of this room's that cannot be answered raises ValueError with
        a sentence for the operator. Reads only (the station may be running)."""
        return False

    def answer_operator(self, ctx: Context, request: int, text: str | None) -> bool:
        """Take the operator's answer to request number `request`; False when it is not this
        room's. A request that cannot be answered raises ValueError with a sentence for the operator."""
        return False

    def offered_ancestor(self, ctx: Context, agent: Agent) -> Agent | None:
        """The ancestor this guest has been offered to continue (the Test Chamber decides), or None."""
        return None

    def status_counts(self, ctx: Context) -> dict[str, Any]:
        """Counts merged into `station status` (a dict value is merged into the key's dict)."""
        return {}

    def lineage_credits(self, ctx: Context) -> dict[str, float]:
        """Credit per lineage, added to its utility when a guest chooses a lineage to join."""
        return {}

    def task_summary(self, ctx: Context) -> str | None:
        """The research task in short, for reviewers (None: this room has none)."""
        return None

    # -- what the agent sees ----------------------------------------------------------------
    def help_values(self, ctx: Context) -> dict[str, Any]:
        return {}

    def help(self, ctx: Context, agent: Agent) -> str:
        values = self.help_values(ctx)
        return ctx.texts.help(self.short, **values) or fill(self.help_text, f"{self.short} help", values)

    def render(self, ctx: Context, agent: Agent) -> str:
        """The room's content for this agent (without the first-visit help)."""
        return ""

    def refusal(self, ctx: Context, agent: Agent) -> str | None:
        if agent.is_guest and not self.guests_allowed:
            return f"The {self.name} is open to recursive agents only. Pass the test in the Test Chamber first."
        return None

    def output(self, ctx: Context, agent: Agent) -> str:
        """First-visit help (once) followed by the content; rendering marks the help as seen."""
        refused = self.refusal(ctx, agent)
        if refused:
            return refused  # help is kept for the first visit that is allowed in
        parts = []
        state = agent.room_state(self.short)
        if not state.get("help_shown"):
            state["help_shown"] = True
            parts.append(f"---\n**Help Message - {self.name}**\n\n{self.help(ctx, agent)}\n\n---")
        parts.append(self.render(ctx, agent))
        return "\n\n".join(p for p in parts if p)

    # -- what the agent does ----------------------------------------------------------------
    def unoffered(self, ctx: Context) -> frozenset[str]:
        """Actions of this room that the station's config leaves out (e.g. a mode that is off): for
        the agents they do not exist here: not in the help, not listed, not recognized."""
        return frozenset()

    def action_refusal(self, ctx: Context, agent: Agent, spec: ActionSpec) -> str | None:
        guests = self.guests_allowed if spec.guests is None else spec.guests
        if agent.is_guest and not guests:
            return f"'{spec.name}' in the {self.name} is for recursive agents only."
        return None


# Rooms by short name: those in rooms/, and any of a package listed under the `station.plugins` entry points.
ROOMS: Registry[type[Room]] = Registry("room", plugins=PLUGINS)
RoomClass = TypeVar("RoomClass", bound=type[Room])


def register_room(cls: RoomClass) -> RoomClass:
    """Register a room class under its short name; a new station has it unless `rooms.disabled` lists it; an existing one when `rooms.enabled` does."""
    ROOMS.register(cls.short)(cls)
    return cls  # the same class, typed as the caller's (the registry's entry type is type[Room])


def validate_params(spec: ActionSpec, raw: dict[str, Any] | None) -> tuple[Params | None, str | None, list[str]]:
    """Turn an action's YAML into its typed params: (params, error, notes)."""
    if spec.params is None:
        notes = [f"Note: '{spec.name}' takes no YAML; the block below it was ignored."] if raw else []
        return None, None, notes
    fields = spec.params.model_fields
    if raw is None:
        if spec.yaml_required:
            return None, (f"it needs a ```yaml block right below the action with: {_describe_fields(spec.params)}."), []
        raw = {}
    notes = []
    unknown = sorted(k for k in raw if k not in fields)
    if unknown:
        notes.append(
            f"Note: '{spec.name}' ignored unknown YAML key(s): {', '.join(unknown)} (it reads: {', '.join(fields)})."
        )
    try:
        return spec.params.model_validate(raw), None, notes
    except ValidationError as err:
        problems = []
        for e in err.errors():
            key = ".".join(str(p) for p in e["loc"]) or "(yaml)"
            if e["type"] == "missing":
                problems.append(f"key '{key}' is missing")
            elif e["type"] == "string_too_long":
                problems.append(f"'{key}' is too long (at most {e['ctx']['max_length']} characters)")
            elif e["type"] == "too_long":
                problems.append(f"'{key}' has too many items (at most {e['ctx']['max_length']})")
            else:
                problems.append(f"'{key}': {e['msg']}")
        return None, f"YAML problem: {'; '.join(problems)}. Expected: {_describe_fields(spec.params)}.", notes


def _describe_fields(model: type[Params]) -> str:
    parts = []
    for key, info in model.model_fields.items():
        parts.append(key if info.is_required() else f"{key} (optional)")
    return ", ".join(parts)
