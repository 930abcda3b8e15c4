#!/usr/bin/env python3
"""Make a big station quickly: a real station (Station.create) whose history is written straight into its tables.

Usage: scripts/make_big_station.py --out DIR [--agents 1000] [--ticks 10000] [--full-ticks 1000]
       [--config configs/open_station.yaml] [--seed 20250611]

The readers, the web pages and `station export` are measured on a station of 1,000 agents and 10,000 ticks;
running the engine that long takes hours, so this script writes what such a run leaves behind instead:

  - the station is created by `Station.create` with the config's first `agents:` entry set to --agents, so
    every table (the engine's and each room's) has the schema the rooms create, and the config is stored;
  - a life-cycle is simulated with a fixed seed: every slot of the population holds one life at a time; a guest
    ascends after a few ticks (or leaves), joins an existing lineage whose last generation has ended (or, with
    the config's force_new_probability, founds a new one), lives to the config's max_age unless it leaves
    earlier, and is replaced by a new guest at the next tick. The agent records (guests, ascended guests,
    ended and active generations, lineages with successors) are `station.core.agents.Agent` records;
  - in each of the last --full-ticks ticks every living agent takes a turn: a `turns` row, its recorded model
    reply (`inputs`), the turn_started / turn_finished events, a `spend` row, and for a third of them a system
    message; written tick by tick by INSERT ... SELECT, so ids grow with ticks as in a real run. In the ticks
    before, one agent in ten takes its turn each tick (each agent every tenth tick): a real run's 10 million
    turns would take an hour and 12 GB to write, and the pages that read the history are as slow on 2 million
    rows as they are fast on 10 (a query over all turns shows at either size; the study page's window and
    the dialogues of the living are read where the history is complete). --full-ticks equal to --ticks
    writes every turn;
  - the rooms' records in realistic numbers, by agents alive at the tick: forum threads and replies, mail,
    private notes, paper submissions and the published papers, research evaluations (with tags, versions and
    runs), Common Room messages, test attempts, and their events.

Texts are short (a real prompt is a few thousand characters; here a few hundred), so that 10 million turns fit
in a few GB. The conversation table (what the engine keeps of each agent's dialogue) is not filled: no page
reads it. A `big.json` file in DIR records the parameters and counts; a directory holding one is reused.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from station.apps.world import Station  # noqa: E402
from station.core.agents import ACTIVE, ASCENDED, ENDED, GUEST, RECURSIVE, Agent, roman  # noqa: E402
from station.core.config import load_config  # noqa: E402
from station.core.store import DB_NAME, dumps  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "open_station.yaml"
MARKER = "big.json"
START = 1_750_000_000.0  # wall clock of tick 1 (turns' and spend's timestamps)
SECONDS_PER_TICK = 2.0

ROOMS = [
    "lobby",
    "codex",
    "public_memory",
    "private_memory",
    "mail",
    "research",
    "common",
    "reflect",
    "archive",
    "misc",
    "token_management",
    "external",
    "test",
]
TOPICS = [
    "penalty weights",
    "symmetry",
    "restarts",
    "the codex",
    "what the others write",
    "my own notes",
    "a small experiment",
    "the evaluation logs",
    "how long we live",
    "the common room",
]
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ra",
    "te",
    "no",
    "vi",
    "su",
    "de",
    "ma",
    "ri",
    "to",
    "phe",
    "ly",
    "xa",
    "qu",
    "ne",
    "zo",
    "ba",
    "el",
    "or",
    "is",
    "an",
    "um",
]
LEAVE_REASONS = [("voluntary departure", 0.7), ("token exhaustion", 0.2), ("context window overflow", 0.1)]
SPARSE = 10  # before the last --full-ticks ticks, one agent in SPARSE takes a turn each tick
BIG_TABLES = ("turns", "inputs", "events", "spend", "messages")
GUEST_LIMIT = 12  # a guest that ascends does so within this many ticks


# -- the life-cycle ------------------------------------------------------------------------------------
@dataclass
class Life:
    """One session: a guest, and from `ascend` on the recursive agent it became."""

    session: int
    guest: str
    position: float
    birth: int
    end: int | None  # the tick of its last turn (None: alive at the end)
    ascend: int | None = None
    reason: str | None = None
    lineage: str | None = None
    generation: int | None = None
    replaces: str | None = None

    @property
    def recursive(self) -> str | None:
        return f"{self.lineage} {roman(self.generation)}" if self.lineage and self.generation else None

    def name_at(self, tick: int) -> str:
        return self.recursive if self.ascend is not None and tick >= self.ascend else self.guest  # type: ignore[return-value]


class Lineages:
    """Lineage names and their generations; a guest joins one whose last generation has ended."""

    def __init__(self, rng: random.Random, new_share: float) -> None:
        self.rng, self.new_share = rng, new_share
        self.generations: dict[str, int] = {}
        self.free: list[str] = []  # lineages with no living generation
        self.heads: dict[str, Life] = {}

    def _new_name(self) -> str:
        while True:
            word = "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(2, 3)))
            name = word[0].upper() + word[1:]
            if name not in self.generations and name.lower() not in ("guest", "system", "shared", "lineage"):
                return name

    def join(self, life: Life) -> Life | None:
        """Give `life` a lineage and generation; returns the ancestor it succeeds (None: a new lineage)."""
        if self.free and self.rng.random() >= self.new_share:
            lineage = self.free.pop(self.rng.randrange(len(self.free)))
            ancestor = self.heads[lineage]
        else:
            lineage, ancestor = self._new_name(), None
        self.generations[lineage] = self.generations.get(lineage, 0) + 1
        life.lineage, life.generation = lineage, self.generations[lineage]
        self.heads[lineage] = life
        return ancestor

    def ended(self, life: Life) -> None:
        if life.lineage and self.heads.get(life.lineage) is life:
            self.free.append(life.lineage)


# -- texts --------------------------------------------------------------------------------------------
def turn_texts(rng: random.Random, count: int = 64) -> list[tuple[int, str, str, str, str]]:
    """(k, room, prompt, reply, actions JSON) variants the turns are drawn from."""
    out = []
    for k in range(count):
        here, there = rng.choice(ROOMS), rng.choice(ROOMS)
        topic = rng.choice(TOPICS)
        ok = rng.random() < 0.85
        prompt = (
            f"## System Messages\n\nTick {k}: a note about {topic}.\n\n---\n\n## Room Output History\n\n"
            f"You are in the {here} room. {rng.choice(TOPICS).capitalize()} comes up again."
        )
        reply = f"I will look at {topic} next.\n/execute_action{{goto {there}}}\n/execute_action{{read}}"
        actions = dumps(
            {
                "history": [{"lines": [f"You moved to the {there} room."], "room": there}],
                "parsed": [
                    {
                        "args": there,
                        "error": None if ok else "not open to you yet",
                        "name": "goto",
                        "ok": ok,
                        "params": None,
                        "room": here,
                    },
                    {"args": None, "error": None, "name": "read", "ok": True, "params": None, "room": there},
                ],
            }
        )
        out.append((k, there, prompt, reply, actions))
    return out


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(TOPICS).split()[-1] for _ in range(n))


# -- the writer -----------------------------------------------------------------------------------------
class Writer:
    """Fills the tables of one station through its own connection (no journal while filling: the marker
    file is written only once all is in)."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("PRAGMA cache_size=-262144")  # 256 MB: the indexes of the big tables stay in memory
        self.columns = {
            t: [r[1] for r in self.db.execute(f"PRAGMA table_info({t})")]
            for (t,) in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }

    def without_indexes(self, tables: tuple[str, ...]) -> list[str]:
        """Drop the secondary indexes of the big tables (built again at the end: sorting once is much
        quicker than keeping them up to date row by row); returns their CREATE statements."""
        marks = ",".join("?" * len(tables))
        found = self.db.execute(
            f"SELECT name, sql FROM sqlite_master WHERE type='index' AND sql IS NOT NULL AND tbl_name IN ({marks})",
            tables,
        ).fetchall()
        for name, _ in found:
            self.db.execute(f"DROP INDEX {name}")
        return [sql for _, sql in found]

    def has(self, table: str) -> bool:
        return table in self.columns

    def insert(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Rows as dicts; only the columns this table has are written (schemas change under us)."""
        if not rows or not self.has(table):
            return
        cols = [c for c in rows[0] if c in self.columns[table]]
        self.db.executemany(
            f"INSERT INTO {table}({', '.join(cols)}) VALUES({', '.join('?' * len(cols))})",
            [tuple(r[c] for c in cols) for r in rows],
        )

    def close(self) -> None:
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.close()


def agent_rows(agents: list[Agent], columns: list[str]) -> list[dict[str, Any]]:
    rows = []
    for a in agents:
        row = {
            "name": a.name,
            "session": a.session,
            "state": a.state,
            "position": a.position,
            "kind": a.kind,
            "lineage": a.lineage,
            "model_name": a.model.get("name", ""),
            "successor": a.succeeded_by,
            "respawn_pending": 0,
            "location": a.location,
            "data": dumps(vars(a)),
        }
        rows.append({c: row[c] for c in columns if c in row})
    return rows


class Simulation:
    """The history, tick by tick: lives come and go, each living agent takes a turn, rooms fill."""

    def __init__(
        self,
        writer: Writer,
        template: Agent,
        config: Any,
        rng: random.Random,
        ticks: int,
        full_ticks: int,
        first: list[Agent],
        next_guest: int,
        say: Callable[[str], None],
    ) -> None:
        self.w, self.template, self.rng, self.ticks, self.say = writer, template, rng, ticks, say
        self.full_ticks = full_ticks
        self.max_age = config.lifecycle.max_age or 300
        self.lineages = Lineages(rng, config.lineage.force_new_probability)
        self.next_guest, self.next_session = next_guest, max(a.session for a in first) + 1
        self.next_position = max(a.position for a in first) + 1.0
        self.lives: list[Life] = []
        self.alive: list[Life] = []
        self.births: dict[int, list[Life | None]] = {}
        self.ascents: dict[int, list[Life]] = {}
        self.deaths: dict[int, list[Life]] = {}
        self.counters: dict[str, int] = {}
        self.events: list[tuple] = []
        self.capsules: dict[str, list[int]] = {}  # room -> capsule ids, oldest first
        self.pending_events: dict[int, list[tuple]] = {}  # tick -> events due then (evaluations delivered)
        for agent in first:
            self._plan(Life(agent.session, agent.name, agent.position, 1, None))

    # -- lives ---------------------------------------------------------------------------------------
    def _plan(self, life: Life) -> None:
        """Decide when a new life ascends and ends (it may outlive the history)."""
        rng = self.rng
        self.lives.append(life)
        self.alive.append(life)
        if rng.random() < 0.9:
            life.ascend = life.birth + rng.randint(2, GUEST_LIMIT)
            self.ascents.setdefault(life.ascend, []).append(life)
            roll = rng.random()
            end = life.birth + self.max_age if roll < 0.7 else rng.randint(life.ascend + 1, life.birth + self.max_age)
            life.reason = "reaching the life limit" if roll < 0.7 else self._leave_reason()
        else:
            end, life.reason = life.birth + rng.randint(3, 60), "voluntary departure"
        if end <= self.ticks:
            life.end = end
            self.deaths.setdefault(end, []).append(life)

    def _leave_reason(self) -> str:
        roll, total = self.rng.random(), 0.0
        for reason, share in LEAVE_REASONS:
            total += share
            if roll < total:
                return reason
        return LEAVE_REASONS[0][0]

    def _born(self, tick: int, departed: Life) -> Life:
        self.next_guest += 1
        life = Life(
            self.next_session,
            f"Guest_{self.next_guest}",
            self.next_position,
            tick,
            None,
            replaces=departed.recursive if departed.ascend else departed.guest,
        )
        self.next_session += 1
        self.next_position += 1.0
        self._plan(life)
        return life

    # -- one tick ------------------------------------------------------------------------------------
    def run(self) -> None:
        db = self.w.db
        db.execute(
            "CREATE TEMP TABLE alive (session INTEGER PRIMARY KEY, name TEXT NOT NULL, position REAL NOT NULL, "
            "birth INTEGER NOT NULL)"
        )
        db.executemany(
            "INSERT INTO alive VALUES(?,?,?,?)", [(x.session, x.guest, x.position, x.birth) for x in self.alive]
        )
        db.execute("CREATE TEMP TABLE texts (k INTEGER PRIMARY KEY, room TEXT, prompt TEXT, reply TEXT, actions TEXT)")
        db.executemany("INSERT INTO texts VALUES(?,?,?,?,?)", turn_texts(self.rng))
        began = time.perf_counter()
        every = max(1, self.ticks // 10)
        db.execute("BEGIN")
        for tick in range(1, self.ticks + 1):
            self._tick(tick)
            if tick % every == 0:
                db.execute("COMMIT")
                db.execute("BEGIN")
                self.say(
                    f"tick {tick:,}/{self.ticks:,}: {len(self.alive):,} alive, {len(self.lives):,} lives, "
                    f"{time.perf_counter() - began:.0f} s"
                )
        db.execute("COMMIT")

    def _tick(self, tick: int) -> None:
        db = self.w.db
        if tick > 1:
            self._event(tick, "tick_started", None, {})
        for agent, kind, payload in self.pending_events.pop(tick, []):
            self._event(tick, kind, agent, payload)
        for departed in self.births.pop(tick, []):
            life = self._born(tick, departed)  # type: ignore[arg-type]
            db.execute("INSERT INTO alive VALUES(?,?,?,?)", (life.session, life.guest, life.position, tick))
            self._event(
                tick,
                "agent_spawned",
                life.guest,
                {"agent_kind": GUEST, "model": self.template.model["name"], "replaces": life.replaces},
            )
        self._flush_events()
        self._turns(tick)
        for life in self.ascents.pop(tick, []):
            if life.end is not None and life.end < tick:
                continue
            ancestor = self.lineages.join(life)
            db.execute("UPDATE alive SET name=? WHERE session=?", (life.recursive, life.session))
            self._count("test_attempts", 1)
            if self.w.has("test_attempts"):
                db.execute(
                    "INSERT INTO test_attempts(session, agent, test_id, status, answer, tick, graded_tick, "
                    "comment, grader_calls) VALUES(?,?,?,?,?,?,?,?,1)",
                    (
                        life.session,
                        life.guest,
                        "1",
                        "pass",
                        "The answer is 2 (two).",
                        tick - 1,
                        tick,
                        "Names everything the criteria ask for.",
                    ),
                )
            self._event(
                tick,
                "agent_ascended",
                life.recursive,
                {
                    "ancestor": ancestor.recursive if ancestor else None,
                    "generation": life.generation,
                    "guest": life.guest,
                    "lineage": life.lineage,
                },
            )
        self._rooms(tick)
        for life in self.deaths.pop(tick, []):
            db.execute("DELETE FROM alive WHERE session=?", (life.session,))
            self.alive.remove(life)
            self.lineages.ended(life)
            self._event(tick, "agent_departed", life.name_at(tick), {"reason": life.reason, "respawn": True})
            self.births.setdefault(tick + 1, []).append(life)
        self._event(tick, "tick_ending", None, {})
        self._flush_events()

    def _turns(self, tick: int) -> None:
        """The living agents' turns at `tick`: the turn, its recorded reply, its events, its spend, a message.
        Before the last `full_ticks` ticks only one agent in SPARSE acts each tick (see the docstring)."""
        db = self.w.db
        at = START + tick * SECONDS_PER_TICK
        who = "1" if tick > self.ticks - self.full_ticks else f"(a.session + {tick}) % {SPARSE} = 0"
        pick = f"FROM alive a JOIN texts x ON x.k = (a.session * 7 + {tick}) % 64 WHERE {who} ORDER BY a.position"
        db.execute(
            "INSERT INTO turns(tick, session, agent, room, prompt, reply, thinking, actions, internal, context_tokens, "
            "tokens_spent, started_at, finished_at, input_tokens, cached_input_tokens, output_tokens, "
            "reasoning_tokens, latency_s, cost_usd, finish_reason) "
            "SELECT ?1, a.session, a.name, x.room, x.prompt, x.reply, NULL, x.actions, '[]', "
            "2000 + (?1 - a.birth) * 180, 2000 + (?1 - a.birth) * 180 + 40, ?2, ?2 + 0.8, "
            f"2000 + (?1 - a.birth) * 180, 0, 40, 0, 0.8, 0.0, 'stop' {pick}",
            (tick, at),
        )
        db.execute(
            "INSERT INTO inputs(key, kind, tick, agent, payload, request_hash, latency_s, recorded_at) "
            "SELECT 'reply/' || ?1 || '/' || a.session || '/0', 'reply', ?1, a.name, "
            "json_object('text', x.reply, 'thinking', NULL, 'usage', json_object('input_tokens', "
            "2000 + (?1 - a.birth) * 180, 'output_tokens', 40)), printf('%016x', a.session * 100003 + ?1), 0.8, ?2 "
            f"{pick}",
            (tick, at),
        )
        db.execute(
            "INSERT INTO events(tick, kind, agent, payload) SELECT ?, m.kind, a.name, m.payload "
            "FROM alive a CROSS JOIN (SELECT 0 AS o, 'turn_started' AS kind, '{}' AS payload "
            'UNION ALL SELECT 1, \'turn_finished\', \'{"actions":["goto","read"]}\') m '
            f"WHERE {who} ORDER BY a.position, m.o",
            (tick,),
        )
        model = self.template.model
        db.execute(
            "INSERT INTO spend(at, tick, who, model, provider, input_tokens, cached_input_tokens, cache_write_tokens, "
            "output_tokens, reasoning_tokens, cost_usd, latency_s, retries) "
            "SELECT ?2, ?1, a.name, ?3, ?4, 2000 + (?1 - a.birth) * 180, 0, 0, 40, 0, "
            f"(2000 + (?1 - a.birth) * 180) * 1.5e-7 + 40 * 6e-7, 0.8, 0 {pick}",  # as a small model's prices
            (tick, at, model["name"], model["provider"]),
        )
        db.execute(
            "INSERT INTO messages(agent, tick, kind, text, delivered_tick) "
            "SELECT a.name, ?1, 'public_memory', 'New reply in a forum thread you wrote in (tick ' || ?1 || ').', ?2 "
            f"FROM alive a WHERE {who} AND (a.session + ?1) % 3 = 0 ORDER BY a.position",
            (tick, tick + 1 if tick < self.ticks else None),
        )

    # -- the rooms ---------------------------------------------------------------------------------------
    def _writer(self, tick: int, *, recursive: bool = False) -> tuple[Life, str] | None:
        """A living agent to write something at `tick` (a recursive one if asked)."""
        for _ in range(8):
            life = self.rng.choice(self.alive)
            if life.end is not None and life.end < tick:
                continue
            if recursive and (life.ascend is None or tick < life.ascend):
                continue
            return life, life.name_at(tick)
        return None

    def _count(self, what: str, n: int = 1) -> int:
        self.counters[what] = self.counters.get(what, 0) + n
        return self.counters[what]

    def _poisson(self, mean: float) -> int:
        """A small random count with the given mean (a sum of coin flips: quick and good enough)."""
        whole, part = int(mean), mean - int(mean)
        return sum(1 for _ in range(2 * whole) if self.rng.random() < 0.5) + (self.rng.random() < part)

    def _rooms(self, tick: int) -> None:
        n = len(self.alive)
        if not n or not self.w.has("capsules"):
            return
        for _ in range(self._poisson(n * 0.002)):  # new forum threads
            self._capsule(tick, "public_memory", "")
        for _ in range(self._poisson(n * 0.015)):  # forum replies
            self._reply(tick, "public_memory")
        for _ in range(self._poisson(n * 0.002)):  # mail
            self._capsule(tick, "mail", "")
        for _ in range(self._poisson(n * 0.004)):
            self._reply(tick, "mail")
        for _ in range(self._poisson(n * 0.002)):  # private notes, in the writer's lineage
            self._capsule(tick, "private_memory", None)
        for _ in range(self._poisson(n * 0.0005)):  # paper submissions
            self._paper(tick)
        for _ in range(self._poisson(n * 0.01)):  # research evaluations
            self._evaluation(tick)
        for _ in range(self._poisson(n * 0.005)):  # Common Room talk
            self._common(tick)

    def _capsule(self, tick: int, room: str, scope: str | None) -> None:
        found = self._writer(tick, recursive=room != "mail" or self.rng.random() < 0.5)
        if found is None:
            return
        life, name = found
        if scope is None:
            if not life.lineage:
                return
            scope = life.lineage
        key = f"capsule:{room}:{scope}"
        number = self._count(key)
        cid = self._count("capsule_ids")
        topic = self.rng.choice(TOPICS)
        title = f"Working notes of {name}" if room == "private_memory" else f"On {topic} ({tick})"
        recipients: list[str] = []
        if room == "mail":
            other = self._writer(tick)
            recipients = [other[1]] if other and other[1] != name else []
        content = f"Tick {tick}: {words(self.rng, 30)}"
        self.w.insert(
            "capsules",
            [
                {
                    "id": cid,
                    "room": room,
                    "scope": scope,
                    "number": number,
                    "author": name,
                    "author_session": life.session,
                    "author_lineage": life.lineage if name != life.guest else None,
                    "author_generation": life.generation if name != life.guest else None,
                    "created_tick": tick,
                    "updated_tick": tick,
                    "title": title,
                    "abstract": f"About {topic}." if room == "public_memory" else None,
                    "tags": dumps([topic.split()[-1]]),
                    "recipients": dumps(recipients),
                    "deleted": 0,
                    "message_count": 1,
                    "word_count": 31,
                }
            ],
        )
        self.w.insert(
            "capsule_messages",
            [
                {
                    "id": self._count("capsule_message_ids"),
                    "capsule": cid,
                    "k": 1,
                    "author": name,
                    "author_session": life.session,
                    "author_lineage": life.lineage,
                    "author_generation": life.generation,
                    "tick": tick,
                    "title": title,
                    "content": content,
                    "word_count": 31,
                    "deleted": 0,
                }
            ],
        )
        self.w.insert("capsule_tags", [{"tag": topic.split()[-1], "capsule": cid}])
        self.w.insert("capsule_members", [{"session": life.session, "capsule": cid}])
        self.capsules.setdefault(room, []).append(cid)
        self._count(f"capsules {room}")

    def _reply(self, tick: int, room: str) -> None:
        ids = self.capsules.get(room)
        found = self._writer(tick)
        if not ids or found is None:
            return
        # most replies go to recent threads, some to old ones
        cid = ids[-1 - min(len(ids) - 1, int(self.rng.expovariate(1 / 30)))]
        life, name = found
        k = self.w.db.execute("SELECT message_count + 1 FROM capsules WHERE id=?", (cid,)).fetchone()[0]
        self.w.insert(
            "capsule_messages",
            [
                {
                    "id": self._count("capsule_message_ids"),
                    "capsule": cid,
                    "k": k,
                    "author": name,
                    "author_session": life.session,
                    "author_lineage": life.lineage,
                    "author_generation": life.generation,
                    "tick": tick,
                    "title": None,
                    "content": f"Reply at tick {tick}: {words(self.rng, 20)}",
                    "word_count": 24,
                    "deleted": 0,
                }
            ],
        )
        self.w.db.execute(
            "UPDATE capsules SET message_count=?, updated_tick=?, word_count=word_count+24 WHERE id=?", (k, tick, cid)
        )
        self.w.db.execute(
            "INSERT OR IGNORE INTO capsule_reads(session, capsule, k, tick) VALUES(?,?,?,?)",
            (life.session, cid, k - 1, tick),
        )

    def _paper(self, tick: int) -> None:
        found = self._writer(tick, recursive=True)
        if found is None or not self.w.has("paper_submissions"):
            return
        life, name = found
        sid = self._count("paper_submissions")
        accepted = self.rng.random() < 0.6
        topic = self.rng.choice(TOPICS)
        title = f"What we learned about {topic} (tick {tick})"
        content = f"# {title}\n\n{words(self.rng, 120)}"
        number = None
        if accepted:
            number = self._count("capsule:archive:")
            cid = self._count("capsule_ids")
            self.w.insert(
                "capsules",
                [
                    {
                        "id": cid,
                        "room": "archive",
                        "scope": "",
                        "number": number,
                        "author": name,
                        "author_session": life.session,
                        "author_lineage": life.lineage,
                        "author_generation": life.generation,
                        "created_tick": tick,
                        "updated_tick": tick,
                        "title": title,
                        "abstract": f"A study of {topic}.",
                        "tags": dumps(["study"]),
                        "recipients": "[]",
                        "deleted": 0,
                        "message_count": 1,
                        "word_count": 120,
                    }
                ],
            )
            self.w.insert(
                "capsule_messages",
                [
                    {
                        "id": self._count("capsule_message_ids"),
                        "capsule": cid,
                        "k": 1,
                        "author": name,
                        "author_session": life.session,
                        "author_lineage": life.lineage,
                        "author_generation": life.generation,
                        "tick": tick,
                        "title": title,
                        "content": content,
                        "word_count": 120,
                        "deleted": 0,
                    }
                ],
            )
            self.capsules.setdefault("archive", []).append(cid)
            self._event(tick, "publication", name, {"number": number})
        self.w.insert(
            "paper_submissions",
            [
                {
                    "id": sid,
                    "tick": tick,
                    "agent": name,
                    "session": life.session,
                    "lineage": life.lineage,
                    "generation": life.generation,
                    "title": title,
                    "tags": dumps(["study"]),
                    "abstract": f"A study of {topic}.",
                    "content": content,
                    "status": "accepted" if accepted else "rejected",
                    "attempts": 1,
                    "score": None,
                    "verdict": None,
                    "decided_tick": tick,
                    "capsule_number": number,
                }
            ],
        )
        self._event(tick, "paper_submitted", name, {"submission": sid})

    def _evaluation(self, tick: int) -> None:
        found = self._writer(tick, recursive=True)
        if found is None or not self.w.has("evaluations"):
            return
        life, name = found
        eid = self._count("evaluations")
        roll = self.rng.random()
        status = "finished" if roll < 0.86 else ("failed" if roll < 0.96 else "timed_out")
        done = tick + self.rng.choice([1, 1, 2])
        if done > self.ticks:
            status, done = "queued", None
        score = 1.0 if status == "finished" else None
        n = self.rng.randint(1, 40)
        code = (
            f"import statistics, sys\nvalues = list(range({n}))\nprint(sys.version)\nprint(statistics.mean(values))\n"
        )
        tag = self.rng.choice(["probe", "statistics", "notes", "baseline"])
        self.w.insert(
            "evaluations",
            [
                {
                    "id": eid,
                    "task": "1",
                    "author": name,
                    "session": life.session,
                    "lineage": life.lineage,
                    "tick": tick,
                    "title": f"Small statistics probe {n}",
                    "tags": dumps([tag]),
                    "abstract": "A short script that prints the interpreter version and summary statistics.",
                    "code": code,
                    "no_debugger": 0,
                    "cpu_only": 0,
                    "holds_tick": 1,
                    "status": status,
                    "score": score,
                    "sort_key": dumps([score]) if score is not None else None,
                    "metrics": "{}" if done else None,
                    "details": "The program ran to completion (exit status 0)." if status == "finished" else "",
                    "error": {
                        "failed": "NameError: name 'np' is not defined",
                        "timed_out": "Timed out after 600 s",
                    }.get(status),
                    "reported_version": 1 if done else None,
                    "stdout": "3.11\n20.5\n" if done else None,
                    "stderr": "" if done else None,
                    "finished_tick": done,
                }
            ],
        )
        self.w.insert("evaluation_tags", [{"evaluation": eid, "tag": tag}])
        self._event(tick, "evaluation_submitted", name, {"evaluation": eid})
        if done:
            self.w.insert(
                "evaluation_versions",
                [
                    {
                        "evaluation": eid,
                        "version": 1,
                        "source": "author",
                        "code": code,
                        "status": {"finished": "ok", "failed": "error"}.get(status, "timeout"),
                        "score": score,
                        "error": None,
                        "input_key": f"eval_run/{eid}/1",
                    }
                ],
            )
            self.w.insert(
                "evaluation_runs",
                [
                    {
                        "evaluation": eid,
                        "version": 1,
                        "state": "done",
                        "started_at": START + tick * SECONDS_PER_TICK,
                        "finished_at": START + done * SECONDS_PER_TICK,
                        "executor": "local",
                        "progress": None,
                        "system_errors": 0,
                        "system_error": None,
                    }
                ],
            )
            self.pending_events.setdefault(done, []).append(
                (
                    name,
                    "evaluation_finished",
                    {"evaluation": eid, "score": score, "status": status, "task": "1", "version": 1},
                )
            )

    def _common(self, tick: int) -> None:
        found = self._writer(tick)
        if found is None or not self.w.has("common_messages"):
            return
        _, name = found
        mid = self._count("common_messages")
        self.w.insert(
            "common_messages",
            [
                {
                    "id": mid,
                    "tick": tick,
                    "author": name,
                    "content": f"Has anyone looked at {self.rng.choice(TOPICS)}?",
                    "period_start": None,
                    "period_end": None,
                }
            ],
        )
        self._event(tick, "common_message", name, {"message_id": mid})

    # -- events ----------------------------------------------------------------------------------------
    def _event(self, tick: int, kind: str, agent: str | None, payload: dict[str, Any]) -> None:
        self.events.append((tick, kind, agent, dumps(payload)))

    def _flush_events(self) -> None:
        self.w.db.executemany("INSERT INTO events(tick, kind, agent, payload) VALUES(?,?,?,?)", self.events)
        self.events.clear()

    # -- the records at the end ----------------------------------------------------------------------------
    def agents(self) -> list[Agent]:
        """Every agent record as the history leaves it: guests (ascended, ended or active) and generations."""
        t = self.template
        out = []
        for life in self.lives:
            ascended = life.ascend is not None and life.ascend <= self.ticks and life.lineage is not None
            ended = life.end is not None
            last = life.end if ended else self.ticks
            spent = 2000 * (last - life.birth + 1) + 90 * (last - life.birth + 1) ** 2
            common = {
                "model": dict(t.model),
                "birth_tick": life.birth,
                "position": life.position,
                "max_age": self.max_age,
                "token_budget": t.token_budget,
                "tokens_spent": spent,
                "context_tokens": 2000 + (last - life.birth) * 180,
                "rooms": {"lobby": {"help_shown": True}, "codex": {"help_shown": True, "read": {"1": 1}}},
                "last_summary": ["1. `goto public_memory` (in Lobby);"],
                "last_history": [{"lines": ["You moved to the Public Memory Room."], "room": "public_memory"}],
            }
            guest = Agent(
                name=life.guest,
                session=life.session,
                kind=GUEST,
                **common,
                note=f"respawned in place of {life.replaces}" if life.replaces else "",
            )
            if ascended:
                guest.state, guest.ascended_to = ASCENDED, life.recursive
                guest.description = f"Guest agent, ascended to {life.recursive} at tick {life.ascend}"
                guest.location = "lobby"
                heir = Agent(
                    name=life.recursive,
                    session=life.session,
                    kind=RECURSIVE,
                    **common,  # type: ignore[arg-type]
                    lineage=life.lineage,
                    generation=life.generation,
                    ascend_tick=life.ascend,
                    description=f"{life.recursive}: reads first, then experiments.",
                    location=self.rng.choice(ROOMS),
                )
                if ended:
                    heir.state, heir.exit_tick, heir.exit_reason = ENDED, life.end, life.reason
                out += [guest, heir]
            else:
                guest.location = self.rng.choice(ROOMS)
                if ended:
                    guest.state, guest.exit_tick, guest.exit_reason = ENDED, life.end, life.reason
                else:
                    guest.state = ACTIVE
                out.append(guest)
        successors = {}
        for lineage_head in out:  # each generation's heir: the next generation of its lineage
            if lineage_head.lineage:
                successors[(lineage_head.lineage, lineage_head.generation)] = lineage_head.name
        for a in out:
            if a.lineage and a.generation is not None:
                a.succeeded_by = successors.get((a.lineage, a.generation + 1))
        return out


# -- the whole build -------------------------------------------------------------------------------------------
def make_big_station(
    out: str | Path,
    *,
    agents: int = 1000,
    ticks: int = 10_000,
    full_ticks: int = 1000,
    seed: int = 20250611,
    config_path: str | Path = DEFAULT_CONFIG,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Make (or reuse, when it has a `big.json`) the station at `out`; returns the summary written there."""
    out = Path(out)
    if (out / MARKER).exists():
        return json.loads((out / MARKER).read_text())
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} exists and holds no finished big station ({MARKER}); remove it first")
    began = time.perf_counter()
    config = load_config(config_path)
    first_spec = config.agents[0].model_copy(update={"count": agents})
    config = config.model_copy(update={"agents": [first_spec]})
    station = Station.create(out, config)
    first = [Agent.from_json(r[0]) for r in station.store.all("SELECT data FROM agents ORDER BY position")]
    template = first[0]
    next_guest = int(station.store.get_meta("last_guest_number", len(first)))
    station.close()
    say(f"created {out} with {len(first):,} agents in {time.perf_counter() - began:.0f} s; writing {ticks:,} ticks")

    writer = Writer(out / DB_NAME)
    rng = random.Random(seed)
    sim = Simulation(writer, template, config, rng, ticks, full_ticks, first, next_guest, say)
    indexes = writer.without_indexes(BIG_TABLES)
    sim.run()
    db = writer.db
    say(f"building {len(indexes)} indexes of the big tables")
    for sql in indexes:
        db.execute(sql)
    db.execute("BEGIN")
    db.execute("DELETE FROM agents")
    records = sim.agents()
    writer.insert("agents", agent_rows(records, writer.columns["agents"]))
    meta = {
        "tick": ticks + 1,
        "units": db.execute("SELECT COUNT(*) FROM turns").fetchone()[0] + ticks,
        "last_guest_number": sim.next_guest,
    }
    db.executemany(
        "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        [(k, dumps(v)) for k, v in meta.items()],
    )
    db.execute("COMMIT")
    # no ANALYZE: a station never runs one, so the query planner must do here what it does there
    summary = summarize(db)
    writer.close()
    summary.update(
        {
            "agents": agents,
            "ticks": ticks,
            "full ticks": full_ticks,
            "seed": seed,
            "config": str(config_path),
            "build seconds": round(time.perf_counter() - began, 1),
            "database MB": round((out / DB_NAME).stat().st_size / 1e6, 1),
        }
    )
    (out / MARKER).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def summarize(db: sqlite3.Connection) -> dict[str, Any]:
    def count(sql: str) -> int:
        try:
            return int(db.execute(sql).fetchone()[0] or 0)
        except sqlite3.OperationalError:  # a table this station does not have
            return 0

    return {
        "turns": count("SELECT MAX(id) FROM turns"),
        "agent records": count("SELECT COUNT(*) FROM agents"),
        "active agents": count("SELECT COUNT(*) FROM agents WHERE state='active'"),
        "sessions": count("SELECT MAX(session) FROM agents"),
        "lineages": count("SELECT COUNT(DISTINCT lineage) FROM agents WHERE lineage IS NOT NULL"),
        "events": count("SELECT MAX(id) FROM events"),
        "messages": count("SELECT MAX(id) FROM messages"),
        "capsules": count("SELECT COUNT(*) FROM capsules"),
        "capsule messages": count("SELECT COUNT(*) FROM capsule_messages"),
        "papers": count("SELECT COUNT(*) FROM capsules WHERE room='archive'"),
        "evaluations": count("SELECT MAX(id) FROM evaluations"),
        "common room messages": count("SELECT MAX(id) FROM common_messages"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the new station's directory")
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--ticks", type=int, default=10_000)
    ap.add_argument(
        "--full-ticks",
        type=int,
        default=1000,
        help=f"the last ticks in which every agent takes a turn (before: one in {SPARSE})",
    )
    ap.add_argument("--config", default=str(DEFAULT_CONFIG))
    ap.add_argument("--seed", type=int, default=20250611)
    args = ap.parse_args()
    summary = make_big_station(
        args.out,
        agents=args.agents,
        ticks=args.ticks,
        full_ticks=args.full_ticks,
        seed=args.seed,
        config_path=args.config,
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
