"""Builds an agent's turn prompt from its ordered sections (spec engine §4.2).

System Information, System Messages, Actions Detected (last turn), Room Output History (the
actions executed last turn and fresh output of each room visited), Current State.
Composing has side effects (warnings queued, first-visit help marked, messages delivered),
all inside the turn's transaction.

`prompt.style: compact` (for small or local models) keeps the sections and their markers but
leaves out what is empty or repeated every turn (no messages, no history, the navigation
lines, a healthy status, the default guest description); the standing rules (action syntax
with an example, the rooms, token advice) go once into a short system prompt instead, sent
the provider's own way so that it can be cached. The full style sends no system prompt but
the agent's own, as the paper did.
"""

from __future__ import annotations

import traceback
from typing import Any

from station.core.agents import GUEST_DESCRIPTION, Agent
from station.core.compaction import compact_if_near_window
from station.core.context import Context, NeedInput, ReplayDiverged, StationPaused, WaitInterrupted
from station.core.events import OperatorAlert
from station.core.lifecycle import effective_limit, queue_warnings
from station.core.safe_text import valid
from station.core.texts import token_amount, token_reserve

RULE = "\n\n---\n\n"
ENGINE_SIGNALS = (NeedInput, ReplayDiverged, StationPaused, WaitInterrupted)  # the engine's, never a room's error


def compact(ctx: Context) -> bool:
    return ctx.config.prompt.style == "compact"


def compose(ctx: Context, agent: Agent) -> str:
    compact_if_near_window(ctx, agent, lambda: system_prompt(ctx, agent))
    queue_warnings(ctx, agent)
    notices = [n for room in ctx.rooms.values() for n in room.system_notices(ctx, agent)]
    pending = ctx.pending_messages(agent)
    ctx.mark_delivered([mid for mid, _ in pending])
    messages = notices + [text for _, text in pending]
    sections = [system_information(ctx, agent)]
    if messages or not compact(ctx):
        sections.append(system_messages(messages))
    if agent.last_summary:
        sections.append("## Actions Detected (Last Turn)\n" + "\n".join(agent.last_summary))
    history, shown = room_history(ctx, agent)
    if agent.last_history or not compact(ctx):
        sections.append(history)
    sections.append(current_state(ctx, agent, already_shown=agent.location in shown))
    return valid(RULE.join(sections))  # file names and room outputs may hold bytes no provider accepts


def system_prompt(ctx: Context, agent: Agent) -> str | None:
    """What is sent as the provider's system prompt: the agent's own (full style), after the
    station's standing rules in the compact style. The same for every agent of a model, so a
    provider's prefix cache serves it to all of them."""
    if not compact(ctx):
        return agent.system_prompt
    return "\n\n".join(p for p in (standing_rules(ctx, agent), agent.system_prompt) if p)


def standing_rules(ctx: Context, agent: Agent) -> str:
    """The compact style's system prompt (codex text `compact_system`)."""
    life = ctx.config.lifecycle
    rooms = [room for room in ctx.rooms.values() if room.listed or room.short == "lobby"]
    listed = ", ".join(room.short for room in rooms)  # the Lobby lists their full names
    gated = [room.short for room in rooms if room.maturity_gated]
    lines = [  # sentences that follow the token advice
        ctx.texts.render("compact_life_line", max_age=life.max_age) if life.max_age else "",
        ctx.texts.render("compact_isolation_line", isolation_ticks=life.maturity_ticks, rooms=", ".join(gated))
        if life.maturity_ticks and gated
        else "",
    ]
    return ctx.texts.render(
        "compact_system",
        rooms=listed,
        example_room="codex" if "codex" in ctx.rooms else "lobby",
        reserve=token_amount(token_reserve(effective_limit(ctx, agent))),
        life="".join(f" {line}" for line in lines if line),
    )


def room_view(ctx: Context, room: Any, agent: Agent) -> str:
    """A room's view, under the same protection as its actions: an error is undone and reported,
    and the turn goes on (a view reads files and tables that agents' code and replies shaped)."""
    # The viewer's record and any first read by the view are put back if it fails. (Not every
    # record the unit holds: a tick's prompts are built in one unit, and copying them all for
    # each view would cost the population's square.)
    saved = ctx.agents.checkpoint(only=[agent.name])
    try:
        with ctx.store.savepoint("view"):
            view: str = room.output(ctx, agent)
            return view
    except ENGINE_SIGNALS:
        raise
    except Exception as err:  # noqa: BLE001 - a room's bug or a hostile file must not stop the station
        ctx.agents.restore(saved)  # the records as the savepoint left their rows
        ctx.emit(
            OperatorAlert(f"the view of {room.short} raised {err!r}", traceback=traceback.format_exc(limit=8)),
            agent.name,
        )
        return (
            f"(The {room.name} could not be shown this turn: {type(err).__name__}. The operator was alerted; "
            "your actions here still work.)"
        )


def system_information(ctx: Context, agent: Agent) -> str:
    lines = [
        "## System Information",
        f"- Station Tick: {ctx.tick}",
        f"- Station Status: {ctx.store.get_meta('station_status', 'Healthy')}",
        f"- Agent Name: {agent.name}",
        f"- Agent Description: {agent.description}",
        f"- Agent Status: {'Guest Agent' if agent.is_guest else 'Recursive Agent'}",
    ]
    if compact(ctx):  # nothing said that the agent knows without being told
        lines = [
            line
            for line in lines
            if not (line == "- Station Status: Healthy" or line == f"- Agent Description: {GUEST_DESCRIPTION}")
        ]
    if agent.meta_prompt:
        lines.append(f"- Agent Meta Prompt:\n```\n{agent.meta_prompt}\n```")
    limit = effective_limit(ctx, agent)
    guest_ceiling = ctx.config.tokens.guest_ceiling
    ceiling = (
        " (guest ceiling; ascend to raise it)" if agent.is_guest and limit == guest_ceiling < agent.token_budget else ""
    )  # not when the model's context window is what limits it
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
    lines += [line for room in ctx.rooms.values() for line in room.status_lines(ctx, agent)]
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
    output = "(Shown above under Room Output History.)" if already_shown else room_view(ctx, room, agent)
    parts = ["## Current State", f"**Current Location:** {room.name}", f"**Room Output:**\n{output}"]
    if compact(ctx):  # the system prompt says how to move and get help
        return "\n\n".join(parts)
    return "\n\n".join(
        [
            *parts,
            "**Navigation & Help:**\n"
            f"- `/execute_action{{help {room.short}}}` shows this room's help again (any room: `help <room>`); "
            "`goto <room>` moves you.\n"
            "- Put each action on a line of its own. If actions misbehave, `help lobby` explains the syntax.",
        ]
    )
