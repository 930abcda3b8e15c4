"""A worker's session as recorded, for people to read (the web viewer and its static export).

Nothing here writes. The session's inputs (docs/workers.md) are `<prefix>/turn/<n>` (a model call)
and `<prefix>/tool/<n>/<i>` (the result of call i of turn n), read by key range over the inputs'
key index. `coder/7/` must not take `coder/70/...`: the keys starting with `coder/7/` are exactly
those from `coder/7/` up to `coder/70` (the character after "/" is "0"); a key there that is not a
turn or a tool result is passed over. Turns come in the numeric order of n and calls in that of i
(turn/10 after turn/9), one page at a time: a first range query reads the session's keys and the
turns' token counts, a second the payloads of the page's turns only, and every text shown is cut
to `shown_chars`, saying how much was left out.

A command back-end's session (an installed CLI: station/workers/command.py) records no turns: its
starts `<prefix>/spawn/<s>` and the model calls its relay forwarded `<prefix>/call/<k>` (request
and reply as the provider's wire text, cut) are read by recorded_command the same way, a page of
calls at a time in the numeric order of k.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

TURNS_PER_PAGE = 20
SHOWN_CHARS = 30_000  # of one reply, thinking, argument or result shown
CALLS_SHOWN = 50  # tool calls of one turn shown; a reply asking for more is said to
KEY = re.compile(r"(turn|tool)/([1-9]\d{0,17})(?:/(0|[1-9]\d{0,17}))?")  # what follows "<prefix>/"
NUMBER = re.compile(r"[1-9]\d{0,17}")  # a number in a key (after "call/", "spawn/", "attempt/"): no leading zero


@dataclass(frozen=True)
class Shown:
    """A text as shown: at most `shown_chars` of it, and how many characters were left out."""

    text: str
    more: int = 0


@dataclass(frozen=True)
class CallView:
    index: int
    name: str
    arguments: list[tuple[str, Shown]]  # each argument's value as text (JSON for what is not a string)
    recorded: bool  # its result is a recorded input (False: the station answered from the call alone)
    result: Shown  # what the model read back ("" when nothing was recorded)
    error: bool
    final: bool  # the result that ended the session


@dataclass(frozen=True)
class TurnView:
    number: int
    tick: int  # the tick the model's reply was recorded at
    model: str | None
    text: Shown
    thinking: Shown | None
    failure: str | None  # a provider failure recorded instead of a reply
    calls: list[CallView]
    calls_left_out: int  # calls of the reply beyond CALLS_SHOWN
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


@dataclass(frozen=True)
class SessionPage:
    """One page of a recorded session, with the whole session's usage."""

    prefix: str
    page: int
    pages: int
    input_tokens: int  # the whole session's
    output_tokens: int
    cost_usd: float

    @property
    def last_page(self) -> bool:
        return self.page == self.pages


@dataclass(frozen=True)
class RecordedSession(SessionPage):
    turns: list[TurnView]  # the page's, in order
    total_turns: int  # model calls recorded in the whole session


def shown(text: Any, limit: int = SHOWN_CHARS) -> Shown:
    text = "" if text is None else str(text)
    return Shown(text[:limit], max(0, len(text) - limit))


def has_session(source: Any, prefix: str) -> bool:
    """Whether anything is recorded under the prefix (one probe of the key index)."""
    row = (
        _db(source)
        .execute("SELECT key FROM inputs WHERE key >= ? AND key < ? ORDER BY key LIMIT 1", (f"{prefix}/", f"{prefix}0"))
        .fetchone()
    )
    return row is not None


def recorded_session(
    source: Any, prefix: str, *, page: int = 1, per_page: int = TURNS_PER_PAGE, shown_chars: int = SHOWN_CHARS
) -> RecordedSession:
    """One page of the session recorded under `prefix` (a Store or an sqlite3 connection); the
    page is clamped to those that exist (a session with no turn has one, empty)."""
    # "turn/" and "tool/" have the same length: the text from `start` is "<n>" or "<n>/<i>", whose
    # leading integer is the turn's number, so SQLite hands out only the page's payloads.
    start = len(prefix) + len("/turn/") + 1
    numbers, tools, tokens = _index(source, prefix, start)
    pages = max(1, -(-len(numbers) // per_page))
    page = min(max(1, page), pages)
    on_page = numbers[(page - 1) * per_page : page * per_page]
    payloads: dict[str, tuple[int, str]] = {}
    if on_page:
        rows = _db(source).execute(
            "SELECT key, tick, payload FROM inputs WHERE key >= ? AND key < ? "
            "AND CAST(substr(key, ?) AS INTEGER) BETWEEN ? AND ?",
            (f"{prefix}/", f"{prefix}0", start, on_page[0], on_page[-1]),
        )
        payloads = {key: (tick, payload) for key, tick, payload in rows}
    turns = [_turn(prefix, n, payloads, tools.get(n, {}), shown_chars) for n in on_page]
    return RecordedSession(
        prefix=prefix,
        page=page,
        pages=pages,
        input_tokens=sum(t[0] for t in tokens),
        output_tokens=sum(t[1] for t in tokens),
        cost_usd=sum(t[2] for t in tokens),
        turns=turns,
        total_turns=len(numbers),
    )


def _db(source: Any) -> sqlite3.Connection:
    db: sqlite3.Connection = getattr(source, "db", source)  # a Store holds its connection as .db
    return db


def _index(source: Any, prefix: str, start: int) -> tuple[list[int], dict[int, dict[int, str]], list[tuple]]:
    """(the turn numbers recorded, in order; each turn's tool results' keys by call index; each
    turn's input tokens, output tokens and cost), from the keys and the turns' usage alone."""
    rows = _db(source).execute(
        "SELECT key, CASE WHEN substr(key, ?, 5) = 'turn/' THEN json_extract(payload, '$.usage.input_tokens') END, "
        "CASE WHEN substr(key, ?, 5) = 'turn/' THEN json_extract(payload, '$.usage.output_tokens') END, "
        "CASE WHEN substr(key, ?, 5) = 'turn/' THEN json_extract(payload, '$.cost_usd') END "
        "FROM inputs WHERE key >= ? AND key < ?",
        (start - 5, start - 5, start - 5, f"{prefix}/", f"{prefix}0"),
    )
    numbers: list[int] = []
    tools: dict[int, dict[int, str]] = {}
    tokens: list[tuple] = []
    for key, tokens_in, tokens_out, cost in rows:
        found = KEY.fullmatch(key[len(prefix) + 1 :])
        if found is None:
            continue
        kind, turn, index = found.group(1), int(found.group(2)), found.group(3)
        if kind == "turn":
            numbers.append(turn)
            tokens.append((_number(tokens_in), _number(tokens_out), _number(cost)))
        elif index is not None:
            tools.setdefault(turn, {})[int(index)] = key
    return sorted(numbers), tools, tokens


def _number(value: Any) -> Any:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _load(found: tuple[int, str] | None) -> tuple[int, dict[str, Any]]:
    if found is None:
        return 0, {}
    payload = json.loads(found[1])
    return found[0], payload if isinstance(payload, dict) else {}


def _turn(
    prefix: str, number: int, payloads: dict[str, tuple[int, str]], tool_keys: dict[int, str], limit: int
) -> TurnView:
    tick, reply = _load(payloads.get(f"{prefix}/turn/{number}"))
    usage: dict[str, Any] = reply["usage"] if isinstance(reply.get("usage"), dict) else {}
    asked: list[Any] = reply["tool_calls"] if isinstance(reply.get("tool_calls"), list) else []
    calls = []
    for index, call in enumerate(asked[:CALLS_SHOWN]):
        key = tool_keys.get(index)
        _, result = _load(payloads.get(key) if key else None)
        calls.append(_call(index, call, key is not None, result, limit))
    return TurnView(
        number,
        tick,
        reply.get("model") if isinstance(reply.get("model"), str) else None,
        shown(reply.get("text"), limit),
        shown(reply["thinking"], limit) if reply.get("thinking") else None,
        str(reply["error"]) if reply.get("error") else None,
        calls,
        max(0, len(asked) - CALLS_SHOWN),
        _number(usage.get("input_tokens")),
        _number(usage.get("output_tokens")),
        reply.get("cost_usd") if isinstance(reply.get("cost_usd"), int | float) else None,
    )


def _call(index: int, call: Any, recorded: bool, result: dict[str, Any], limit: int) -> CallView:
    call = call if isinstance(call, dict) else {}
    arguments = call.get("arguments")
    if isinstance(arguments, dict):
        shown_arguments = [
            (str(name), shown(value if isinstance(value, str) else json.dumps(value), limit))
            for name, value in arguments.items()
        ]
    else:
        shown_arguments = [("(unreadable)", shown(call.get("error") or json.dumps(arguments), limit))]
    return CallView(
        index,
        str(call.get("name") or ""),
        shown_arguments,
        recorded,
        shown(result.get("text"), limit),
        bool(result.get("error")),
        bool(result.get("final")),
    )


# -- a command back-end's session: its starts and relayed model calls --------------------------------
@dataclass(frozen=True)
class RelayedCall:
    """One model call of a command-line coder, as the station's relay forwarded and recorded it."""

    number: int
    tick: int
    path: str
    status: int | None  # the provider's HTTP status
    model: str | None
    request: Shown  # the request's wire text, as recorded (cut by the relay, then to shown_chars)
    response: Shown  # the reply's wire text (JSON or a stream of events), as recorded
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


@dataclass(frozen=True)
class RecordedCommand(SessionPage):
    starts: list[tuple[int, int]]  # (number, tick) of each start of the CLI, in order
    calls: list[RelayedCall]  # the page's, in order
    total_calls: int


def recorded_command(
    source: Any, prefix: str, *, page: int = 1, per_page: int = TURNS_PER_PAGE, shown_chars: int = SHOWN_CHARS
) -> RecordedCommand:
    """One page of the command session recorded under `prefix`: its starts, and the page's model
    calls (clamped to the pages that exist; a session with no call has one, empty). Two key-range
    queries read the starts and the calls' usage, a third the payloads of the page's calls only."""
    db = _db(source)
    spawned = len(prefix) + len("/spawn/")
    starts = sorted(
        (int(key[spawned:]), tick)
        for key, tick in db.execute(
            "SELECT key, tick FROM inputs WHERE key >= ? AND key < ?", (f"{prefix}/spawn/", f"{prefix}/spawn0")
        )
        if NUMBER.fullmatch(key[spawned:])
    )
    called = len(prefix) + len("/call/")  # where a call's number begins in its key
    index = sorted(
        (int(key[called:]), _number(tokens_in), _number(tokens_out), _number(cost))
        for key, tokens_in, tokens_out, cost in db.execute(
            "SELECT key, json_extract(payload, '$.usage.input_tokens'), json_extract(payload, '$.usage.output_tokens'), "
            "json_extract(payload, '$.cost_usd') FROM inputs WHERE key >= ? AND key < ?",
            (f"{prefix}/call/", f"{prefix}/call0"),
        )
        if NUMBER.fullmatch(key[called:])
    )
    pages = max(1, -(-len(index) // per_page))
    page = min(max(1, page), pages)
    on_page = [n for n, *_ in index[(page - 1) * per_page : page * per_page]]
    calls = []
    if on_page:
        rows = db.execute(
            "SELECT key, tick, payload FROM inputs WHERE key >= ? AND key < ? "
            "AND CAST(substr(key, ?) AS INTEGER) BETWEEN ? AND ?",
            (f"{prefix}/call/", f"{prefix}/call0", called + 1, on_page[0], on_page[-1]),  # substr counts from 1
        )
        found = {key: (tick, payload) for key, tick, payload in rows}
        for n in on_page:
            tick, payload = found[f"{prefix}/call/{n}"]
            calls.append(_relayed(n, tick, json.loads(payload), shown_chars))
    return RecordedCommand(
        prefix=prefix,
        page=page,
        pages=pages,
        input_tokens=sum(t[1] for t in index),
        output_tokens=sum(t[2] for t in index),
        cost_usd=sum(t[3] for t in index),
        starts=starts,
        calls=calls,
        total_calls=len(index),
    )


def _relayed(number: int, tick: int, call: Any, limit: int) -> RelayedCall:
    call = call if isinstance(call, dict) else {}
    usage: dict[str, Any] = call["usage"] if isinstance(call.get("usage"), dict) else {}
    status = call.get("status")
    return RelayedCall(
        number,
        tick,
        str(call.get("path") or ""),
        status if isinstance(status, int) and not isinstance(status, bool) else None,
        call.get("model") if isinstance(call.get("model"), str) else None,
        shown(call.get("request"), limit),
        shown(call.get("response"), limit),
        _number(usage.get("input_tokens")),
        _number(usage.get("output_tokens")),
        call.get("cost_usd") if isinstance(call.get("cost_usd"), int | float) else None,
    )
