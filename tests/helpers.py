"""Small shared helpers for the tests that drive a station (in-process or as a subprocess).

They drive a real station in-process (Station + Engine on a temporary directory) and read
what happened back from its database: turn rows (prompts, replies, actions), agent records,
events and messages.
"""
from __future__ import annotations

import copy
import importlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from station.apps.world import Station
from station.core.config import parse_config
from station.models.replay import ReplayModel

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "social_demo.yaml"

# A reply with text but no action: harmless padding for replay files.
FILLER = "Nothing to do this turn; I keep thinking."


class Later:
    """A module imported when a test first uses it, not when its test module is collected: every
    worker collects every module, and scanpy with scib-metrics, or the three SDKs, take seconds."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # pytest's collection asks every module global for __test__ and the like
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)


HEADINGS = ("## System Information", "## System Messages", "## Actions Detected (Last Turn)",
            "## Room Output History (Last Turn)", "## Current State")


def act(content: str) -> str:
    """One action line: act("goto codex") -> /execute_action{goto codex}."""
    return "/execute_action{" + content + "}"


def yaml_block(body: str) -> str:
    return "```yaml\n" + body.strip("\n") + "\n```"


def reply(*lines: str) -> str:
    return "\n".join(lines)


def replay_model(path: Path, replies: Iterable[str], name: str = "replay-test", pad: int = 0) -> dict[str, Any]:
    """Write a replay JSONL file (line n = the agent's n-th reply) and return its model config."""
    texts = [*replies, *[FILLER] * pad]
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return {"provider": "replay", "name": name, "replay_file": str(path)}


def guest(model: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"count": 1, "kind": "guest", "model": model, **extra}


def recursive(model: dict[str, Any], lineage: str = "Spiro", **extra: Any) -> dict[str, Any]:
    return {"count": 1, "kind": "recursive", "lineage": lineage, "model": model, **extra}


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def config(agents: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    """A quiet test config: no random tips, no backups; anything can be overridden (deep merge)."""
    base = {"name": "test", "seed": 1, "agents": agents,
            "notifications": {"tips_every_ticks": 0},
            "engine": {"backup_every_ticks": 0}}
    return _merge(base, overrides)


def make_station(directory: Path, agents: list[dict[str, Any]], **overrides: Any) -> Station:
    return Station.create(directory, parse_config(config(agents, **overrides)))


def demo_config(**overrides: Any) -> dict[str, Any]:
    return _merge(yaml.safe_load(DEMO.read_text(encoding="utf-8")), overrides)


def make_old(st: Station, *names: str) -> None:
    """Make the named agents old enough to be mature (birth far in the past)."""
    with st.store.transaction():
        for name in names:
            agent = st.ctx.agents.get(name)
            agent.birth_tick = -100
            st.ctx.agents.save(agent)


# -- reading the world back ---------------------------------------------------------------
def stored(st: Station, name: str) -> dict[str, Any]:
    """The agent's record as committed in the database (not the engine's in-memory copy)."""
    row = st.store.one("SELECT data FROM agents WHERE name=?", (name,))
    assert row is not None, f"no agent {name!r} in the store"
    return json.loads(row["data"])


def session_of(st: Station, name: str) -> int:
    return stored(st, name)["session"]


def turn_lines(st: Station, name: str, tick: int) -> list[str]:
    """The action-log lines of the agent's turn at `tick` (what its next prompt lists as executed)."""
    row = st.store.one("SELECT actions FROM turns WHERE tick=? AND session=?", (tick, session_of(st, name)))
    assert row is not None, f"{name} took no turn at tick {tick}"
    return [line for entry in json.loads(row["actions"])["history"] for line in entry["lines"]]


def turn_rows(st: Station, *, session: int | None = None, tick: int | None = None) -> list[Any]:
    sql, params = "SELECT * FROM turns WHERE 1", []
    if session is not None:
        sql, params = sql + " AND session=?", params + [session]
    if tick is not None:
        sql, params = sql + " AND tick=?", params + [tick]
    return st.store.all(sql + " ORDER BY id", tuple(params))


def turn(st: Station, tick: int, session: int = 1) -> Any:
    rows = turn_rows(st, session=session, tick=tick)
    assert len(rows) == 1, f"expected one turn of session {session} at tick {tick}, got {len(rows)}"
    return rows[0]


def prompt_at(st: Station, tick: int, session: int = 1) -> str:
    return turn(st, tick, session)["prompt"]


def section(prompt: str, heading: str) -> str:
    """The text of one top-level prompt section (from its heading to the next section's heading)."""
    start = prompt.index(heading)
    ends = [prompt.find(h, start + len(heading)) for h in HEADINGS if h != heading]
    ends = [e for e in ends if e > start]
    text = prompt[start:min(ends) if ends else len(prompt)].rstrip()
    return text[:-3].rstrip() if text.endswith("\n---") else text


def executed_lines(prompt: str) -> list[str]:
    """The '- ...' result lines listed under **Actions Executed:** in Room Output History."""
    history = section(prompt, "## Room Output History (Last Turn)")
    lines, inside = [], False
    for line in history.splitlines():
        if line.startswith("**Actions Executed:**"):
            inside = True
            continue
        if inside and line.startswith("- "):
            lines.append(line[2:])
        elif inside:
            inside = False
    return lines


def events(st: Station, kind: str) -> list[tuple[int, str | None, dict[str, Any]]]:
    rows = st.store.all("SELECT tick, agent, payload FROM events WHERE kind=? ORDER BY id", (kind,))
    return [(r["tick"], r["agent"], json.loads(r["payload"])) for r in rows]


def integrity_ok(st: Station) -> bool:
    return st.store.integrity_check() == "ok"


def record_requests(monkeypatch: Any) -> list[tuple[str, list[dict[str, str]]]]:
    """Record every (agent, messages) a replay model is sent, in order."""
    sent: list[tuple[str, list[dict[str, str]]]] = []
    original = ReplayModel.complete

    def complete(self: ReplayModel, messages: list[dict[str, str]], *, system: str | None, agent: str) -> Any:
        sent.append((agent, [dict(m) for m in messages]))
        return original(self, messages, system=system, agent=agent)

    monkeypatch.setattr(ReplayModel, "complete", complete)
    return sent


def research_station_evaluations(directory: Path, name: str, research: dict[str, Any], ticks: int,
                                 agents: int = 5) -> list:
    """Run the scripted demo station (with `agents` guests) on `research` for `ticks` ticks; its
    evaluation rows."""
    from station.core.engine import Engine

    config = demo_config(name=name, research=research)
    config["agents"][0]["count"] = agents
    station = Station.create(directory, parse_config(config))
    try:
        Engine(station).run(until_tick=ticks)
        return station.store.all("SELECT author, status, score, title FROM evaluations ORDER BY id")
    finally:
        station.close()


def rows(directory: Path, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
    """Rows, by column name, of a station no process is running."""
    db = sqlite3.connect(directory / "station.db")
    db.row_factory = sqlite3.Row
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def read(directory: Path, sql: str) -> list[tuple]:
    """Rows of a station that another process is running (or creating): read-only, never blocking it."""
    if not (directory / "station.db").exists():
        return []  # still being created
    db = sqlite3.connect(f"file:{directory / 'station.db'}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []  # tables not created yet
    finally:
        db.close()


HARNESS = "/station/executors/harness.py"  # where a station started the harness before runs saw neutral paths
OUR_HARNESS = str(ROOT) + HARNESS


def sandbox_processes(every_checkout: bool = False, within: Path | None = None) -> list[str]:
    """Processes running under a sandbox uid, except (unless `every_checkout`) the harnesses of
    another checkout's station (another test run, or a station, on this machine shares the uids).
    Each line ends with `[run <host folders>]`: a run sees its folders at neutral paths, so its
    command line no longer names them; its sandbox's PID 1 holds the host run dir open.
    `within`: only those of runs in that scratch folder: the parallel test workers run sandboxes
    of their own meanwhile."""
    from station.executors.local import UID_BASE, UID_COUNT

    out = subprocess.run(["ps", "-ww", "-eo", "uid=,pid=,args="], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        uid, pid, args = (line.split(None, 2) + [""])[:3]
        if not UID_BASE <= int(uid) < UID_BASE + UID_COUNT:
            continue
        ours = "harness.py" not in args or OUR_HARNESS in args or args.split()[0] == sys.executable
        line = f"{line} [run {' '.join(_held_by_init(int(pid)))}]"
        if (every_checkout or ours) and (within is None or str(within) in line):
            found.append(line)
    return found


def _held_by_init(pid: int) -> list[str]:
    """What the PID 1 of a process's namespace holds open, as host paths (its run dir among them);
    every process of a sandbox descends from it, orphans included. [] outside a PID namespace."""
    for _ in range(100):
        try:
            status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        except (OSError, ValueError):
            return []
        if status["NSpid"].split()[-1] == "1":
            held = []
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    held.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
                except OSError:
                    pass
            return held
        if len(status["NSpid"].split()) == 1:
            return []  # the host's own namespace: not a sandbox's
        pid = int(status["PPid"])
    return []


def sandboxes_alive(marker: str) -> list[str]:
    """Processes whose command line holds `marker` (submitted code marks itself with a comment)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


# A circle-packing submission whose first run leaves a marker in the persistent shared storage and
# sleeps ten minutes (to be interrupted); a later run finds the marker and answers at once, so "the
# same evaluation went on" is visible. "slow-once" names its sandbox processes for sandboxes_alive.
SLOW_ONCE = ("import os, time\n\ndef construct_packing():\n    marker = 'storage/shared/started-once'\n"
             "    if not os.path.exists(marker):\n        open(marker, 'w').close()\n        time.sleep(600)  # slow-once\n"
             "    return [[0.25, 0.5], [0.75, 0.5]], [0.25, 0.25]\n")


def slow_once_config(tmp_path: Path, executor: dict[str, Any]) -> Path:
    """A config file: one replayed agent submits SLOW_ONCE at tick 1 to circle packing on `executor`."""
    body = "\n".join(f"{k}: {json.dumps(v)}" for k, v in {
        "title": "Slow once", "tags": "faults", "abstract": "Sleeps on its first run only.",
        "content": SLOW_ONCE}.items())
    replies = [reply(act("goto research"), act("submit 1"), yaml_block(body))] + ["Waiting."] * 40
    replay = tmp_path / "agent.jsonl"
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in replies))
    settings = {"name": "faults", "seed": 5, "engine": {"backup_every_ticks": 0},
                "agents": [{"count": 1, "kind": "recursive", "lineage": "Spiro",
                            "model": {"provider": "replay", "name": "replay-faults", "replay_file": str(replay)}}],
                "lifecycle": {"maturity_ticks": 0}, "notifications": {"tips_every_ticks": 0},
                "research": {"tasks": [{"evaluator": "circle_packing", "params": {"n": 2}, "baselines": False,
                                        "timeout_s": 900}],
                             "executor": {"max_parallel": 1, **executor}, "wait_ticks": 1}}
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def web_client(app: Any) -> Any:
    """An in-process client of the web console (`station.apps.web.app.create_app`), logged in through its
    login address as the operator is with the one `station serve` prints."""
    from fastapi.testclient import TestClient

    client = TestClient(app)
    opened = client.get(app.state.login.address(), follow_redirects=False)
    assert opened.status_code == 303 and client.cookies, opened.text
    return client


def station_cli(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """The `station` command as a user runs it, in `cwd`, with this checkout's code."""
    import os
    import sys

    return subprocess.run(
        [sys.executable, "-m", "station.apps.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
