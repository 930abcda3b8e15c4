"""Operator commands: queued by another process (CLI, later the web console), applied by the
engine between units and recorded as inputs, so a replay applies them at the same point.

Commands (JSON objects):
  {"op": "message", "to": "<agent>|*", "text": ...}   a system message from the operator
  {"op": "answer", "request": <id>, "text": ...}       answer an External Counter request
  {"op": "end_agent", "agent": ...}                    end a session at its next turn
  {"op": "pause"}                                      stop the running station cleanly
  {"op": "set", "key": "budget.station_usd", "value": 5} change a safe config value, or a model
                                                       setting (agents.N.model.name, reviewer.model.api, ...)
  {"op": "spawn", "agent": {<an agents: entry>}}        add one agent (it acts from the next turn)
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from station.core.agents import ACTIVE
from station.core.config import SECTIONS, AgentSpec, ConfigError, ModelConfig, StationConfig, parse_config
from station.core.context import Context
from station.core.events import AgentsModelChanged, OperatorAlert, OperatorCommand, OperatorPause
from station.core.store import Store, dumps

if TYPE_CHECKING:
    from station.core.room import Room

OPS = ("message", "answer", "end_agent", "pause", "set", "spawn")
# Config values an operator may change on a live station: none of them reshapes the world.
# `rooms.enabled` only adds rooms: the world opens them at the tick the command is applied.
SAFE_KEYS = ("budget.", "prices.", "turns", "notifications.", "operator.", "rooms.enabled")
# A model's settings that can be corrected on a live station (a wrong model name, API or endpoint):
# under agents.N.model. (N: the index of the `agents:` entry) and SECTION.model. for each feature
# section with a model of its own (model_sections). Not the provider or api_key_env: those decide
# which key is sent, and where.
MODEL_FIELDS = ("base_url", "name", "api", "timeout_s", "max_retries", "options", "context_limit", "max_output_tokens")
_MODEL_KEY = re.compile(r"^(?P<owner>agents\.(?P<index>\d+)|[a-z_]+)\.model\.(?P<field>[^.]+)$")
# Where the config a station was created with is kept once a `set` changes it: what a replay starts from.
INITIAL_CONFIG = "initial_config"


def model_sections() -> list[str]:
    """The feature sections with a model of their own (reviewer, grading, ...): a `model` field."""
    return sorted(key for key in SECTIONS.names() if _is_model_field(SECTIONS.get(key).model_fields.get("model")))


def _is_model_field(field: FieldInfo | None) -> bool:
    return field is not None and field.annotation is ModelConfig


def model_key(key: str) -> re.Match[str] | None:
    """`key` parsed when it names a model's field (agents.N.model.F or SECTION.model.F), else None."""
    found = _MODEL_KEY.match(key)
    if found is None or found["index"] is not None or found["owner"] in model_sections():
        return found
    return None


def changeable() -> str:
    """The keys `station set` (and the operator page) accept, in words."""
    owners = ", ".join(f"{o}.model.FIELD" for o in ("agents.N", *model_sections()))
    return (
        ", ".join(k + "*" if k.endswith(".") else k for k in SAFE_KEYS)
        + f"; and a model's {', '.join(MODEL_FIELDS)} as {owners} (N: the index of the agents: entry, from 0)"
    )


class CommandError(ValueError):
    pass


def validate(command: dict[str, Any]) -> dict[str, Any]:
    op = command.get("op")
    if op not in OPS:
        raise CommandError(f"unknown operator command {op!r}; known: {', '.join(OPS)}")
    required = {
        "message": ("to", "text"),
        "answer": ("request", "text"),
        "end_agent": ("agent",),
        "pause": (),
        "set": ("key",),
        "spawn": ("agent",),
    }[op]
    missing = [k for k in required if command.get(k) in (None, "")]
    if missing:
        raise CommandError(f"operator command '{op}' needs: {', '.join(missing)}")
    if op == "set":
        key = command["key"]
        if not isinstance(key, str):
            raise CommandError("operator command 'set' needs a key: a dotted config path")
        model = model_key(key)
        if model is not None and model["field"] not in MODEL_FIELDS:
            raise CommandError(
                f"'{key}' cannot be changed on a station: a model's changeable settings are " + ", ".join(MODEL_FIELDS)
            )
        if model is None and not any(key == k or key.startswith(k) for k in SAFE_KEYS):
            raise CommandError(f"'{key}' cannot be changed on a station; changeable: {changeable()}")
    if op == "spawn":
        try:
            AgentSpec.model_validate({**command["agent"], "count": 1})
        except (ValidationError, TypeError) as err:
            raise CommandError(f"spawn: {_first_error(err)}") from None
    return command


def _first_error(err: Exception) -> str:
    if isinstance(err, ValidationError):
        e = err.errors()[0]
        got = f" (got {e['input']!r})" if isinstance(e.get("input"), (str, int, float)) else ""
        return f"{'.'.join(str(p) for p in e['loc']) or 'agent'}: {e['msg'].removeprefix('Value error, ')}{got}"
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
    with_value(parse_config(store.get_meta("config"), f"{store.dir}/station.db", stored=True), key, value)
    return command


def with_value(config: StationConfig, key: str, value: Any) -> StationConfig:
    """The config with one dotted key set (null removes a mapping entry); checked like a config file.
    A number in the path picks an entry of a list (agents.0.model.name); a refusal is one line."""
    data = config.model_dump(mode="json")
    *path, last = key.split(".")
    node: Any = data
    for at, part in enumerate(path):
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                where = ".".join(path[:at])
                have = f"{where}.0 to {where}.{len(node) - 1}" if node else "none"
                raise CommandError(f"{key}: the station's config has no {where}.{part} (it has {have})")
            node = node[int(part)]
            continue
        if not isinstance(node.get(part), (dict, list)):
            node[part] = {}
        node = node[part]
    if model_key(key):
        check_model_value(node, key, last, value)
    if isinstance(node, list):  # one entry of a list: rooms.enabled.3
        if not last.isdigit() or int(last) >= len(node):
            raise CommandError(f"{key}: the station's config has no entry {last} there (it has 0 to {len(node) - 1})")
        node[int(last)] = value
    elif value is None and isinstance(node, dict) and path and path[0] == "prices":
        node.pop(last, None)
    else:
        node[last] = value
    try:
        return parse_config(data, f"set {key}", stored=True)  # `set` changes no name: the rest is stored
    except ConfigError as err:
        raise CommandError(one_line(str(err), key)) from None


def check_model_value(model: dict[str, Any], key: str, field: str, value: Any) -> None:
    """Refuse a bad model setting in one line naming the key, as the config's own ModelConfig judges it."""
    try:
        ModelConfig.model_validate({**model, field: value})
    except ValidationError as err:
        e = err.errors()[0]
        message = str(e["msg"]).removeprefix("Value error, ")
        if e["loc"] and e["loc"][0] != field:  # another field of the model: say which
            message = f"{'.'.join(str(p) for p in e['loc'])}: {message}"
        elif e["loc"]:
            got = repr(value)
            message = f"{message} (got {got if len(got) <= 80 else got[:77] + '...'})"
        raise CommandError(f"{key}: {message}") from None


def one_line(text: str, key: str) -> str:
    """A config refusal ("invalid station config (set KEY):" and one line per problem) as one line."""
    lines = [line.strip() for line in text.splitlines()[1:] if line.strip()] or [text.strip()]
    detail = "; ".join(
        line.removeprefix("(top level): ").replace(": Value error, ", ": ").removeprefix("Value error, ")
        for line in lines
    )
    return detail if detail.startswith(f"{key}:") else f"{key}: {detail}"


def check_target(store: Store, command: dict[str, Any], rooms: Iterable[type[Room]] = ()) -> None:
    """Refuse now a message, end_agent or answer for an agent or request the station does not have:
    once queued, it would only be dropped with an alert when the station applies it. `rooms`: the
    station's rooms, which say whether a request is theirs and open."""
    op = command["op"]
    if op == "end_agent" or op == "message" and command["to"] != "*":
        name = command["agent"] if op == "end_agent" else command["to"]
        row = store.one("SELECT state FROM agents WHERE name=?", (name,))
        if row is None or row["state"] != ACTIVE:
            gone = f" ({name} has {row['state']})" if row is not None else ""
            raise CommandError(f"no active agent named {name!r}{gone}; see `station agents DIR`")
    elif op == "answer":
        number = int(command["request"])
        try:
            taken = any(room.check_operator_answer(store, number) for room in rooms)
        except ValueError as err:
            raise CommandError(str(err)) from None
        if not taken:
            raise CommandError(f"no room of this station has a request #{number} to answer")


def queue(store: Store, command: dict[str, Any]) -> int:
    """Queue a command for the engine (works whether or not the station is running)."""
    validate(command)
    with store.transaction():
        cur = store.execute(
            "INSERT INTO operator_queue(command, queued_at) VALUES(?, ?)", (dumps(command), time.time())
        )
    return int(cur.lastrowid)  # type: ignore[arg-type]  # an INSERT sets it


def recorded_by_point(source: Store) -> dict[int, list[tuple[str, dict[str, Any]]]]:
    """A source station's operator inputs, grouped by the point (units done) they were applied at."""
    out: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for row in source.all("SELECT key, payload FROM inputs WHERE kind='operator' ORDER BY seq"):
        payload = json.loads(row["payload"])
        out.setdefault(payload["point"], []).append((row["key"], payload))
    return out


def due_commands(
    store: Store, replayed: dict[int, list[tuple[str, dict[str, Any]]]] | None, point: int
) -> Iterator[tuple[str, dict[str, Any]]]:
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
    if command["op"] == "pause":
        ctx.emit(OperatorPause())
        return True
    _APPLY[command["op"]](ctx, command)
    ctx.emit(OperatorCommand(command))
    return False


def _message(ctx: Context, command: dict[str, Any]) -> None:
    header = ctx.texts.render("operator_message_header")
    targets = ctx.agents.active() if command["to"] == "*" else [ctx.agents.get(command["to"])]
    for agent in targets:
        if agent is None or not agent.active:
            ctx.emit(OperatorAlert("message to an agent who is not active"), command["to"])
            continue
        ctx.notify(agent, f"{header}\n{command['text']}", "operator")


def _answer(ctx: Context, command: dict[str, Any]) -> None:
    request = int(command["request"])
    try:
        if not any(room.answer_operator(ctx, request, command["text"]) for room in ctx.rooms.values()):
            raise ValueError(f"no room of this station takes answers (request #{request})")
    except ValueError as err:
        ctx.emit(OperatorAlert(str(err)))


def _set(ctx: Context, command: dict[str, Any]) -> None:
    before = ctx.config
    try:
        after = with_value(before, command["key"], command.get("value"))
        if command["key"].startswith("rooms."):  # the whole list or one entry of it (rooms.enabled.3)
            ctx.open_rooms(before, after)
    except ValueError as err:  # a CommandError, or a room set that is not only larger
        ctx.emit(OperatorAlert(str(err)))
        return
    ctx.config = after
    if ctx.store.get_meta(INITIAL_CONFIG) is None:  # what a replay of this station starts from
        ctx.store.set_meta(INITIAL_CONFIG, before.model_dump(mode="json"))
    ctx.store.set_meta("config", ctx.config.model_dump(mode="json"))
    model = model_key(command["key"])
    if model is not None:
        _use_new_model(ctx, before, model)
    _share_config(ctx)


def _spawn(ctx: Context, command: dict[str, Any]) -> None:
    from station.core.lifecycle import create_agent

    try:  # a spawn queued by an older version, before today's checks: an alert, never a crash on every resume
        spec = AgentSpec.model_validate({**command["agent"], "count": 1})
    except (ValidationError, TypeError) as err:
        ctx.emit(OperatorAlert(f"spawn refused: {_first_error(err)}"))
        return
    create_agent(ctx, spec)  # announced by its agent_spawned event


def _end_agent(ctx: Context, command: dict[str, Any]) -> None:
    agent = ctx.agents.get(command["agent"])
    if agent is None or not agent.active:
        ctx.emit(OperatorAlert("end_agent: no such active agent"), command["agent"])
        return
    agent.flags["end_requested"] = True
    ctx.agents.save(agent)


_APPLY = {"message": _message, "answer": _answer, "set": _set, "spawn": _spawn, "end_agent": _end_agent}


def _model_at(config: StationConfig, owner: str) -> ModelConfig:
    """The model of `agents.N` or of a feature section with one (model_sections)."""
    if owner.startswith("agents."):
        return config.agents[int(owner.split(".")[1])].model
    model = getattr(config.section_at(owner), "model", None)  # model_sections: a ModelConfig field
    assert isinstance(model, ModelConfig)
    return model


def model_owners(config: StationConfig, model: ModelConfig) -> list[str]:
    """The config keys (agents.0.model, reviewer.model, ...) whose model is `model`."""
    want = model.model_dump(mode="json")
    found = [f"agents.{i}.model" for i, spec in enumerate(config.agents) if spec.model.model_dump(mode="json") == want]
    return found + [f"{o}.model" for o in model_sections() if _model_at(config, o).model_dump(mode="json") == want]


def _same_model(settings: dict[str, Any], model: dict[str, Any]) -> bool:
    try:
        return ModelConfig.model_validate(settings).model_dump(mode="json") == model
    except (ValidationError, TypeError):
        return False


def _use_new_model(ctx: Context, before: StationConfig, key: re.Match[str]) -> None:
    """A changed model setting reaches whoever calls that model from their next call.

    The reviewer, grader and debugger read their model from the config at each call. Agents carry
    their own copy of their entry's model (a respawn or an heir copies it on), so every agent
    still in play (active, or departed and awaiting its replacement) whose model is the entry's
    old one gets the new one; ended agents keep the model they lived with, and spend already booked
    keeps the name it was billed under.
    """
    old, new = _model_at(before, key["owner"]), _model_at(ctx.config, key["owner"])
    if old.model_dump(mode="json") == new.model_dump(mode="json"):
        return
    ctx.models.forget(old)  # its client goes; anyone still on the old settings gets a fresh one
    if key["index"] is None:
        return
    was, settings = old.model_dump(mode="json"), new.model_dump()
    changed = []
    for agent in ctx.agents.where("state=? OR respawn_pending=1", (ACTIVE,), order="position"):
        if _same_model(agent.model, was):
            agent.model = dict(settings)
            ctx.agents.save(agent)
            changed.append(agent.name)
    ctx.emit(AgentsModelChanged(key=f"{key['owner']}.model", model=new.name, agents=changed))


def _share_config(ctx: Context) -> None:
    """Background workers (the reviewer's, the evaluator's) read their model settings from the config
    they were started with: hand them the changed one."""
    for hook in getattr(ctx, "hooks", None) or []:
        worker = getattr(hook, "worker", None)
        if worker is not None and hasattr(worker, "config"):
            worker.config = ctx.config


def model_fix(config: StationConfig | None, model: ModelConfig | None, directory: Any, who: str | None) -> str:
    """How to fix a model that failed for good: its key, or its settings with the `station set` that names them."""
    import shlex

    where = shlex.quote(str(directory)) if directory is not None else "DIR"
    owners = model_owners(config, model) if config is not None and model is not None else []
    if config is not None and model is not None and not owners:
        return (
            f"Fix the key, or, since this model's settings are no config entry's (an operator's spawn), "
            f"end the agent (`station end-agent {where} {shlex.quote(who or 'AGENT')}`) and spawn it again "
            "with corrected ones"
        )
    key = owners[0] if owners else "agents.N.model"
    also = f" (the same settings as {', '.join(owners[1:])}: set those too)" if len(owners) > 1 else ""
    return (
        f"Fix the key, or the model's settings with `station set {where} {key}.name NEW` (or {key}.api chat, "
        f"{key}.base_url URL, {key}.options YAML){also}"
    )
