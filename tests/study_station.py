"""Small hand-made stations for the study's tests: a real station (Station.create, every room's tables)
whose history is written straight into its tables, a few rows each, so every number the study computes
is known by construction.

    from study_station import StudyStation, build_society   # tests/ is on the path under pytest
    path = build_society(tmp_path / "society")      # the station described below
    # or write your own:
    st = StudyStation(tmp_path / "mine", last_tick=20)
    st.life(1, "Guest_1", born=1, name="Ada I", lineage="Ada", generation=1, ascended=2)
    st.mail(3, "Ada I", ["Bo I"], "hello")
    st.finish()                                      # the agents' records and the clock; then read it

`build_society` makes this station (last tick 60, maturity at 20 ticks of age):

  lives    session 1: Guest_1 (born 1) -> Ada I (lineage Ada, generation 1, ascended 2), ended 29 (life limit)
           session 2: Guest_2 (born 1) -> Bo I (Bo, 1, ascended 2), alive
           session 3: Guest_3 (born 1) -> Cy I (Cy, 1, ascended 3), alive
           session 4: Guest_4 (born 25) -> Ada II (Ada, 2, ascended 30, heir of Ada I), alive
           session 5: Guest_5 (born 40), a guest, alive
  mail     a cycle: mail 1 Ada I -> Bo I (tick 5), mail 2 Bo I -> Cy I (6), mail 3 Cy I -> Ada I (7);
           Bo I replies to mail 1 at tick 8 (-> Ada I)
  forum    thread 1 by Bo I at tick 10 mentions @Cy_I and @"Ada II" (who did not exist yet);
           Cy I replies at tick 11, naming evaluation 1 (the System baseline)
  notes    Ada's note 1 by Ada I at tick 9 names "evaluation 3" (Bo I's)
  papers   submission 1 by Ada I published as paper 1 at tick 12 (accepted); Cy I replies to it at 14;
           submission 2 by Cy I rejected at tick 15;
           submission 3 by Bo I (text: "extends paper #1") published as paper 2 at tick 20
  research task 1: evaluation 1 System baseline (tick 0, delivered 1, score 1.0);
           2 Ada I (tick 5, delivered 6, 2.0); 3 Bo I (tick 8, delivered 9, 1.5, abstract names evaluation 2,
           which Bo I, young, could not see); 4 Bo I (tick 25, delivered 26, 2.5, "improves evaluation 2");
           5 Cy I (tick 27, delivered 28, 2.4, code nearly evaluation 4's, abstract "following paper 2");
           6 Ada II (tick 35, delivered 36, failed, names evaluations 5 and 2: young, it saw only 2)
  reads    Cy I read paper 1 at tick 13; Ada I read forum 1 before reads had ticks (so: tick 10);
           Bo I read the review of paper 1 (not a read) and its own mail (not a read)
  common   Bo I spoke at tick 40; Cy I read it at tick 41
  turns    each life takes a turn every 5 ticks it lives, alternating two rooms; each turn costs 1 cent
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from station.apps.world import Station
from station.core.agents import ACTIVE, ASCENDED, ENDED, GUEST, RECURSIVE, Agent
from station.core.config import load_config
from station.core.store import DB_NAME, dumps

ROOT = Path(__file__).resolve().parents[1]
REVIEWER = "Archive Review System"
SQUARE = "import numpy as np\n\ndef construct():\n    return np.zeros(4)\n"
RINGS = (
    "import numpy as np\nfrom scipy.optimize import minimize\n\ndef construct(n=26):\n"
    "    x = np.linspace(0, 1, n)\n    r = minimize(lambda v: -v.sum(), x).x\n    return x, r\n"
)


class StudyStation:
    """A station made by Station.create, then filled by hand: call the methods, then `finish()`."""

    def __init__(self, directory: Path, *, last_tick: int, maturity_ticks: int | None = 20) -> None:
        config = load_config(ROOT / "configs" / "open_station.yaml")
        lifecycle = config.lifecycle.model_copy(update={"maturity_ticks": maturity_ticks})
        config = config.model_copy(update={"lifecycle": lifecycle})
        Station.create(directory, config).close()
        self.path, self.last_tick = directory, last_tick
        self.db = sqlite3.connect(directory / DB_NAME, isolation_level=None)
        self.db.execute("DELETE FROM agents")
        self.db.execute("DELETE FROM evaluations")  # the open station's task has no baseline; ours are explicit
        self.template = {"name": "scripted-newcomer", "provider": "scripted"}
        self.lives: list[Agent] = []
        self.sessions: dict[str, int] = {}

    # -- people ------------------------------------------------------------------------------------
    def life(
        self,
        session: int,
        guest: str,
        *,
        born: int,
        name: str | None = None,
        lineage: str | None = None,
        generation: int | None = None,
        ascended: int | None = None,
        ancestor: str | None = None,
        ended: int | None = None,
        cause: str | None = None,
    ) -> None:
        """A life: a guest, which ascends as `name` at tick `ascended` when given; `ended`: its end."""
        common: dict[str, Any] = {"session": session, "model": dict(self.template), "birth_tick": born}
        first = Agent(name=guest, kind=GUEST, position=float(session), **common)
        self.sessions[guest] = session
        self._event(born, "agent_spawned", guest, {"agent_kind": "guest", "model": self.template["name"]})
        if name is None:
            first.state, first.exit_tick, first.exit_reason = (ENDED, ended, cause) if ended else (ACTIVE, None, None)
            self.lives.append(first)
            return
        first.state, first.ascended_to = ASCENDED, name
        heir = Agent(name=name, kind=RECURSIVE, position=float(session), lineage=lineage, generation=generation,
                     ascend_tick=ascended, **common)
        if ended:
            heir.state, heir.exit_tick, heir.exit_reason = ENDED, ended, cause
        self.sessions[name] = session
        self.lives += [first, heir]
        payload = {"ancestor": ancestor, "generation": generation, "guest": guest, "lineage": lineage}
        self._event(ascended or born, "agent_ascended", name, payload)
        if ended:
            self._event(ended, "agent_departed", name, {"reason": cause, "respawn": True})

    def turns(self, every: int = 5, cost: float = 0.01) -> None:
        """Each life takes a turn every `every` ticks it lives (two rooms in turn), each a model call."""
        for agent in self.lives:
            if agent.kind == GUEST and agent.ascended_to:
                continue  # the life is counted once, under its recursive record
            end = agent.exit_tick or self.last_tick
            for n, tick in enumerate(range(agent.birth_tick, end + 1, every)):
                name = self._name_at(agent.session, tick)
                room, then = ("lobby", "mail")[n % 2], ("mail", "lobby")[n % 2]
                self.db.execute(
                    "INSERT INTO turns(tick, session, agent, room, prompt, reply, actions, internal, tokens_spent, "
                    "started_at, finished_at, input_tokens, output_tokens, cost_usd) "
                    "VALUES(?,?,?,?,'','',?,'[]',110,0,0,100,10,?)",
                    (tick, agent.session, name, room, _moved(room, then), cost),
                )
                self.spend(tick, name, cost, input_tokens=100, output_tokens=10)

    def spend(self, tick: int | None, who: str, cost: float, *, input_tokens: int = 0, output_tokens: int = 0) -> None:
        self.db.execute(
            "INSERT INTO spend(at, tick, who, model, provider, input_tokens, cached_input_tokens, "
            "cache_write_tokens, output_tokens, reasoning_tokens, cost_usd) VALUES(0,?,?,'m','p',?,0,0,?,0,?)",
            (tick, who, input_tokens, output_tokens, cost),
        )

    # -- capsule rooms -------------------------------------------------------------------------------
    def capsule(
        self,
        room: str,
        tick: int,
        author: str,
        content: str,
        *,
        title: str = "A thread",
        recipients: list[str] = (),  # type: ignore[assignment]
        scope: str = "",
        abstract: str | None = None,
    ) -> int:
        """A new capsule (its message 1) of a room; returns its number."""
        number = 1 + self.db.execute(
            "SELECT COALESCE(MAX(number), 0) FROM capsules WHERE room=? AND scope=?", (room, scope)
        ).fetchone()[0]
        session = self.sessions.get(author)
        cur = self.db.execute(
            "INSERT INTO capsules(room, scope, number, author, author_session, author_lineage, created_tick, "
            "updated_tick, title, abstract, recipients) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
            (room, scope, number, author, session, self._lineage(author), tick, tick, title, abstract,
             json.dumps(list(recipients))),
        )
        self.db.executemany(
            "INSERT OR IGNORE INTO capsule_members(session, capsule) VALUES(?, ?)",
            [(self.sessions[n], cur.lastrowid) for n in [author, *recipients] if n in self.sessions],
        )
        self.message(room, number, tick, author, content, scope=scope, title=title)
        return number

    def message(self, room: str, number: int, tick: int, author: str, content: str, *, scope: str = "",
                title: str | None = None) -> int:
        """A message added to a capsule (a reply, or a paper's review); returns its k."""
        capsule, k = self.db.execute(
            "SELECT id, message_count + 1 FROM capsules WHERE room=? AND scope=? AND number=?", (room, scope, number)
        ).fetchone()
        self.db.execute(
            "INSERT INTO capsule_messages(capsule, k, author, author_session, author_lineage, tick, title, content, "
            "word_count) VALUES(?,?,?,?,?,?,?,?,?)",
            (capsule, k, author, self.sessions.get(author), self._lineage(author), tick, title, content,
             len(content.split())),
        )
        self.db.execute("UPDATE capsules SET message_count=?, updated_tick=? WHERE id=?", (k, tick, capsule))
        return int(k)

    def mail(self, tick: int, author: str, recipients: list[str], content: str) -> int:
        return self.capsule("mail", tick, author, content, title="Mail", recipients=recipients)

    def read(self, session: int, room: str, number: int, k: int, tick: int | None, *, scope: str = "") -> None:
        """A read mark (tick None: one made before read marks had ticks)."""
        capsule = self.db.execute(
            "SELECT id FROM capsules WHERE room=? AND scope=? AND number=?", (room, scope, number)
        ).fetchone()[0]
        self.db.execute("INSERT OR IGNORE INTO capsule_reads(session, capsule, k, tick) VALUES(?,?,?,?)",
                        (session, capsule, k, tick))

    def paper(self, tick: int, author: str, title: str, content: str, *, decided: int, accepted: bool) -> int | None:
        """A paper submission at `tick` reviewed at `decided`; accepted: published (its number is returned)."""
        session = self.sessions[author]
        number = None
        if accepted:
            number = self.capsule("archive", decided, author, content, title=title, abstract=f"About {title}.")
            self.message("archive", number, decided, REVIEWER, "Sound and clear. Score 8.", title="Review")
        cur = self.db.execute(
            "INSERT INTO paper_submissions(tick, agent, session, lineage, title, abstract, content, status, score, "
            "decided_tick, capsule_number) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
            (tick, author, session, self._lineage(author), title, f"About {title}.", content,
             "accepted" if accepted else "rejected", 8 if accepted else 3, decided, number),
        )
        self.db.execute(
            "INSERT INTO paper_reviews(submission, kind, attempt, input_key, tick, model, history, prompt, status, "
            "decision) VALUES(?, 'review', 1, 'k', ?, 'scripted-reviewer', '[]', 'p', 'success', ?)",
            (cur.lastrowid, decided, "accepted" if accepted else "rejected"),
        )
        return number

    def common(self, tick: int, author: str, content: str, readers: dict[str, int]) -> int:
        """A Common Room message and who read it when (the speaker's own read mark is added)."""
        cur = self.db.execute("INSERT INTO common_messages(tick, author, content) VALUES(?,?,?)",
                              (tick, author, content))
        marks = {author: tick, **readers}
        self.db.executemany("INSERT INTO common_reads(message, reader, tick) VALUES(?,?,?)",
                            [(cur.lastrowid, r, t) for r, t in marks.items()])
        return int(cur.lastrowid or 0)

    # -- research ---------------------------------------------------------------------------------
    def evaluation(self, tick: int, author: str, *, code: str, title: str = "An attempt", abstract: str = "",
                   delivered: int | None = None, score: float | None = None, status: str | None = None,
                   task: str = "1") -> int:
        """An evaluation submitted at `tick` (author "System": a baseline), delivered at `delivered`."""
        status = status or ("finished" if delivered is not None else "queued")
        cur = self.db.execute(
            "INSERT INTO evaluations(task, author, session, lineage, tick, title, tags, abstract, code, status, "
            "score, finished_tick) VALUES(?,?,?,?,?,?,'[]',?,?,?,?,?)",
            (task, author, self.sessions.get(author), self._lineage(author), tick, title, abstract, code, status,
             score, delivered),
        )
        return int(cur.lastrowid or 0)

    # -- the end ------------------------------------------------------------------------------------
    def finish(self) -> Path:
        """Write the agents' records and the clock (the last tick finished); returns the station's folder."""
        successors = {(a.lineage, a.generation): a.name for a in self.lives if a.kind == RECURSIVE}
        for a in self.lives:
            if a.kind == RECURSIVE and a.generation:
                a.succeeded_by = successors.get((a.lineage, a.generation + 1))
        self.db.executemany(
            "INSERT INTO agents(name, session, state, position, kind, lineage, model_name, successor, "
            "respawn_pending, location, offered, data) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
            [a.to_row() for a in self.lives],
        )
        self.db.execute("UPDATE meta SET value=? WHERE key='tick'", (dumps(self.last_tick + 1),))
        self.db.close()
        return self.path

    def _event(self, tick: int, kind: str, agent: str | None, payload: dict[str, Any]) -> None:
        self.db.execute("INSERT INTO events(tick, kind, agent, payload) VALUES(?,?,?,?)",
                        (tick, kind, agent, dumps(payload)))

    def _lineage(self, name: str) -> str | None:
        return next((a.lineage for a in self.lives if a.name == name), None)

    def _name_at(self, session: int, tick: int) -> str:
        names = [a for a in self.lives if a.session == session]
        heir = next((a for a in names if a.kind == RECURSIVE), None)
        return heir.name if heir and tick >= (heir.ascend_tick or 0) else names[0].name


def _moved(room: str, to: str) -> str:
    """A turn's actions as the engine records them: what the agent saw, and the commands read from its reply."""
    goto = {"name": "goto", "args": to, "params": None, "ok": True, "error": None, "room": room}
    return json.dumps({"history": [{"room": to, "lines": [f"You moved to the {to} room."]}], "parsed": [goto]})


def build_society(directory: Path) -> Path:
    """The station this module's docstring describes; returns its folder."""
    st = StudyStation(directory, last_tick=60)
    st.life(1, "Guest_1", born=1, name="Ada I", lineage="Ada", generation=1, ascended=2, ended=29,
            cause="reaching the life limit")
    st.life(2, "Guest_2", born=1, name="Bo I", lineage="Bo", generation=1, ascended=2)
    st.life(3, "Guest_3", born=1, name="Cy I", lineage="Cy", generation=1, ascended=3)
    st.life(4, "Guest_4", born=25, name="Ada II", lineage="Ada", generation=2, ascended=30, ancestor="Ada I")
    st.life(5, "Guest_5", born=40)
    st.turns()
    st.spend(12, "reviewer", 0.5, input_tokens=1000, output_tokens=100)

    st.mail(5, "Ada I", ["Bo I"], "Shall we compare notes?")
    st.mail(6, "Bo I", ["Cy I"], "Ada asked me to compare notes; you too?")
    st.mail(7, "Cy I", ["Ada I"], "Bo told me about your notes.")
    st.message("mail", 1, 8, "Bo I", "Yes, gladly.")
    st.read(2, "mail", 1, 2, 8)  # Bo I's own reply: not a read

    st.capsule("public_memory", 10, "Bo I", 'Ideas on restarts, @Cy_I and @"Ada II"?', title="Restarts",
               abstract="Restarts help.")
    st.message("public_memory", 1, 11, "Cy I", "They do; evaluation 1 is a weak start.")
    st.read(1, "public_memory", 1, 1, None)  # before read marks had ticks: the message's tick

    st.capsule("private_memory", 9, "Ada I", "Bo's evaluation 3 copies mine.", title="Notes", scope="Ada")

    st.paper(10, "Ada I", "Rings", "Rings of circles pack well.", decided=12, accepted=True)
    st.read(3, "archive", 1, 1, 13)
    st.read(2, "archive", 1, 2, 13)  # the reviewer's message: not a read
    st.message("archive", 1, 14, "Cy I", "Did you try hexagons?")
    st.paper(14, "Cy I", "Hexagons", "Hexagons, untested.", decided=15, accepted=False)
    st.paper(18, "Bo I", "Rings again", "This extends paper #1 with restarts.", decided=20, accepted=True)

    st.evaluation(0, "System", code="print('baseline')\n", title="Baseline", delivered=1, score=1.0)
    st.evaluation(5, "Ada I", code=SQUARE, title="Square grid", delivered=6, score=2.0)
    st.evaluation(8, "Bo I", code=SQUARE, title="My square", abstract="Like evaluation 2.", delivered=9, score=1.5)
    st.evaluation(25, "Bo I", code=RINGS, title="Rings", abstract="Improves evaluation 2.", delivered=26, score=2.5)
    st.evaluation(27, "Cy I", code=RINGS.replace("n=26", "n=27"), title="Rings, tuned",
                  abstract="Following paper 2.", delivered=28, score=2.4)
    st.evaluation(35, "Ada II", code="print('hello')\n", title="Back to basics",
                  abstract="After evaluation 5 and evaluation 2.", delivered=36, status="failed")

    st.common(40, "Bo I", "Anyone tried restarts?", {"Cy I": 41})
    return st.finish()
