"""docs/extending.md, proven: a room, a research task and an event kind, each from a package of
its own outside this repository, found through the `station.plugins` entry points and used by a
real station run from the `station` command (issue 31).

The three packages are written to a folder with the metadata an installed distribution has
(`*.dist-info/entry_points.txt`); the station runs with that folder on its path, as it would with
the packages installed. Nothing in the repository lists them."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATION = ROOT / ".venv" / "bin" / "station"
TICKS = 40

ROOM_PACKAGE = '''
"""The Lantern Hall: agents light a lantern; each lighting is an event its own hook counts."""
from __future__ import annotations

import random
from dataclasses import dataclass

from pydantic import Field

from station.core.config import Section, config_section
from station.core.context import Context, Hook
from station.core.events import Event, event_kind, on
from station.core.room import Outcome, Room, action, register_room
from station.models.scripted import Situation, room_play


@config_section("lantern")
class LanternConfig(Section):
    count: int = Field(3, ge=1, description="lanterns in the hall")


@event_kind("lantern_lit")
@dataclass(frozen=True)
class LanternLit(Event):
    lantern: int


class Glow(Hook):
    name = "lantern_glow"
    migrations = ["CREATE TABLE lantern_glow (tick INTEGER NOT NULL, agent TEXT, lantern INTEGER NOT NULL)"]

    @on(LanternLit)
    def count(self, ctx: Context, agent: str | None, event: LanternLit) -> None:
        ctx.store.execute("INSERT INTO lantern_glow VALUES(?, ?, ?)", (ctx.tick, agent, event.lantern))


@register_room
class LanternHall(Room):
    short, name = "lantern", "Lantern Hall"
    lobby_order = 135
    help_text = "Lanterns hang here, $count of them. `/execute_action{light}` lights one."
    migrations = ["CREATE TABLE lanterns (id INTEGER PRIMARY KEY AUTOINCREMENT, agent TEXT NOT NULL)"]

    def help_values(self, ctx: Context) -> dict[str, int]:
        return {"count": ctx.config.section(LanternConfig).count}

    def render(self, ctx: Context, agent: object) -> str:
        lit = ctx.store.scalar("SELECT COUNT(*) FROM lanterns")
        return f"{lit} lantern(s) have been lit."

    def hooks(self, config: object) -> list[Hook]:
        return [Glow()]

    @action("light")
    def light(self, ctx: Context, agent: object, args: str | None, params: None) -> Outcome:
        cur = ctx.store.execute("INSERT INTO lanterns(agent) VALUES(?)", (agent.name,))
        ctx.emit(LanternLit(lantern=int(cur.lastrowid or 0)), agent.name)
        return Outcome(["You light a lantern."])


@room_play("lantern")
def _light_one(s: Situation, rng: random.Random) -> list[str]:
    return ["/execute_action{light}"]
'''

TASK_PACKAGE = '''
"""A research task: return the sum of the first n odd numbers, scored by the station."""
from __future__ import annotations

import random
from typing import Any

from evaluators.base import Task, Verdict, register
from station.core.run_types import RunResult


@register("odd_sum")
class OddSum(Task):
    title = "Odd Sum"
    description = "Return the sum of the first 50 odd numbers."
    entry = "solve"
    timeout_s = 60.0

    def spec(self) -> str:
        return "# Odd Sum\\n\\nDefine `solve()` returning the sum of the first 50 odd numbers."

    @classmethod
    def scripted_submission(cls, shown_title: str, seen: Any, rng: random.Random) -> dict[str, str] | None:
        return {"title": "Odd sum by a loop", "tags": "loop", "abstract": "Adds them up.",
                "content": "def solve():\\n    return sum(2 * k + 1 for k in range(50))\\n"}

    def score(self, result: RunResult) -> Verdict:
        if result.value != 2500:
            return Verdict(False, details=f"expected 2500, got {result.value!r}")
        return Verdict(True, 1.0, "Right.")
'''

EVENT_PACKAGE = '''
"""A station-wide hook with an event kind of its own: a bell rung every fifth tick."""
from __future__ import annotations

from dataclasses import dataclass

from station.core.context import Context, Hook, register_hook
from station.core.events import Event, TickStarted, event_kind, on


@event_kind("bell_rung")
@dataclass(frozen=True)
class BellRung(Event):
    strokes: int


@register_hook
class Bell(Hook):
    name = "bell"

    @on(TickStarted)
    def ring(self, ctx: Context, agent: str | None, event: TickStarted) -> None:
        if ctx.tick % 5 == 0:
            ctx.emit(BellRung(strokes=ctx.tick // 5))

    @on(BellRung)
    def tell(self, ctx: Context, agent: str | None, event: BellRung) -> None:
        for name in ctx.agents.active_names():
            ctx.notify(name, f"The bell strikes {event.strokes}.", "bell")
'''

CONFIG = """
name: extended
seed: 3
agents:
  - count: 4
    kind: guest
    model: {provider: scripted, name: scripted-newcomer}
lifecycle: {max_age: 30, maturity_ticks: 6, min_tests_for_ascension: 1}
grading:
  model: {provider: scripted, name: scripted-grader}
codex: {set: research}
research:
  tasks:
    - evaluator: odd_sum
  executor: {kind: local, max_parallel: 2}
lantern: {count: 5}
"""


def write_plugins(folder: Path) -> None:
    for package, source in (("lantern_room", ROOM_PACKAGE), ("odd_sum_task", TASK_PACKAGE),
                            ("bell_event", EVENT_PACKAGE)):
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text(textwrap.dedent(source).lstrip())
    info = folder / "station_extras-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: station-extras\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[station.plugins]\nlantern = lantern_room\nodd_sum = odd_sum_task\nbell = bell_event\n")


def test_a_room_a_task_and_an_event_kind_each_from_their_own_package(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    write_plugins(plugins)
    config = tmp_path / "extended.yaml"
    config.write_text(CONFIG)
    env = {**os.environ, "PYTHONPATH": str(plugins)}
    done = subprocess.run([STATION, "run", str(config), "--dir", str(tmp_path / "st"), "--until-tick", str(TICKS)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    db = sqlite3.connect(tmp_path / "st" / "station.db")
    stored = json.loads(db.execute("SELECT value FROM meta WHERE key='config'").fetchone()[0])
    assert "lantern" in stored["rooms"]["enabled"]  # the new station records the plugin's room

    # the room: listed by the Lobby, its help from its package, its action and its table
    prompts = "\n".join(r[0] for r in db.execute("SELECT prompt FROM turns"))
    assert "Lantern Hall" in prompts and "Lanterns hang here, 5 of them." in prompts  # its own config section
    lit = db.execute("SELECT COUNT(*) FROM lanterns").fetchone()[0]
    assert lit > 0
    # its event kind: stored with its typed fields, and handled by the room's own hook, once each
    events = [json.loads(r[0]) for r in db.execute("SELECT payload FROM events WHERE kind='lantern_lit'")]
    assert len(events) == lit and sorted(e["lantern"] for e in events) == list(range(1, lit + 1))
    assert db.execute("SELECT COUNT(*) FROM lantern_glow").fetchone()[0] == lit

    # the event-kind package: its kind emitted by its hook, its handler telling the agents
    rung = [json.loads(r[0])["strokes"] for r in db.execute("SELECT payload FROM events WHERE kind='bell_rung'")]
    assert rung == list(range(1, TICKS // 5 + 1))
    assert db.execute("SELECT COUNT(*) FROM messages WHERE text LIKE '%The bell strikes%'").fetchone()[0] > 0

    # the task: submissions run in the sandbox and scored by the station
    scores = db.execute("SELECT status, score FROM evaluations WHERE task IS NOT NULL").fetchall()
    assert ("finished", 1.0) in scores, scores
    status = subprocess.run([STATION, "status", str(tmp_path / "st")], env=env, capture_output=True, text=True)
    assert status.returncode == 0 and "best on task 1: 1 (evaluation #" in status.stdout, status.stdout

    # the room's section is checked like the engine's, with the key's path
    config.write_text(CONFIG.replace("count: 5", "count: 0"))
    refused = subprocess.run([STATION, "run", str(config), "--dir", str(tmp_path / "st2"), "--ticks", "1"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "lantern.count: Input should be greater than or equal to 1" in refused.stderr
