"""Reflection Chamber: `reflect` starts a multi-round inner dialogue within the same turn.

The rounds are an internal action: the engine runs them after the reply's other actions,
and the answers are kept in the conversation only (never parsed for actions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from station.core.agents import Agent
from station.core.config import Section, config_section
from station.core.context import Context
from station.core.events import Event, event_kind
from station.core.room import Outcome, Params, Room, action, register_room

MAX_PROMPT_CHARS = 4000


@config_section("reflection")
class ReflectionConfig(Section):
    default_rounds: int = Field(5, ge=1)
    max_rounds: int = Field(10, ge=1, le=50)


@event_kind("reflection_finished")
@dataclass(frozen=True)
class ReflectionFinished(Event):
    rounds: int


class ReflectParams(Params):
    prompt: str | None = Field(None, max_length=MAX_PROMPT_CHARS)
    # Any type is accepted and coerced by hand: a bad value falls back with a warning.
    tick: Any = None


def rounds(value: Any, default: int, most: int) -> tuple[int, list[str]]:
    """The number of reflection rounds from the YAML `tick` value, with warning lines."""
    if value is None:
        return default, []
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value.strip())  # "3" is fine; "lots" falls through to the warning
        except ValueError:
            pass
    if number is None:
        shown = str(value) if len(str(value)) <= 40 else str(value)[:40] + "..."
        return default, [f"Warning: 'tick: {shown}' is not a whole number; reflecting for the default {default} ticks."]
    if number <= 0:
        return default, [
            f"Warning: 'tick' must be at least 1 (got {number}); reflecting for the default {default} ticks."
        ]
    if number > most:
        return most, [
            f"Warning: at most {most} reflection ticks are allowed (asked for {number}); reflecting for {most}."
        ]
    return number, []


class Reflection:
    """Round k of n: the opening text first, then only a marker per round."""

    def __init__(self, opening: str, total: int) -> None:
        self.opening, self.total = opening, total
        self.round = 1

    def _marker(self, ctx: Context) -> str:
        marker = ctx.texts.render("reflection_tick", k=self.round, n=self.total)
        if self.round == self.total:
            marker += "\n\n" + ctx.texts.render("reflection_last_tick")
        return marker

    def first_prompt(self, ctx: Context, agent: Agent) -> str:
        return f"{self.opening}\n\n{self._marker(ctx)}"

    def step(self, ctx: Context, agent: Agent, reply: str) -> tuple[str | None, list[str]]:
        if self.round >= self.total:
            ctx.emit(ReflectionFinished(self.total), agent.name)
            return None, [ctx.texts.render("reflection_done", n=self.total)]
        self.round += 1
        return self._marker(ctx), []


@register_room
class ReflectionChamber(Room):
    short, name = "reflect", "Reflection Chamber"
    lobby_order = 30

    def help_values(self, ctx: Context) -> dict[str, Any]:
        cfg = ctx.config.section(ReflectionConfig)
        return {"default_rounds": cfg.default_rounds, "max_rounds": cfg.max_rounds}

    def status_counts(self, ctx: Context) -> dict[str, Any]:
        return {"reflections": ctx.store.scalar("SELECT COUNT(*) FROM events WHERE kind='reflection_finished'")}

    def render(self, ctx: Context, agent: Agent) -> str:
        state = agent.room_state(self.short)
        lines = [
            "A quiet place to think things through at length. Start with `/execute_action{reflect}` "
            "(optionally with a ```yaml block giving `prompt` and `tick`)."
        ]
        if state.get("count"):
            lines.append(f"You have reflected here {state['count']} time(s); the last at tick {state['last_tick']}.")
        return "\n".join(lines)

    @action("reflect", params=ReflectParams, internal=True, yaml_required=False)
    def reflect(self, ctx: Context, agent: Agent, args: str | None, p: ReflectParams) -> Outcome:
        cfg = ctx.config.section(ReflectionConfig)
        total, warnings = rounds(p.tick, cfg.default_rounds, cfg.max_rounds)
        opening = (p.prompt or "").strip() or ctx.texts.render("reflection_default_prompt")
        state = agent.room_state(self.short)
        state["count"] = state.get("count", 0) + 1
        state["last_tick"] = ctx.tick
        # Warnings are logged now; the completion line follows when the last round is answered.
        return Outcome(warnings, internal=Reflection(opening, total))
