"""Executes one reply: parse it, run each action in the room the agent stands in, log results.

Every problem becomes a clear line in the agent's next prompt; an action that crashes is
undone alone (savepoint) and reported, so bad input never damages the world.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from station.core.actions import ParsedAction, parse_actions
from station.core.agents import Agent
from station.core.context import Context
from station.core.events import OperatorAlert
from station.core.room import InternalAction, Outcome, validate_params

GLOBAL_ACTIONS = ("goto", "go", "help", "meta", "exit")
HELP_TOPICS = ("capsule",)  # help texts that belong to no single room
YAML_TIPS = (
    "Tips: put the ```yaml block on the line right after the action, close it with ```, "
    "and indent the lines of a `|` block by two spaces."
)


@dataclass
class TurnLog:
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    internal: InternalAction | None = None
    internal_room: str | None = None

    def log(self, room: str, line: str) -> None:
        for entry in self.history:
            if entry["room"] == room:
                entry["lines"].append(line)
                return
        self.history.append({"room": room, "lines": [line]})


def cut_notice(tokens: int | None) -> str:
    """What an agent is told when the model stopped its reply at max_output_tokens."""
    after = f"after {tokens:,} tokens " if tokens else ""
    return (
        f"Your last reply was cut off {after}(the model's max_output_tokens limit); anything after the cut, "
        "actions included, was not received. Keep replies shorter."
    )


def execute_reply(
    ctx: Context, agent: Agent, text: str, cut_from: int | None = None, cut_tokens: int | None = None
) -> TurnLog:
    """`cut_from`: the reply's length before it was cut to the engine's max_reply_chars on arrival;
    `cut_tokens`: the model stopped the reply at max_output_tokens, after this many tokens (0: unknown)."""
    log = TurnLog()
    if cut_tokens is not None:
        log.log(agent.location, cut_notice(cut_tokens))
    limit = ctx.config.engine.max_reply_chars
    if cut_from is not None or len(text) > limit:  # the latter: a reply recorded before replies were cut
        log.log(
            agent.location,
            f"Your reply was {cut_from or len(text):,} characters long; only the first {limit:,} were read and kept.",
        )
        text = text[:limit]
    parsed = parse_actions(text, max_actions=ctx.config.engine.max_actions_per_reply)
    if not text.strip():
        log.log(agent.location, "Your reply was empty, so no action was taken. You stayed where you were.")
        log.summary.append("No action was received last turn (the reply was empty).")
    elif not parsed:
        log.log(
            agent.location,
            "No action was found in your reply; you stayed where you were. "
            "An action is a line that starts with /execute_action{...}.",
        )
        log.summary.append("No action was received last turn.")
    for index, action in enumerate(parsed):
        if not agent.active:
            skipped = len(parsed) - index
            if skipped:
                log.actions.append({"name": action.name, "skipped": skipped})
            break
        where = agent.location
        run_action(ctx, agent, action, log)
        log.summary.append(_summary_line(len(log.summary) + 1, action, ctx.room_name(where)))
    return log


def run_action(ctx: Context, agent: Agent, action: ParsedAction, log: TurnLog) -> None:
    """Run one parsed action for `agent` and log what happened. Kept whole: the engine's one path
    from an action to its handler (global action, room, access, params, savepoint), read top to bottom."""
    here = agent.location
    record = {
        "name": action.name,
        "args": action.args,
        "params": action.to_json()["params"],
        "error": action.error,
        "room": here,
        "ok": False,
    }
    log.actions.append(record)
    if not action.name:
        log.log(here, f"Error: {action.error}")
        return
    if action.name in GLOBAL_ACTIONS and not (action.name == "exit" and here == "exit"):
        record["ok"] = _global(ctx, agent, action, log)
        return
    room = ctx.room(here)
    assert room is not None
    spec = room.actions.get(action.name)
    if spec is None or action.name in room.unoffered(ctx):
        elsewhere = [r.short for r in ctx.rooms.values() if action.name in offered(ctx, r)]
        hint = (
            f" It is an action of: {', '.join(elsewhere)}."
            if elsewhere
            else f" Actions here: {', '.join(offered(ctx, room)) or 'none'}; everywhere: goto, help, meta, exit."
        )
        log.log(here, f"Action '{action.name}' is not recognized in the {room.name}.{hint}")
        return
    refused = room.refusal(ctx, agent) or room.action_refusal(ctx, agent, spec)
    if refused:
        log.log(here, refused)
        return
    if spec.internal and log.internal is not None:
        log.log(
            here,
            f"'{action.name}' was not run: only one reading, test or other exchange can start per "
            "reply, and one already started. Use it in a later turn.",
        )
        return
    if spec.params is not None and action.error and action.params is None and action.yaml_text is not None:
        log.log(here, f"'{action.name}' was not run: its {action.error}. {YAML_TIPS}")
        return
    params, problem, notes = validate_params(spec, action.params)
    for note in notes:
        log.log(here, note)
    if problem:
        log.log(here, f"'{action.name}' was not run: {problem}")
        return
    saved = ctx.agents.checkpoint()
    try:
        with ctx.store.savepoint():
            outcome = spec.handler(room, ctx, agent, action.args, params)
    except Exception as err:  # noqa: BLE001 - a bug in a room must not take the station down
        ctx.agents.restore(saved)
        log.log(here, f"'{action.name}' failed inside the station and was undone; the operator was alerted.")
        ctx.emit(
            OperatorAlert(f"action {action.name} raised {err!r}", traceback=traceback.format_exc(limit=8)), agent.name
        )
        return
    outcome = outcome if isinstance(outcome, Outcome) else Outcome(list(outcome or []))
    for line in outcome.lines:
        log.log(room.short, line)
    if outcome.internal is not None:
        log.internal, log.internal_room = outcome.internal, room.short
    record["ok"] = True


def _global(ctx: Context, agent: Agent, action: ParsedAction, log: TurnLog) -> bool:
    here = agent.location
    name = action.name
    if name == "exit":
        name, target = "goto", "exit"
    else:
        target = (action.args or "").strip()
    if name in ("goto", "go"):
        return _goto(ctx, agent, target, log)
    if name == "help":
        topic = target.lower() or here
        room = ctx.room(topic) or _room_by_name(ctx, topic)
        if room is None and topic in HELP_TOPICS:
            ctx.notify(agent, f"Help on {topic}s:\n\n{ctx.texts.help(topic)}", "help")
            log.log(here, f"The help on {topic}s will appear in your System Messages next turn.")
            return True
        if room is None:
            log.log(
                here,
                f"No help for '{target}': unknown room. Rooms: {', '.join(ctx.rooms)}; "
                f"other topics: {', '.join(HELP_TOPICS)}.",
            )
            return False
        ctx.notify(agent, f"Help for {room.name}:\n\n{room.help(ctx, agent)}", "help")
        log.log(here, f"The help for the {room.name} will appear in your System Messages next turn.")
        return True
    # meta
    if action.params is None or "content" not in action.params:
        log.log(here, "'meta' needs a ```yaml block with `content:` (empty content clears the meta prompt).")
        return False
    content = action.params["content"]
    text = str(content if content is not None else "").strip()
    if len(text) > 2000:
        log.log(here, f"'meta' was not run: the meta prompt is {len(text)} characters; at most 2000 are allowed.")
        return False
    agent.meta_prompt = text or None
    log.log(here, "Your meta prompt was updated." if text else "Your meta prompt was cleared.")
    return True


def _goto(ctx: Context, agent: Agent, target: str, log: TurnLog) -> bool:
    here = agent.location
    if not target:
        log.log(here, "Usage: /execute_action{goto <room>}, e.g. goto codex.")
        return False
    room = ctx.room(target.lower()) or _room_by_name(ctx, target)
    if room is None:
        log.log(here, f"Room '{target}' not found. Rooms: {', '.join(ctx.rooms)}.")
        return False
    limit = ctx.config.lifecycle.maturity_ticks
    if room.maturity_gated and not ctx.is_mature(agent):
        log.log(
            here,
            f"The {room.name} opens to agents aged {limit} ticks or more (you are "
            f"{agent.age(ctx.tick)}). Keep working on your own ideas meanwhile; do not wait.",
        )
        return False
    if room.short == "exit" and agent.role == "supervisor":
        log.log(here, "Supervisors cannot enter the Exit.")
        return False
    agent.location = room.short
    log.log(room.short, f"You moved to the {room.name}." if room.short != here else f"You are in the {room.name}.")
    return True


def _room_by_name(ctx: Context, name: str) -> Any:
    wanted = name.strip().lower()
    return next((r for r in ctx.rooms.values() if r.name.lower() == wanted), None)


def _summary_line(number: int, action: ParsedAction, room_name: str) -> str:
    shown = f"{action.name} {action.args}" if action.args else (action.name or "(empty)")
    if action.params is not None:
        yaml_info = f" YAML with fields: {', '.join(action.params) or '(none)'}."
    elif action.error and action.yaml_text is not None:
        yaml_info = f" {action.error}. {YAML_TIPS}"
    else:
        yaml_info = ""
    return f"{number}. `{shown}` (in {room_name});{yaml_info}"


def offered(ctx: Context, room: Any) -> list[str]:
    """The room's actions this station offers, in their declared order."""
    left_out = room.unoffered(ctx)
    return [name for name in room.actions if name not in left_out]
