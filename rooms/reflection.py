"""Reflection Chamber: `reflect` starts a multi-round inner dialogue within the same turn.

The rounds are an internal action: the engine runs them after the reply's other actions,
and the answers are kept in the conversation only (never parsed for actions). `meta_reflect`
is the compulsory kind, on a drawn prompt, when `reflection.meta_every_ticks` asks for it
(its prompts and countdown: rooms/meta_reflection.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from rooms import meta_reflection as meta
from station.core.agents import Agent
from station.core.config import Section, StationConfig, beside, config_section
from station.core.context import Context, Hook
from station.core.events import Event, TurnStarted, event_kind, on
from station.core.room import Outcome, Params, Room, action, register_room

MAX_PROMPT_CHARS = 4000


@config_section("reflection")
class ReflectionConfig(Section):
    default_rounds: int = Field(5, ge=1)
    max_rounds: int = Field(10, ge=1, le=50)
    meta_every_ticks: int = Field(
        0, ge=0, description="mature agents must meta-reflect at least this often, in ticks (0: never asked)"
    )
    meta_rounds: int = Field(3, ge=1, le=50, description="reflection ticks of one meta-reflection")
    meta_grace_ticks: int = Field(
        5, ge=1, description="an agent this many ticks overdue is warned every tick until it meta-reflects"
    )
    meta_protected_limit: int | None = Field(
        4, ge=0, description="the newest this many meta-reflection start ticks cannot be pruned (null: all)"
    )
    meta_prompt_file: str | None = Field(
        None, description="YAML list of meta-reflection prompts (default: codex/meta_reflection_prompts.yaml)"
    )

    def resolve_paths(self, config_file: Path) -> None:
        if self.meta_prompt_file:
            self.meta_prompt_file = beside(config_file, self.meta_prompt_file)


@event_kind("reflection_finished")
@dataclass(frozen=True)
class ReflectionFinished(Event):
    rounds: int


@event_kind("meta_reflection_finished")
@dataclass(frozen=True)
class MetaReflectionFinished(Event):
    rounds: int
    prompt: str


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
            return None, self.finish(ctx, agent)
        self.round += 1
        return self._marker(ctx), []

    def finish(self, ctx: Context, agent: Agent) -> list[str]:
        ctx.emit(ReflectionFinished(self.total), agent.name)
        return [ctx.texts.render("reflection_done", n=self.total)]


class MetaReflection(Reflection):
    """A reflection on a drawn prompt whose last answer restarts the agent's countdown."""

    def __init__(self, opening: str, total: int, prompt: str, every: int) -> None:
        super().__init__(opening, total)
        self.prompt, self.every = prompt, every

    def finish(self, ctx: Context, agent: Agent) -> list[str]:
        meta.restart_countdown(ctx, agent)
        ctx.emit(MetaReflectionFinished(self.total, self.prompt), agent.name)
        return [ctx.texts.render("meta_reflection_done", n=self.total, every=self.every)]


@register_room
class ReflectionChamber(Room):
    short, name = "reflect", "Reflection Chamber"
    lobby_order = 30

    def hooks(self, config: StationConfig) -> list[Hook]:
        # The section cannot be changed on a running station (`station set` refuses it): a station
        # made without meta-reflection never loads the hook and pays nothing for it per turn.
        cfg = config.section(ReflectionConfig)
        if not cfg.meta_every_ticks:
            return []
        meta.load_prompts(meta.prompt_file(cfg.meta_prompt_file))  # a bad file stops the start, not a turn
        return [MetaReflectionCountdown()]

    def help_values(self, ctx: Context) -> dict[str, Any]:
        cfg = ctx.config.section(ReflectionConfig)
        values: dict[str, Any] = {
            "default_rounds": cfg.default_rounds,
            "max_rounds": cfg.max_rounds,
            "meta_help": "",  # off: the help older stations were shown, word for word
        }
        if cfg.meta_every_ticks:
            limit = cfg.meta_protected_limit
            protection = (
                ctx.texts.render("meta_reflection_protection_all")
                if limit is None
                else ctx.texts.render("meta_reflection_protection", limit=limit)
                if limit
                else ""
            )
            values["meta_help"] = ctx.texts.render(
                "meta_reflection_help", every=cfg.meta_every_ticks, n=cfg.meta_rounds, protection=protection
            )
        return values

    def status_lines(self, ctx: Context, agent: Agent) -> list[str]:
        every = ctx.config.section(ReflectionConfig).meta_every_ticks
        if not every or not agent.active or not ctx.is_mature(agent):
            return []
        left = every - meta.ticks_counted(ctx, agent)
        if left > 0:
            return [f"- Meta-Reflection: due in {left} tick{'s' if left > 1 else ''}"]
        when = "due now" if left == 0 else f"overdue by {-left} tick{'s' if left < -1 else ''}"
        return [f"- Meta-Reflection: {when} (`/execute_action{{meta_reflect}}` in the Reflection Chamber)"]

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
        if state.get("meta_count"):
            lines.append(f"You have meta-reflected here {state['meta_count']} time(s).")
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

    @action("meta_reflect", internal=True)
    def meta_reflect(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        cfg = ctx.config.section(ReflectionConfig)
        if not cfg.meta_every_ticks:
            return Outcome(["This station asks for no meta-reflection; use `reflect` to reflect freely."])
        if not ctx.is_mature(agent):
            return Outcome(["Meta-reflection is for mature agents; you will be asked once you are mature."])
        drawn = meta.draw_prompt(ctx, agent, meta.load_prompts(meta.prompt_file(cfg.meta_prompt_file)))
        meta.protect_start_tick(ctx, agent, cfg.meta_protected_limit)
        state = agent.room_state(self.short)
        state["meta_count"] = state.get("meta_count", 0) + 1
        opening = ctx.texts.render("meta_reflection_opening", question=drawn.text)
        return Outcome([], internal=MetaReflection(opening, cfg.meta_rounds, drawn.text, cfg.meta_every_ticks))


class MetaReflectionCountdown(Hook):
    """Starts each mature agent's meta-reflection countdown at its first turn, and warns it every
    turn once it is `meta_grace_ticks` overdue (until its next meta-reflection restarts the count)."""

    name = "meta_reflection"
    order = 40

    @on(TurnStarted)
    def count(self, ctx: Context, agent_name: str | None, event: TurnStarted) -> None:
        cfg = ctx.config.section(ReflectionConfig)
        agent = ctx.agents.get(agent_name or "")
        if agent is None or not agent.active or not ctx.is_mature(agent):
            return
        state = agent.room_state(ReflectionChamber.short)
        if meta.SINCE not in state:
            meta.restart_countdown(ctx, agent)
        overdue = meta.ticks_counted(ctx, agent) - cfg.meta_every_ticks
        if overdue >= cfg.meta_grace_ticks:
            ctx.notify(agent, ctx.texts.render("meta_reflection_overdue", ticks=overdue), "meta_reflection")
