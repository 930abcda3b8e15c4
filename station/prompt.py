"""Builds an agent's turn prompt from its ordered sections (spec engine §4.2).

System Information, System Messages, Actions Detected (last turn), Room Output History (the
actions executed last turn and fresh output of each room visited), Current State.
Composing has side effects (warnings queued, first-visit help marked, messages delivered),
all inside the turn's transaction.
"""
from __future__ import annotations

import traceback
from typing import Any

from .agents import Agent
from .context import Context, NeedInput, ReplayDiverged, StationPaused, WaitInterrupted
from .lifecycle import effective_limit, queue_warnings
from .safe_text import valid

RULE = "\n\n---\n\n"
ENGINE_SIGNALS = (NeedInput, ReplayDiverged, StationPaused, WaitInterrupted)  # the engine's, never a room's error


def compose(ctx: Context, agent: Agent) -> str:
    queue_warnings(ctx, agent)
    notices = [n for room in ctx.rooms.values() for n in getattr(room, "system_notices", lambda c, a: [])(ctx, agent)]
    pending = ctx.pending_messages(agent)
    ctx.mark_delivered([mid for mid, _ in pending])
    sections = [
        system_information(ctx, agent),
        system_messages(notices + [text for _, text in pending]),
    ]
    if agent.last_summary:
        sections.append("## Actions Detected (Last Turn)\n" + "\n".join(agent.last_summary))
    history, shown = room_history(ctx, agent)
    sections.append(history)
    sections.append(current_state(ctx, agent, already_shown=agent.location in shown))
    return valid(RULE.join(sections))  # file names and room outputs may hold bytes no provider accepts


def room_view(ctx: Context, room: Any, agent: Agent) -> str:
    """A room's view, under the same protection as its actions: an error is undone and reported,
    and the turn goes on (a view reads files and tables that agents' code and replies shaped)."""
    try:
        with ctx.store.savepoint("view"):
            return room.output(ctx, agent)
    except ENGINE_SIGNALS:
        raise
    except Exception as err:  # noqa: BLE001 - a room's bug or a hostile file must not stop the station
        ctx.emit("operator_alert", agent.name, problem=f"the view of {room.short} raised {err!r}",
                 traceback=traceback.format_exc(limit=8))
        return (f"(The {room.name} could not be shown this turn: {type(err).__name__}. The operator was alerted; "
                "your actions here still work.)")


def system_information(ctx: Context, agent: Agent) -> str:
    lines = [
        "## System Information",
        f"- Station Tick: {ctx.tick}",
        f"- Station Status: {ctx.store.get_meta('station_status', 'Healthy')}",
        f"- Agent Name: {agent.name}",
        f"- Agent Description: {agent.description}",
        f"- Agent Status: {'Guest Agent' if agent.is_guest else 'Recursive Agent'}",
    ]
    if agent.meta_prompt:
        lines.append(f"- Agent Meta Prompt:\n```\n{agent.meta_prompt}\n```")
    limit = effective_limit(ctx, agent)
    ceiling = " (guest ceiling; ascend to raise it)" if agent.is_guest and limit < agent.token_budget else ""
    if agent.context_tokens is None:
        lines.append(f"- Agent Token Budget: Max {limit:,} (usage not yet recorded){ceiling}")
    else:
        used = agent.context_tokens
        lines.append(f"- Agent Token Budget: {used:,} / {limit:,} used ({100 * used / limit:.0f}%){ceiling}")
    age = f"- Agent Age: {agent.age(ctx.tick)} ticks"
    if agent.max_age is not None:
        age += f" / {agent.max_age} ticks"
    if ctx.config.lifecycle.maturity_ticks is not None:
        age += " (mature)" if ctx.is_mature(agent) else " (immature)"
    lines.append(age)
    if agent.role:
        lines.append(f"- Agent Role: {agent.role.capitalize()}")
    return "\n".join(lines)


def system_messages(texts: list[str]) -> str:
    if not texts:
        return "## System Messages\nNone"
    parts = ["## System Messages"]
    for i, text in enumerate(texts, 1):
        parts.append(f"### Message {i}\n\n{text}")
    return "\n".join(parts)


def room_history(ctx: Context, agent: Agent) -> tuple[str, set[str]]:
    if not agent.last_history:
        return "## Room Output History (Last Turn)\n\nNo room history from last turn.", set()
    parts = ["## Room Output History (Last Turn)"]
    shown: set[str] = set()
    for entry in agent.last_history:
        short = entry["room"]
        room = ctx.room(short)
        executed = "\n".join(f"- {line}" for line in entry["lines"]) or "- None"
        block = f"### Location: {ctx.room_name(short)}\n**Actions Executed:**\n{executed}"
        if room is not None and agent.active:
            block += f"\n\n**Latest Room Output:**\n{room_view(ctx, room, agent)}"
            shown.add(short)
        parts.append(block)
    return "\n\n".join(parts), shown


def current_state(ctx: Context, agent: Agent, *, already_shown: bool) -> str:
    room = ctx.room(agent.location) or ctx.room("lobby")
    assert room is not None
    output = ("(Shown above under Room Output History.)" if already_shown else room_view(ctx, room, agent))
    return "\n\n".join([
        "## Current State",
        f"**Current Location:** {room.name}",
        f"**Room Output:**\n{output}",
        "**Navigation & Help:**\n"
        f"- `/execute_action{{help {room.short}}}` shows this room's help again (any room: `help <room>`); "
        "`goto <room>` moves you.\n"
        "- Put each action on a line of its own. If actions misbehave, `help lobby` explains the syntax.",
    ])
