"""Operator commands: queued by another process (CLI, later the web console), applied by the
engine between units and recorded as inputs, so a replay applies them at the same point.

Commands (JSON objects):
  {"op": "message", "to": "<agent>|*", "text": ...}   a system message from the operator
  {"op": "answer", "request": <id>, "text": ...}       answer an External Counter request
  {"op": "end_agent", "agent": ...}                    end a session at its next turn
  {"op": "pause"}                                      stop the running station cleanly
  {"op": "set", "key": "budget.station_usd", "value": 5} change a safe config value
  {"op": "spawn", "agent": {<an agents: entry>}}        add one agent (it acts from the next turn)
"""
from __future__ import annotations

import json
import time
from typing import Any, Iterator

from pydantic import ValidationError

from .agents import ACTIVE
from .config import AgentSpec, ConfigError, StationConfig, parse_config
from .context import Context
from .store import Store, dumps

OPS = ("message", "answer", "end_agent", "pause", "set", "spawn")
# Config values an operator may change on a live station: none of them reshapes the world.
SAFE_KEYS = ("budget.", "prices.", "turns", "notifications.", "operator.")


class CommandError(ValueError):
    pass


def validate(command: dict[str, Any]) -> dict[str, Any]:
    op = command.get("op")
    if op not in OPS:
        raise CommandError(f"unknown operator command {op!r}; known: {', '.join(OPS)}")
    required = {"message": ("to", "text"), "answer": ("request", "text"), "end_agent": ("agent",), "pause": (),
                "set": ("key",), "spawn": ("agent",)}[op]
    missing = [k for k in required if command.get(k) in (None, "")]
    if missing:
        raise CommandError(f"operator command '{op}' needs: {', '.join(missing)}")
    if op == "set" and not any(command["key"] == k or command["key"].startswith(k) for k in SAFE_KEYS):
        raise CommandError(f"'{command['key']}' cannot be changed on a station; changeable: "
                           + ", ".join(k + "*" if k.endswith(".") else k for k in SAFE_KEYS))
    if op == "spawn":
        try:
            AgentSpec.model_validate({**command["agent"], "count": 1})
        except (ValidationError, TypeError) as err:
            raise CommandError(f"spawn: {_first_error(err)}") from None
    return command


def _first_error(err: Exception) -> str:
    if isinstance(err, ValidationError):
        e = err.errors()[0]
        return f"{'.'.join(str(p) for p in e['loc']) or 'agent'}: {e['msg']}"
    return str(err)


def set_command(store: Store, key: str, text: str) -> dict[str, Any]:
    """A checked `set` command from a key and a YAML value as typed: a bad key or value is refused
    now, against the station's stored config, not later inside the run."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise CommandError(f"cannot read the value {text!r}: {err}") from None
    command = validate({"op": "set", "key": key, "value": value})
    with_value(parse_config(store.get_meta("config"), f"{store.dir}/station.db"), key, value)
    return command


def with_value(config: StationConfig, key: str, value: Any) -> StationConfig:
    """The config with one dotted key set (null removes a mapping entry); checked like a config file."""
    data = config.model_dump(mode="json")
    *path, last = key.split(".")
    node = data
    for part in path:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    if value is None and isinstance(node, dict) and path and path[0] == "prices":
        node.pop(last, None)
    else:
        node[last] = value
    try:
        return parse_config(data, f"set {key}")
    except ConfigError as err:
        raise CommandError(str(err)) from None


def check_target(store: Store, command: dict[str, Any]) -> None:
    """Refuse now a message, end_agent or answer for an agent or request the station does not have:
    once queued, it would only be dropped with an alert when the station applies it."""
    op = command["op"]
    if op == "end_agent" or op == "message" and command["to"] != "*":
        name = command["agent"] if op == "end_agent" else command["to"]
        row = store.one("SELECT state FROM agents WHERE name=?", (name,))
        if row is None or row["state"] != ACTIVE:
            gone = f" ({name} has {row['state']})" if row is not None else ""
            raise CommandError(f"no active agent named {name!r}{gone}; see `station agents DIR`")
    elif op == "answer":
        number = int(command["request"])
        if not store.one("SELECT 1 FROM sqlite_master WHERE type='table' AND name='human_requests'"):
            raise CommandError("this station has no External Counter, so no requests to answer")
        row = store.one("SELECT resolved_tick FROM human_requests WHERE id=?", (number,))
        if row is None:
            waiting = [f"#{r[0]}" for r in store.all("SELECT id FROM human_requests WHERE resolved_tick IS NULL")]
            raise CommandError(f"no request #{number} ({'open: ' + ', '.join(waiting) if waiting else 'none is open'})")
        if row["resolved_tick"] is not None:
            raise CommandError(f"request #{number} was already answered at tick {row['resolved_tick']}")


def queue(store: Store, command: dict[str, Any]) -> int:
    """Queue a command for the engine (works whether or not the station is running)."""
    validate(command)
    with store.transaction():
        cur = store.execute("INSERT INTO operator_queue(command, queued_at) VALUES(?, ?)",
                            (dumps(command), time.time()))
    return int(cur.lastrowid)


def recorded_by_point(source: Store) -> dict[int, list[tuple[str, dict]]]:
    """A source station's operator inputs, grouped by the point (units done) they were applied at."""
    out: dict[int, list[tuple[str, dict]]] = {}
    for row in source.all("SELECT key, payload FROM inputs WHERE kind='operator' ORDER BY seq"):
        payload = json.loads(row["payload"])
        out.setdefault(payload["point"], []).append((row["key"], payload))
    return out


def due_commands(store: Store, replayed: dict[int, list[tuple[str, dict]]] | None,
                 point: int) -> Iterator[tuple[str, dict]]:
    """Commands to apply now: queued ones live, or in a replay the source's ones recorded at this point."""
    if replayed is not None:
        for key, payload in replayed.get(point, []):
            if store.get_input(key) is None:
                store.record_input(key, "operator", payload["tick"], None, payload)
                yield key, payload["command"]
        return
    for row in store.all("SELECT id, command FROM operator_queue WHERE applied_input IS NULL ORDER BY id"):
        yield f"op/{row['id']}", json.loads(row["command"])


def record(store: Store, key: str, command: dict[str, Any], point: int, tick: int) -> None:
    store.put_input(key, "operator", tick, None, {"command": command, "point": point, "tick": tick})
    store.execute("UPDATE operator_queue SET applied_input=? WHERE id=?", (key, int(key.split("/")[1])))


def apply(ctx: Context, command: dict[str, Any]) -> bool:
    """Apply one command to the world; True if it asks the run to pause."""
    op = command["op"]
    if op == "pause":
        ctx.emit("operator_pause")
        return True
    if op == "message":
        header = ctx.texts.render("operator_message_header")
        targets = ctx.agents.active() if command["to"] == "*" else [ctx.agents.get(command["to"])]
        for agent in targets:
            if agent is None or not agent.active:
                ctx.emit("operator_alert", command["to"], problem="message to an agent who is not active")
                continue
            ctx.notify(agent, f"{header}\n{command['text']}", "operator")
    elif op == "answer":
        from rooms.external import answer_request  # the counter's own rule for closing a request
        try:
            answer_request(ctx, int(command["request"]), command["text"])
        except ValueError as err:
            ctx.emit("operator_alert", None, problem=str(err))
    elif op == "set":
        try:
            ctx.config = with_value(ctx.config, command["key"], command.get("value"))
        except CommandError as err:
            ctx.emit("operator_alert", None, problem=str(err))
        else:
            ctx.store.set_meta("config", ctx.config.model_dump(mode="json"))
    elif op == "spawn":
        from .lifecycle import create_agent

        spec = AgentSpec.model_validate({**command["agent"], "count": 1})
        create_agent(ctx, spec)  # announced by its agent_spawned event
    elif op == "end_agent":
        agent = ctx.agents.get(command["agent"])
        if agent is None or not agent.active:
            ctx.emit("operator_alert", command["agent"], problem="end_agent: no such active agent")
        else:
            agent.flags["end_requested"] = True
            ctx.agents.save(agent)
    ctx.emit("operator_command", None, command=command)
    return False
