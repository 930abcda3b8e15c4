"""A worker's session as a path through recorded inputs: model calls with tools, and the tools' results.

Like an evaluation's walk (rooms/research/pipeline.py), the session is a pure function of what is
recorded under its prefix, so one walk serves the background worker (which produces each missing
input: a model call, a tool run), the readiness check (which stops at the first missing one) and a
replay (which finds them all and calls no model and runs no sandbox). Keys:

    <prefix>/turn/<n>             model call n (kind "worker_turn"): Reply.to_payload() + "model",
                                  or {"error": ...} for a transient provider failure
    <prefix>/tool/<n>/<i>         the result of call i of turn n (kind "worker_tool", the toolbox's own)

The session ends when a tool result says "final", after `max_turns` model calls, or after
`max_model_errors` failed calls in a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from station.core.model_api import INTERRUPTED, PERMANENT, Message, ModelError, Tool
from station.workers.texts import worker_text

# fetch(key, kind, make) -> the payload recorded under `key`; else, when the caller may produce
# inputs, make()'s payload (which the caller records); else None (the input is missing).
Fetch = Callable[[str, str, Callable[[], dict[str, Any]]], "dict[str, Any] | None"]
# (messages, system, tools) -> the payload to record for one model call (see model_call)
ModelCall = Callable[[list[Message], str, list[Tool]], dict[str, Any]]
REPLY_CHARS = 200_000  # a reply's text and thinking are kept to this many characters each
FINISHED, TURN_LIMIT, MODEL_FAILED = "finished", "turn_limit", "model_failed"


class Toolbox(Protocol):
    def tools(self) -> list[Tool]: ...

    def handle(self, turn: int, index: int, call: dict[str, Any], fetch: Fetch) -> dict[str, Any] | None:
        """The result payload of one tool call, obtained through `fetch` under the toolbox's own keys
        (so every result is a recorded input), or None when an input is missing. The payload has at
        least "text" (what the model reads back) and "error": bool; "final": True ends the session.
        It is called only with calls that name one of `tools()` and whose arguments are an object."""
        ...


@dataclass
class Turn:
    number: int
    reply: dict[str, Any]  # the recorded model payload: text, thinking, tool_calls, usage, cost_usd, model, error
    results: list[dict[str, Any]] = field(default_factory=list)  # one payload per tool call answered, in order


@dataclass
class Session:
    turns: list[Turn]
    end: str  # FINISHED | TURN_LIMIT | MODEL_FAILED
    final: dict[str, Any] | None  # the result payload that ended it ("final": True)


def walk_session(
    prefix: str,
    fetch: Fetch,
    *,
    system: str,
    opening: str,
    toolbox: Toolbox,
    call: ModelCall | None,
    max_turns: int,
    max_model_errors: int = 3,
) -> Session | None:
    """The session as recorded so far, or None as soon as an input is missing. `call` is None in a
    walk that may not produce inputs (`fetch` then never calls make)."""
    tools = toolbox.tools()
    messages: list[Message] = [{"role": "user", "text": opening}]
    turns: list[Turn] = []
    errors_in_row = 0
    for number in range(1, max_turns + 1):
        asked = list(messages)

        def ask(asked: list[Message] = asked) -> dict[str, Any]:
            if call is None:
                raise RuntimeError("this walk may not produce inputs")
            return call(asked, system, tools)

        reply = fetch(f"{prefix}/turn/{number}", "worker_turn", ask)
        if reply is None:
            return None
        turn = Turn(number, reply)
        turns.append(turn)
        if reply.get("error"):  # a failed call adds nothing: the next one asks the same again
            errors_in_row += 1
            if errors_in_row >= max_model_errors:
                return Session(turns, MODEL_FAILED, None)
            continue
        errors_in_row = 0
        calls = list(reply.get("tool_calls") or [])
        if not calls:
            messages += [{"role": "assistant", "text": reply.get("text") or ""}, _reminder()]
            continue
        messages.append({"role": "assistant", "text": reply.get("text") or "", "tool_calls": calls})
        for index, tool_call in enumerate(calls):
            result = _answer(number, index, tool_call, tools, toolbox, fetch)
            if result is None:
                return None
            turn.results.append(result)
            if result.get("final"):
                return Session(turns, FINISHED, result)
        messages.append({"role": "tool", "results": [_told(c, r) for c, r in zip(calls, turn.results)]})
    return Session(turns, TURN_LIMIT, None)


def _answer(
    number: int, index: int, call: Any, tools: list[Tool], toolbox: Toolbox, fetch: Fetch
) -> dict[str, Any] | None:
    """The toolbox's result for a well-formed call of a known tool; an error result otherwise (no input)."""
    names = [tool.name for tool in tools]
    if not isinstance(call, dict) or not isinstance(call.get("arguments"), dict):
        return {"text": "Your tool call could not be read: its arguments must be a JSON object.", "error": True}
    if call.get("error"):
        return {"text": f"Your tool call could not be read: {call['error']}", "error": True}
    if call.get("name") not in names:
        return {"text": f"There is no tool {call.get('name')!r}; the tools are: {', '.join(names)}.", "error": True}
    return toolbox.handle(number, index, call, fetch)


def _told(call: Any, result: dict[str, Any]) -> dict[str, Any]:
    call = call if isinstance(call, dict) else {}
    return {"id": str(call.get("id") or ""), "name": str(call.get("name") or ""), "text": str(result.get("text", ""))}


def _reminder() -> Message:
    return {"role": "user", "text": worker_text("worker_reminder")}


def model_call(get_model: Callable[[], Any], role: str) -> ModelCall:
    """Calls the model with tools as `agent=role` ("coder", "surveyor"): its spend is booked under the
    role and the station's caps apply (BudgetExceeded propagates, unrecorded). A transient provider
    failure becomes a recorded {"error": ...} payload; a permanent one (a bad key) or a stop propagates
    unrecorded, so retrying later costs the session nothing. The model is looked up only when a call
    is really made: a replay never needs the provider or its key."""

    def call(messages: list[Message], system: str, tools: list[Tool]) -> dict[str, Any]:
        name = None
        try:
            model = get_model()
            name = getattr(model, "name", None)
            reply = model.complete(messages, system=system, agent=role, tools=tools)
        except ModelError as err:
            if err.kind in (PERMANENT, INTERRUPTED):
                raise
            return {"text": None, "error": str(err) or type(err).__name__, "model": name}
        if reply.overflow:
            return {"text": None, "error": f"the conversation no longer fits: {reply.overflow}", "model": name}
        return {**reply.within(REPLY_CHARS).to_payload(), "model": name}

    return call
