"""Read-only queries behind the web pages, plain dicts out: SQL over the core's tables here, the
rooms' tables through the rooms' read models (rooms.capsule_views, rooms.archive.views, rooms.research.views).

Every list is bounded (pages, limits), so a page of a 5,000-tick station reads only what it
shows. Nothing here writes to the world.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from rooms import capsule_views
from rooms.archive import views as archive_views
from rooms.research import states
from rooms.research import views as research_views
from station.apps.web.refs import mentioned
from station.core.agents import Agent, agent_summaries

TURNS_PER_PAGE = 20
AGENTS_PER_PAGE = 100
OVERVIEW_AGENTS = 50  # active agents listed on the overview (all of them: the agents index, paged)
LINEAGES_PER_PAGE = 50
OPERATOR_NAMES = 100  # active agents the operator's forms suggest (any other can be typed)
GENERATIONS_SHOWN = 12  # per lineage on the lineage page (the latest ones)
REVIEWER_NAME = "Archive Review System"


def rows(db: sqlite3.Connection, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
    return [dict(r) for r in db.execute(sql, params).fetchall()]


def one(db: sqlite3.Connection, sql: str, params: tuple = ()) -> dict[str, Any] | None:
    row = db.execute(sql, params).fetchone()
    return dict(row) if row else None


def has_table(db: sqlite3.Connection, name: str) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None


def meta(db: sqlite3.Connection, key: str, default: Any = None) -> Any:
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return json.loads(row[0]) if row else default


class ReadStore:
    """The reading methods of station.store.Store over the web's read-only connection, for the
    modules written against a Store (rooms.research.states)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def all(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        return self.db.execute(sql, params).fetchall()

    def one(self, sql: str, params: tuple = ()) -> sqlite3.Row | None:
        return self.db.execute(sql, params).fetchone()

    def scalar(self, sql: str, params: tuple = ()) -> Any:
        row = self.db.execute(sql, params).fetchone()
        return row[0] if row else None

    def get_meta(self, key: str, default: Any = None) -> Any:
        return meta(self.db, key, default)

    def get_input(self, key: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT payload FROM inputs WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None


# -- agents ---------------------------------------------------------------------------------
def agent(db: sqlite3.Connection, name: str) -> Agent | None:
    row = db.execute("SELECT data FROM agents WHERE name=?", (name,)).fetchone()
    return Agent.from_json(row[0]) if row else None


AGENT_STATES = ("active", "ascended", "ended")
AGENT_KINDS = ("guest", "recursive")


def agent_filter(lineage: str, state: str, kind: str) -> tuple[str, tuple]:
    """The agents index's WHERE clause for its filters (unknown values are ignored)."""
    clauses, params = ["1"], []
    for column, value, allowed in (
        ("lineage", lineage, None),
        ("state", state, AGENT_STATES),
        ("kind", kind, AGENT_KINDS),
    ):
        if value and (allowed is None or value in allowed):
            clauses.append(f"{column}=?")
            params.append(value[:200])
    return " AND ".join(clauses), tuple(params)


def recent_lineages(db: sqlite3.Connection, count: int = 100, among: int = 2_000) -> list[str]:
    """The lineages of the latest agents (`count` of them, by name), for a filter's choices: a long
    station has thousands (any other is chosen from its own pages)."""
    return [
        r[0]
        for r in db.execute(
            "SELECT lineage FROM (SELECT DISTINCT lineage FROM (SELECT lineage FROM agents WHERE lineage IS NOT NULL "
            "ORDER BY position DESC LIMIT ?) LIMIT ?) ORDER BY 1",
            (among, count),
        )
    ]


SHOWN_CHARS = 30_000  # of one prompt, reply or thinking on a dialogue page; the whole text is a link away
LONG_PARTS = ("prompt", "reply", "thinking")
# Long texts are cut inside SQLite, so a page of 20 turns never loads (or sends) more than it shows.
_TURN_FIELDS = ", ".join(
    [
        "id",
        "tick",
        "session",
        "agent",
        "room",
        "actions",
        "internal",
        "context_tokens",
        "input_tokens",
        "cached_input_tokens",
        "output_tokens",
        "reasoning_tokens",
        "latency_s",
        "cost_usd",
        "finish_reason",
    ]
    + [f"substr({c}, 1, {SHOWN_CHARS}) AS {c}, length({c}) AS {c}_chars" for c in LONG_PARTS]
)


def turn_text(db: sqlite3.Connection, session: int, tick: int, part: str) -> str | None:
    """The whole prompt, reply or thinking of one turn (None: no such turn or part)."""
    if part not in LONG_PARTS:
        return None
    row = db.execute(f"SELECT {part} FROM turns WHERE session=? AND tick=?", (session, tick)).fetchone()
    return None if row is None else row[0] or ""


def dialogue_page(db: sqlite3.Connection, session: int, page: int) -> tuple[list[dict[str, Any]], int]:
    """One page of a session's turns (oldest first) and the number of pages."""
    total = db.execute("SELECT COUNT(*) FROM turns WHERE session=?", (session,)).fetchone()[0]
    pages = max(1, -(-total // TURNS_PER_PAGE))
    page = min(max(1, page), pages)
    turns = rows(
        db,
        f"SELECT {_TURN_FIELDS} FROM turns WHERE session=? ORDER BY tick LIMIT ? OFFSET ?",
        (session, TURNS_PER_PAGE, (page - 1) * TURNS_PER_PAGE),
    )
    for turn in turns:
        _unpack(turn)
    return turns, pages


def turns_after(db: sqlite3.Connection, session: int, tick: int, limit: int = TURNS_PER_PAGE) -> list[dict[str, Any]]:
    turns = rows(
        db, f"SELECT {_TURN_FIELDS} FROM turns WHERE session=? AND tick>? ORDER BY tick LIMIT ?", (session, tick, limit)
    )
    for turn in turns:
        _unpack(turn)
    return turns


def _unpack(turn: dict[str, Any]) -> None:
    actions = json.loads(turn["actions"])
    turn["parsed"] = actions.get("parsed", [])
    turn["history"] = actions.get("history", [])
    turn["steps"] = json.loads(turn["internal"])


def page_of_tick(db: sqlite3.Connection, session: int, tick: int) -> int:
    before = db.execute("SELECT COUNT(*) FROM turns WHERE session=? AND tick<?", (session, tick)).fetchone()[0]
    return before // TURNS_PER_PAGE + 1


# -- the overview -----------------------------------------------------------------------------
def pending_reviews(db: sqlite3.Connection) -> int:
    if not has_table(db, "paper_submissions"):
        return 0
    return archive_views.pending_count(db)


# The overview warns when more than this share of the recent delivered evaluations failed (and
# there are enough of them to judge by), and when a queued evaluation of a running station has
# waited this many times its task's time limit: a run takes at most that long, so slots free up.
FAILURE_SHARE, FAILURE_MIN_DELIVERED = 0.5, 5
QUEUE_PATIENCE = 2


def evaluation_watch(
    db: sqlite3.Connection,
    *,
    live: bool,
    timeouts: dict[str, float],
    run_started: float | None,
    now: float | None = None,
) -> dict[str, Any]:
    """The open evaluations in their honest states (queued / running / undelivered) and warnings:
    many recent failures, a run past its task's time limit, a long wait in a running station's queue.
    `timeouts`: each task's time limit in seconds; `run_started`: when the current run began (None:
    the station is not running)."""
    store, now = ReadStore(db), time.time() if now is None else now
    found = states.open_evaluations(store, live=live, now=now)
    warnings: list[dict[str, Any]] = []
    failed, delivered = states.recent_failure_rate(store)
    if delivered >= FAILURE_MIN_DELIVERED and failed > delivered * FAILURE_SHARE:
        warnings.append({"kind": "failures", "failed": failed, "delivered": delivered})
    broken = states.recent_scorer_failures(store)
    if broken:
        warnings.append({"kind": "scorer", "count": len(broken), **broken[0]})
    given_up = states.recent_system_failures(store)
    if given_up:
        warnings.append({"kind": "system", "count": len(given_up), **given_up[0]})
    for e in found:
        limit = timeouts.get(e.task)
        if limit is None:
            continue
        if e.state == "running" and (e.elapsed_s or 0.0) > limit:
            warnings.append({"kind": "overdue", "id": e.id, "for_s": e.elapsed_s, "limit_s": limit})
        elif e.state == "queued" and run_started is not None:
            waited = now - max(run_started, research_views.waiting_since(db, e.id) or 0.0)
            if waited > QUEUE_PATIENCE * limit:
                warnings.append({"kind": "waiting", "id": e.id, "for_s": waited, "limit_s": limit})
    return {"open": found, "warnings": warnings}


# -- papers and threads ---------------------------------------------------------------------
def papers(db: sqlite3.Connection) -> list[dict[str, Any]]:
    if not has_table(db, "capsules"):
        return []
    found = archive_views.published_papers(db, 500)
    for p in found:
        p["tags"] = json.loads(p["tags"])
    return found


def capsule(db: sqlite3.Connection, room: str, number: int, scope: str = "") -> dict[str, Any] | None:
    if not has_table(db, "capsules"):
        return None
    found = capsule_views.find_capsule(db, room, number, scope)
    if found is None:
        return None
    found["tags"] = json.loads(found["tags"])
    found["recipients"] = json.loads(found["recipients"])
    found["messages"] = capsule_views.messages(db, found["id"])
    return found


THREAD_SORTS = capsule_views.THREAD_SORTS


def threads(
    db: sqlite3.Connection, room: str, limit: int = 200, *, writer: str = "", sort: str = "recent"
) -> list[dict[str, Any]]:
    """A room's threads; `writer`: only those this agent wrote in (or, for mail, was sent)."""
    if not has_table(db, "capsules"):
        return []
    return capsule_views.room_threads(db, room, limit, writer=writer, sort=sort)


# -- research --------------------------------------------------------------------------------
def evaluation(db: sqlite3.Connection, evaluation_id: int) -> dict[str, Any] | None:
    if not has_table(db, "evaluations"):
        return None
    found = research_views.evaluation(db, evaluation_id)
    if found is None:
        return None
    found["versions"] = research_views.versions(db, evaluation_id) if has_table(db, "evaluation_versions") else []
    version = found.get("reported_version")
    found["certificate"] = research_views.certificate_sha256(db, evaluation_id, version) if version else None
    return found


def external_results(db: sqlite3.Connection, evaluation_id: int | None = None) -> list[dict[str, Any]]:
    """`station external`'s results, newest first ([] for a station that never ran it)."""
    if not has_table(db, "external_evaluations"):
        return []
    return research_views.external_results(db, evaluation_id)


# -- lineages ----------------------------------------------------------------------------------
def lineage_page(db: sqlite3.Connection, lineage: str) -> int:
    """The page of the lineages index that shows `lineage` (1 when there is no such lineage)."""
    founded = db.execute("SELECT MIN(position) FROM agents WHERE lineage=?", (lineage,)).fetchone()[0]
    if founded is None:
        return 1
    before = db.execute(
        "SELECT COUNT(*) FROM (SELECT lineage, MIN(position) AS p FROM agents WHERE lineage IS NOT NULL "
        "GROUP BY lineage) WHERE p < ? OR (p = ? AND lineage < ?)",
        (founded, founded, lineage),
    ).fetchone()[0]
    return before // LINEAGES_PER_PAGE + 1


def lineage_tree(db: sqlite3.Connection, tick: int, page: int = 1) -> tuple[list[dict[str, Any]], int, int]:
    """One page of lineages, in the order they were founded (LINEAGES_PER_PAGE a page), each with its
    latest generations in order, each with the guest it grew from and its life; and the page shown
    and the number of pages."""
    total = db.execute("SELECT COUNT(DISTINCT lineage) FROM agents WHERE lineage IS NOT NULL").fetchone()[0]
    pages = max(1, -(-total // LINEAGES_PER_PAGE))
    page = min(max(1, page), pages)
    names = [
        r[0]
        for r in db.execute(
            "SELECT lineage FROM agents WHERE lineage IS NOT NULL GROUP BY lineage ORDER BY MIN(position), lineage "
            "LIMIT ? OFFSET ?",
            (LINEAGES_PER_PAGE, (page - 1) * LINEAGES_PER_PAGE),
        )
    ]
    marks = ",".join("?" * len(names))
    members = agent_summaries(db, f"lineage IN ({marks})", tuple(names)) if names else []
    sessions = sorted({a["session"] for a in members})
    guests = (
        agent_summaries(  # the guests these generations grew from: same session, kind guest
            db, f"kind='guest' AND session IN ({','.join('?' * len(sessions))})", tuple(sessions)
        )
        if sessions
        else []
    )
    grew_from = {a["ascended_to"]: a for a in guests if a["ascended_to"]}
    lineages: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for a in members:
        guest = grew_from.get(a["name"])
        born = guest["birth_tick"] if guest else a["birth_tick"]
        lineages[a["lineage"]].append(
            {
                "name": a["name"],
                "generation": a["generation"] or 0,
                "guest": guest["name"] if guest else None,
                "born": born,
                "ascended": a["ascend_tick"],
                "ended": a["exit_tick"],
                "end": a["exit_tick"] or tick,
                "reason": a["exit_reason"],
                "active": a["state"] == "active",
                "model": a["model_name"],
            }
        )
    tree = []
    for name in names:
        generations = sorted(lineages[name], key=lambda m: m["generation"])
        tree.append(
            {
                "name": name,
                "members": generations[-GENERATIONS_SHOWN:],
                "earlier": max(0, len(generations) - GENERATIONS_SHOWN),
            }
        )
    return tree, page, pages


# -- what links to what -------------------------------------------------------------------------
LISTED = 50  # of an agent's evaluations, papers or threads on its page (the rest a filter away)


def agent_works(db: sqlite3.Connection, who: Agent) -> dict[str, Any]:
    """What one life (a guest and its ascended self share it) produced: evaluations, paper
    submissions, threads written in, mail, and its neighbours in the lineage."""
    session = who.session
    names = [r[0] for r in db.execute("SELECT name FROM agents WHERE session=? ORDER BY position, name", (session,))]
    works: dict[str, Any] = {"names": names, "evaluations": [], "submissions": [], "threads": [], "mail": []}
    if has_table(db, "evaluations"):
        works["evaluations"] = research_views.session_evaluations(db, session, LISTED)
        works["evaluation_count"] = research_views.session_evaluation_count(db, session)
    if has_table(db, "paper_submissions"):
        works["submissions"] = archive_views.submissions_of_session(db, session, LISTED)
    if has_table(db, "capsules"):
        for key, room in (("threads", "public_memory"), ("mail", "mail")):
            works[key] = capsule_views.threads_written(db, session, room, LISTED)
    works["lineage"] = lineage_neighbours(db, who)
    return works


def lineage_neighbours(db: sqlite3.Connection, who: Agent) -> dict[str, str | None]:
    """The previous and next generation's agent names of `who`'s lineage (None where there is none)."""
    if not who.lineage or who.generation is None:
        return {"previous": None, "next": None}

    def at(generation: int) -> str | None:
        row = db.execute(
            "SELECT name FROM agents WHERE lineage=? AND json_extract(data, '$.generation')=? LIMIT 1",
            (who.lineage, generation),
        ).fetchone()
        return row[0] if row else None

    return {"previous": at(who.generation - 1), "next": at(who.generation + 1)}


def citing_papers(db: sqlite3.Connection, evaluation_id: int) -> list[dict[str, Any]]:
    """Published papers whose text names this evaluation (as the paper page links it)."""
    if not has_table(db, "capsules"):
        return []
    found = archive_views.papers_containing(db, str(evaluation_id))
    papers: dict[int, dict[str, Any]] = {}
    for p in found:
        if evaluation_id in mentioned(p.pop("content")):
            papers.setdefault(p["number"], p)
    return list(papers.values())


def later_work(db: sqlite3.Connection, evaluation_id: int, limit: int = 20) -> list[dict[str, Any]]:
    """Later evaluations whose abstract names this one (the work that says it built on it)."""
    found = research_views.later_containing(db, evaluation_id, str(evaluation_id))
    return [e for e in found if evaluation_id in mentioned(e.pop("abstract"))][:limit]


def figure(db: sqlite3.Connection, ev: dict[str, Any]) -> Any:
    """What the task's evaluator gave the viewer to draw for the reported run (None: nothing)."""
    version = ev.get("reported_version")
    if not version or not has_table(db, "evaluation_versions"):
        return None
    payload = research_views.reported_result(db, ev["id"], version)
    if payload is None:
        return None
    try:
        return json.loads(payload).get("figure")
    except (ValueError, AttributeError):
        return None


def submissions(db: sqlite3.Connection, status: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
    """Paper submissions, newest first (published or not), optionally of one status."""
    if not has_table(db, "paper_submissions"):
        return []
    return archive_views.submissions(db, status, limit)


def submission_counts(db: sqlite3.Connection) -> dict[str, int]:
    if not has_table(db, "paper_submissions"):
        return {}
    return archive_views.status_counts(db)


def submission(db: sqlite3.Connection, sid: int) -> dict[str, Any] | None:
    if not has_table(db, "paper_submissions"):
        return None
    found = archive_views.submission(db, sid)
    if found:
        found["tags"] = json.loads(found["tags"] or "[]")
    return found


def recent_failures(db: sqlite3.Connection, limit: int = 20) -> list[dict[str, Any]]:
    """The latest delivered evaluations that did not succeed, each with the first line of its cause."""
    if not has_table(db, "evaluations"):
        return []
    found = research_views.recent_failures(db, limit)
    for e in found:
        cause = (e.pop("error") or e.pop("details") or "").strip()
        e.pop("details", None)
        e["cause"] = cause.split("\n")[0][:300] or e["status"]
    return found


def submission_of_paper(db: sqlite3.Connection, number: int) -> int | None:
    if not has_table(db, "paper_submissions"):
        return None
    return archive_views.first_submission_of_paper(db, number)


def cited_evaluations(db: sqlite3.Connection, text: str) -> list[dict[str, Any]]:
    """The evaluations a text names, in order, each with its headline (None fields: no such evaluation)."""
    ids = mentioned(text)[:100]
    if not ids or not has_table(db, "evaluations"):
        return [{"id": n, "title": None} for n in ids]
    found = {r["id"]: r for r in research_views.headlines(db, ids)}
    return [found.get(n, {"id": n, "title": None}) for n in ids]
