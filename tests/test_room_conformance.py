"""Room conformance: what every room must satisfy (in the spirit of PettingZoo's `api_test`).

Every class in `rooms.room_classes()` is checked, so a new room is tested once registered (`@register_room`). A room must:

1. declare itself: a `short` and a `name`, both unique; each action a lower-case name whose handler
   is a method of the class, `params` None or a `Params` model; `productive_actions` among its actions;
2. have help in every codex set and prompt style: non-empty, fully filled in, naming each of its
   actions (in its own help, or in a shared help topic its first visit shows, e.g. the capsule guide);
3. render for a guest, an ascended agent, an immature and a mature recursive agent and a supervisor
   without raising: the help header on the first visit only, or a refusal string for whom it turns away;
4. answer each action sent the engine's real way (a replayed reply: parse -> validate -> handler) with a
   clear line when its YAML is missing, mistyped or has unknown keys, and when it is used in the wrong
   room; nothing raises and the turn is committed;
5. keep the optional API's types (system_notices, status_lines, awaiting_operator, status_counts,
   lineage_credits, task_summary) and bring only hooks that watch event kinds the engine really emits.

Built once per module: a station of replayed agents (one per viewer kind, one per action) run for 3 ticks,
and configs/demo.yaml run for 15 (ascended agents, the event kinds a real run emits). Views and API calls
run in transactions that are rolled back.
"""
from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from helpers import (
    FILLER,
    ROOT,
    act,
    events,
    guest,
    integrity_ok,
    make_old,
    make_station,
    recursive,
    replay_model,
    reply,
    stored,
    turn_lines,
    yaml_block,
)

from rooms import room_classes
from station.apps.world import Station
from station.core.agents import Agent
from station.core.config import load_config
from station.core.context import Hook
from station.core.engine import Engine
from station.core.room import Params, Room
from station.core.texts import CODEX_ROOT, Texts
from station.core.turn import GLOBAL_ACTIONS, HELP_TOPICS, execute_reply

ROOM_CLASSES = room_classes()
ACTIONS = [(cls, name) for cls in ROOM_CLASSES for name in cls.actions]
CODEXES = tuple(f"{s.name}/{style}" for s in sorted((CODEX_ROOT / "sets").iterdir()) if s.is_dir()
                for style in ("full", "compact"))
VIEWERS = ("guest", "ascended", "immature", "mature", "supervisor")
UNKNOWN = "bogus_key"
DEMO, DEMO_TICKS = ROOT / "configs" / "demo.yaml", 15
# Event kinds a hook may watch that neither run emits, each with why it did not occur (none so far).
UNSEEN_EVENT_KINDS: dict[str, str] = {}
# (check, case id) -> the room bug that makes the case fail; such a case is a strict xfail. Checks:
# declaration, help, view, wrong_room, missing_yaml, bad_yaml, api, hooks; ids as pytest shows them.
KNOWN_BUGS: dict[tuple[str, str], str] = {}


def cases(check: str, items: list[tuple[str, tuple]]) -> list[Any]:
    return [pytest.param(*values, id=cid, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[(check, cid)])]
                         if (check, cid) in KNOWN_BUGS else []) for cid, values in items]


def by_room(check: str, *, each: tuple[str, ...] = ()) -> list[Any]:
    """One case per room, or per room and item of `each` (id "short-item")."""
    return cases(check, [(f"{c.short}-{e}", (c, e)) for c in ROOM_CLASSES for e in each] if each
                 else [(c.short, (c,)) for c in ROOM_CLASSES])


def by_action(check: str, keep: Callable[[type[Room], str], bool] = lambda c, n: True) -> list[Any]:
    return cases(check, [(f"{c.short}-{n}", (c, n)) for c, n in ACTIONS if keep(c, n)])


def wrong_room(name: str) -> type[Room]:
    """The first room (in Lobby order) an agent can stand in that lacks the action."""
    return next(c for c in ROOM_CLASSES if name not in c.actions and not c.maturity_gated)


def fields(cls: type[Room], name: str) -> list[str]:
    params = cls.actions[name].params
    return list(params.model_fields) if params else []


def bad_yaml(cls: type[Room], name: str) -> str:
    """Every field of the action's YAML given a mapping where a scalar or list belongs, plus an unknown key."""
    return yaml_block("\n".join([*(f"{key}:\n  nested: [not, a, scalar]" for key in fields(cls, name)),
                                 f"{UNKNOWN}: 1"]))


def script(cls: type[Room], name: str) -> list[str]:
    """Tick 1: the action in the wrong room, then goto the room; tick 2: the action without YAML
    (where YAML is required); tick 3: the action with bad YAML."""
    wrong = wrong_room(name)
    first = [act(f"goto {wrong.short}")] if wrong.short != "lobby" else []
    if name not in GLOBAL_ACTIONS:  # outside its room a global name (exit) is the global action
        first.append(act(name))
    second = act(name) if cls.actions[name].yaml_required else FILLER
    return [reply(*first, act(f"goto {cls.short}")), second, reply(act(name), bad_yaml(cls, name))]


@dataclass
class World:
    st: Station  # replayed agents: the viewers, and one tester per action
    demo: Station  # DEMO after DEMO_TICKS ticks
    names: dict[str, str]  # viewer kind, or "short.action" -> agent name
    seen: set[str]  # event kinds in both stations' events tables

    def viewer(self, who: str) -> tuple[Station, Agent]:
        if who == "ascended":  # the demo starts with guests only, so its recursive agents have ascended
            agent = next((a for a in self.demo.ctx.agents.active() if not a.is_guest), None)
            assert agent is not None, f"no ascended agent in the demo after {DEMO_TICKS} ticks"
            return self.demo, agent
        agent = self.st.ctx.agents.get(self.names[who])
        assert agent is not None, f"no {who} agent"
        return self.st, agent


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("conformance")
    specs = {"guest": guest(replay_model(tmp / "guest.jsonl", [], pad=10))}
    for who, lineage in (("immature", "Young"), ("mature", "Elder"), ("supervisor", "Sage")):
        specs[who] = recursive(replay_model(tmp / f"{who}.jsonl", [], pad=10), lineage=lineage,
                               role="supervisor" if who == "supervisor" else None)
    for i, (cls, name) in enumerate(ACTIONS):
        specs[f"{cls.short}.{name}"] = recursive(replay_model(tmp / f"a{i}.jsonl", script(cls, name), pad=12),
                                                 lineage="Tester")
    # circle packing, in coder mode (`read_code` is offered), with surveys on: every action is offered
    research = {**yaml.safe_load(DEMO.read_text())["research"], "mode": "coder"}
    st = make_station(tmp / "station", list(specs.values()), research=research, lifecycle={"maturity_ticks": 5},
                      reflection={"meta_every_ticks": 20},  # `meta_reflect` runs, and its help is shown
                      archive={"survey": {"enabled": True}})
    by_session = {r["session"]: r["name"] for r in st.store.all("SELECT name, session FROM agents")}
    names = {key: by_session[i + 1] for i, key in enumerate(specs)}
    make_old(st, *(n for key, n in names.items() if key not in ("guest", "immature")))
    demo = Station.create(tmp / "demo", load_config(DEMO))
    try:
        assert Engine(st).run(until_tick=3) == "finished tick 3"
        assert Engine(demo).run(until_tick=DEMO_TICKS) == f"finished tick {DEMO_TICKS}"
        assert integrity_ok(st) and integrity_ok(demo)
        seen = {r["kind"] for s in (st, demo) for r in s.store.all("SELECT DISTINCT kind FROM events")}
        yield World(st, demo, names, seen)
    finally:
        st.close()
        demo.close()


class _Undo(Exception):
    """Raised to roll a scratch transaction back."""


@contextmanager
def rolled_back(st: Station) -> Iterator[None]:
    """Run inside a transaction, as the engine does, and undo whatever it wrote."""
    try:
        with st.store.transaction():
            yield
            raise _Undo
    except _Undo:
        pass
    finally:
        st.ctx.agents.invalidate()


def loaded(st: Station, cls: type[Room]) -> Room:
    room = st.ctx.room(cls.short)
    assert room is not None, f"{cls.short} is not loaded in the {st.config.name} station"
    return room


def newcomer(agent: Agent) -> Agent:
    """A copy of the agent that has seen no room yet (so a view starts with its first-visit help)."""
    fresh = copy.deepcopy(agent)
    fresh.rooms, fresh.flags = {}, {}
    return fresh


# -- 1. declaration -----------------------------------------------------------------------
@pytest.mark.parametrize("cls", by_room("declaration"))
def test_declaration(cls: type[Room]) -> None:
    for attr in ("short", "name"):
        value = getattr(cls, attr, None)
        assert isinstance(value, str) and value.strip(), f"{cls.__name__} declares no {attr}"
        assert [getattr(c, attr) for c in ROOM_CLASSES].count(value) == 1, f"{attr} {value!r} is not unique"
    assert re.fullmatch(r"[a-z][a-z0-9_]*", cls.short), f"{cls.short}: goto and help files need a lower-case short"
    for name, spec in cls.actions.items():
        where = f"{cls.short}: action {name!r}"
        assert spec.name == name and re.fullmatch(r"[a-z][a-z0-9_]*", name), \
            f"{where}: the parser lower-cases names and splits them at whitespace"
        assert name not in GLOBAL_ACTIONS or (name, cls.short) == ("exit", "exit"), \
            f"{where}: a global action of that name runs instead"
        assert getattr(cls, spec.handler.__name__, None) is spec.handler, \
            f"{where}: its handler {spec.handler.__qualname__} is not the class's method (overridden undecorated?)"
        try:
            inspect.signature(spec.handler).bind("room", "ctx", "agent", "args", "params")  # as turn.py calls it
        except TypeError as err:
            pytest.fail(f"{where}: the engine calls handler(room, ctx, agent, args, params): {err}")
        assert spec.params is None or (isinstance(spec.params, type) and issubclass(spec.params, Params)), \
            f"{where}: params must be None or a Params subclass"
        assert not spec.yaml_required or spec.params is not None, f"{where}: requires YAML but reads none"
    stray = set(cls.productive_actions) - set(cls.actions)
    assert not stray, f"{cls.short}: productive_actions {sorted(stray)} are not actions of the room"


# -- 2. help --------------------------------------------------------------------------------
PLACEHOLDER = re.compile(r"\$\{\w*\}|\$[A-Za-z_]\w*|(?<!/execute_action)\{[A-Za-z_]\w*\}")


@pytest.mark.parametrize(("cls", "codex"), by_room("help", each=CODEXES))
def test_help_in_every_codex_set(world: World, cls: type[Room], codex: str) -> None:
    set_name, style = codex.split("/")
    ctx = copy.copy(world.st.ctx)
    ctx.texts = Texts(set_name, style=style)
    room, agent = loaded(world.st, cls), newcomer(world.viewer("mature")[1])
    text = room.help(ctx, agent)
    assert isinstance(text, str) and text.strip(), f"{cls.short}: no help in codex set {codex}"
    assert not PLACEHOLDER.findall(text), f"{cls.short}: unfilled placeholders in its {codex} help"
    with rolled_back(world.st):
        first = room.output(ctx, agent)
    shared = [ctx.texts.help(topic) for topic in HELP_TOPICS]
    docs = "\n".join([text, *(t for t in shared if t and t in first)])
    offered = [a for a in cls.actions if a not in room.unoffered(ctx)]
    missing = [a for a in offered if not re.search(rf"(?:`|/execute_action\{{)\s*{re.escape(a)}(?!\w)", docs)]
    assert not missing, f"{cls.short}: actions {missing} are not named in its {codex} help"


def test_an_action_the_config_leaves_out_does_not_exist_for_the_agents(world: World) -> None:
    """The demo (direct submissions, surveys off) offers neither `read_code` nor `survey`: its help
    does not name them, the room's list leaves them out, and trying one is an unknown action."""
    st, agent = world.viewer("ascended")
    for short, name in (("research", "read_code"), ("archive", "survey")):
        room = st.ctx.room(short)
        assert room is not None and name in room.actions and room.unoffered(st.ctx) == {name}
        assert f"`{name}" not in room.help(st.ctx, newcomer(agent))
        here = agent.location
        with rolled_back(st):
            agent.location = short
            log = execute_reply(st.ctx, agent, act(f"{name} 1"))
        agent.location = here
        told = " ".join(line for entry in log.history for line in entry["lines"])
        assert f"Action '{name}' is not recognized" in told and name not in told.split("Actions here:")[1], told


# -- 3. views -------------------------------------------------------------------------------
@pytest.mark.parametrize(("cls", "who"), by_room("view", each=VIEWERS))
def test_view_for_every_kind_of_agent(world: World, cls: type[Room], who: str) -> None:
    st, agent = world.viewer(who)
    room, agent = loaded(st, cls), newcomer(agent)
    header = f"**Help Message - {room.name}**"
    with rolled_back(st):
        refused = room.refusal(st.ctx, agent)
        first, second = room.output(st.ctx, agent), room.output(st.ctx, agent)
    assert isinstance(first, str) and isinstance(second, str), f"{cls.short}: a view for the {who} is not a str"
    if who == "guest" and not cls.guests_allowed:
        assert refused, f"{cls.short} admits no guests but does not refuse one"
    if refused:
        assert first == second == refused, f"{cls.short}: the {who} should see the refusal only"
    else:
        assert header in first, f"{cls.short}: the {who}'s first visit lacks the help"
        assert header not in second, f"{cls.short}: the {who}'s second visit repeats the help"


# -- 4. actions through the engine ------------------------------------------------------------
def lines_of(world: World, cls: type[Room], name: str, tick: int) -> tuple[str, list[str]]:
    agent = world.names[f"{cls.short}.{name}"]
    assert f"You moved to the {cls.name}." in turn_lines(world.st, agent, 1), f"{agent} never reached {cls.short}"
    return agent, turn_lines(world.st, agent, tick)


@pytest.mark.parametrize(("cls", "name"), by_action("wrong_room", lambda c, n: n not in GLOBAL_ACTIONS))
def test_action_in_the_wrong_room(world: World, cls: type[Room], name: str) -> None:
    _, lines = lines_of(world, cls, name, 1)
    said = f"Action '{name}' is not recognized in the {wrong_room(name).name}."
    line = next((l for l in lines if l.startswith(said)), None)
    assert line is not None, f"{cls.short}.{name} in the wrong room: no clear error in {lines}"
    assert re.search(rf"It is an action of: [^.]*\b{cls.short}\b", line), f"{line!r} does not point to {cls.short}"


@pytest.mark.parametrize(("cls", "name"), by_action("missing_yaml", lambda c, n: c.actions[n].yaml_required))
def test_missing_yaml_names_what_is_needed(world: World, cls: type[Room], name: str) -> None:
    _, lines = lines_of(world, cls, name, 2)
    line = next((l for l in lines if l.startswith(f"'{name}' was not run: it needs a ```yaml block")), None)
    assert line is not None, f"{cls.short}.{name} without YAML: no clear error in {lines}"
    missing = [key for key in fields(cls, name) if key not in line]
    assert not missing, f"{cls.short}.{name}: the error does not name {missing}: {line!r}"


@pytest.mark.parametrize(("cls", "name"), by_action("bad_yaml"))
def test_bad_yaml_is_reported_and_the_turn_committed(world: World, cls: type[Room], name: str) -> None:
    agent, lines = lines_of(world, cls, name, 3)  # the turn row exists: the turn was committed
    where = f"{cls.short}.{name} with bad YAML"
    note = (f"Note: '{name}' takes no YAML" if cls.actions[name].params is None
            else f"Note: '{name}' ignored unknown YAML key(s): {UNKNOWN}")
    assert any(l.startswith(note) for l in lines), f"{where}: no note about the ignored YAML in {lines}"
    assert len(lines) >= 2, f"{where}: nothing but the note was said"
    for problem in (l for l in lines if l.startswith(f"'{name}' was not run: YAML problem")):
        assert any(f"'{k}" in problem for k in fields(cls, name)), f"{where}: {problem!r}"
    assert not [l for l in lines if "failed inside the station" in l], f"{where}: the handler raised: {lines}"
    alerts = [p["problem"] for _, who, p in events(world.st, "operator_alert") if who == agent]
    assert not alerts, f"{where}: operator alerted: {alerts}"
    assert stored(world.st, agent)["state"] == "active", f"{where}: the agent's session ended"


# -- 5. the optional API ----------------------------------------------------------------------
def is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


@pytest.mark.parametrize("cls", by_room("api"))
def test_optional_api_returns_its_declared_types(world: World, cls: type[Room]) -> None:
    for st in (world.st, world.demo):
        ctx, room = st.ctx, loaded(st, cls)
        with rolled_back(st):
            notices = {a.name: room.system_notices(ctx, a) for a in ctx.agents.active()}
            status = {a.name: room.status_lines(ctx, a) for a in ctx.agents.active()}
            waiting, counts = room.awaiting_operator(ctx), room.status_counts(ctx)
            credits, summary = room.lineage_credits(ctx), room.task_summary(ctx)
        where = f"{cls.short} in the {st.config.name} station"
        assert all(is_str_list(n) for n in notices.values()), f"{where}: system_notices -> {notices!r}"
        assert all(is_str_list(lines) and all(re.fullmatch(r"- [^:\n]+: [^\n]+", line) for line in lines)
                   for lines in status.values()), f"{where}: status_lines (one '- Label: value' each) -> {status!r}"
        assert is_str_list(waiting), f"{where}: awaiting_operator -> {waiting!r}"
        assert isinstance(counts, dict), f"{where}: status_counts -> {counts!r}"
        assert isinstance(credits, dict) and all(isinstance(k, str) and type(v) in (int, float)
                                                 for k, v in credits.items()), f"{where}: lineage_credits {credits!r}"
        assert summary is None or (isinstance(summary, str) and summary.strip()), f"{where}: task_summary {summary!r}"


@pytest.mark.parametrize("cls", by_room("hooks"))
def test_hooks_watch_events_the_engine_emits(world: World, cls: type[Room]) -> None:
    for st in (world.st, world.demo):
        hooks = loaded(st, cls).hooks(st.config)
        assert isinstance(hooks, list), f"{cls.short}.hooks -> {hooks!r}"
        for hook in hooks:
            assert isinstance(hook, Hook), f"{cls.short}: {hook!r} is not a Hook"
            assert hook.events and all(isinstance(k, str) for k in hook.events), \
                f"{cls.short}: {hook.name} watches nothing"
            never = set(hook.events) - world.seen - set(UNSEEN_EVENT_KINDS)
            assert not never, f"{cls.short}: hook {hook.name} waits for {sorted(never)}, which no run emitted"
