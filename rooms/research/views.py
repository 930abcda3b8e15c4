"""Read models of the Research Counter: the queries of the evaluation tables that the web viewer
and the command line show (one evaluation, the coder's official attempts, the leaderboard and its
plot, what cites what), in plain dicts, lists and numbers. A coder's session itself is read with
station.workers.views.recorded_session under `coder_prefix(N)` (a command back-end's with
recorded_command, its attempts and end with command_attempts and command_end).

Nothing here writes. "Best" is always store.ranking_order's ranking. The callers check that the
tables exist. The connection's row factory is `sqlite3.Row` (the store's and the web's are): the
dicts are made of its rows.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable
from typing import Any, NamedTuple

from station.workers.views import KEY as SESSION_KEY
from station.workers.views import NUMBER as KEY_NUMBER

from .coder import prefix as coder_prefix  # the key prefix of evaluation N's coder session, for the viewer
from .pipeline import run_key
from .store import DONE_STATES, Query, leading_evaluations, ranking_order

Record = dict[str, Any]  # one row: column name -> its SQLite value
Point = tuple[int, int, float, str, str | None]  # (id, delivery tick, score, task, lineage) of a scored evaluation
PARAMETER_LIMIT = 500  # ids bound in one statement: under SQLite's limit on bound parameters
HEADLINE = "id, task, author, title, status, score"
FAILED_STATES = tuple(state for state in DONE_STATES if state != "finished")  # delivered, not succeeded


def _records(db: sqlite3.Connection, sql: str, params: tuple = ()) -> list[Record]:
    """Every row of the query, each as a dict by column name."""
    return [dict(row) for row in db.execute(sql, params)]


def _query(db: sqlite3.Connection) -> Query:
    """The research store's query shape over a connection."""
    return lambda sql, params: db.execute(sql, params).fetchall()


# -- one evaluation -------------------------------------------------------------------------------
def evaluation(db: sqlite3.Connection, evaluation_id: int) -> Record | None:
    """One evaluation's row with its tags and metrics decoded (metrics {} when none), or None."""
    found = _records(db, "SELECT * FROM evaluations WHERE id=?", (evaluation_id,))
    if not found:
        return None
    row = found[0]
    row["tags"] = json.loads(row["tags"])
    row["metrics"] = json.loads(row["metrics"]) if row["metrics"] else {}
    return row


def versions(db: sqlite3.Connection, evaluation_id: int) -> list[Record]:
    """Every run of an evaluation in order: version, source, status and code."""
    return _records(
        db,
        "SELECT version, source, status, code FROM evaluation_versions WHERE evaluation=? ORDER BY version",
        (evaluation_id,),
    )


def reported_result(db: sqlite3.Connection, evaluation_id: int, version: int) -> str | None:
    """The recorded input (JSON text) holding the whole result of one version's run, or None."""
    row = db.execute(
        "SELECT i.payload FROM evaluation_versions v JOIN inputs i ON i.key=v.input_key "
        "WHERE v.evaluation=? AND v.version=?",
        (evaluation_id, version),
    ).fetchone()
    return row[0] if row else None


def certificate_sha256(db: sqlite3.Connection, evaluation_id: int, version: int) -> str | None:
    """The SHA-256 of the certificate kept with one version's result (evaluators/certificate.py), or None."""
    payload = reported_result(db, evaluation_id, version)
    try:
        found = json.loads(payload).get("certificate") if payload else None
    except (ValueError, AttributeError):
        return None
    digest = found.get("sha256") if isinstance(found, dict) else None
    return digest if isinstance(digest, str) else None


def waiting_since(db: sqlite3.Connection, evaluation_id: int) -> float | None:
    """When a queued evaluation last began to wait (wall clock): its submission, i.e. the end of the
    author's turn that submitted it, or the end of its last run (a debugger's version waits again)."""
    at: float | None = db.execute(
        "SELECT MAX(at) FROM (SELECT t.finished_at AS at FROM evaluations e JOIN turns t "
        "ON t.tick=e.tick AND t.session=e.session WHERE e.id=? "
        "UNION ALL SELECT finished_at FROM evaluation_runs WHERE evaluation=?)",
        (evaluation_id, evaluation_id),
    ).fetchone()[0]
    return at


# -- the coder's official attempts (docs/coder.md) ------------------------------------------------
def coder_opening(db: sqlite3.Connection, evaluation_id: int) -> str | None:
    """The first message the research coder got (its task, folders, rules and the instruction), as
    recorded when its session began; None before that, or for a command back-end's session."""
    found = db.execute(
        "SELECT json_extract(payload, '$.text') FROM inputs WHERE key=?", (f"{coder_prefix(evaluation_id)}/opening",)
    ).fetchone()
    return found[0] if found and isinstance(found[0], str) else None


def coder_attempts(
    db: sqlite3.Connection, evaluation_id: int, places: Iterable[tuple[int, int]], *, error_chars: int
) -> dict[tuple[int, int], Record]:
    """Which of these calls of the coder's session, by (turn, call index), became official attempts:
    each -> {"number"} (status None: not run yet) or {"number", "status", "score", "scored", "error":
    the first line of the run's first `error_chars` characters}. The k-th recorded tool result that
    holds the file's code, in turn and call order, is attempt k, run as `eval-run/<N>/<k>`."""
    order = _attempt_places(db, evaluation_id)
    wanted = {place: order[place] for place in places if place in order}
    runs = _attempt_runs(db, evaluation_id, sorted(wanted.values()), error_chars)
    return {place: {"number": k, **runs.get(k, {"status": None})} for place, k in wanted.items()}


def _attempt_places(db: sqlite3.Connection, evaluation_id: int) -> dict[tuple[int, int], int]:
    """(turn, call index) -> attempt number, for each recorded tool result that holds attempt code
    (a range of the inputs' key index: one session's tool results)."""
    prefix = coder_prefix(evaluation_id)
    found = []
    for (key,) in db.execute(
        "SELECT key FROM inputs WHERE key >= ? AND key < ? AND kind='worker_tool' "
        "AND json_type(payload, '$.code') = 'text'",
        (f"{prefix}/tool/", f"{prefix}/tool0"),
    ):
        match = SESSION_KEY.fullmatch(key[len(prefix) + 1 :])
        if match and match.group(3) is not None:
            found.append((int(match.group(2)), int(match.group(3))))
    return {place: k for k, place in enumerate(sorted(found), start=1)}


def _attempt_runs(
    db: sqlite3.Connection, evaluation_id: int, numbers: list[int], error_chars: int
) -> dict[int, Record]:
    """Attempt k -> the station's verdict of its run: status, score, whether it scored, its error's first line."""
    if not numbers:
        return {}
    keys = [run_key(evaluation_id, k) for k in numbers]
    found = db.execute(
        "SELECT key, json_extract(payload, '$.status'), json_extract(payload, '$.score'), "
        "json_extract(payload, '$.success'), substr(json_extract(payload, '$.error'), 1, ?) "
        f"FROM inputs WHERE key IN ({','.join('?' * len(keys))})",
        (error_chars, *keys),
    )
    runs = {}
    for key, status, score, success, error in found:
        scored = status == "ok" and bool(success) and isinstance(score, int | float)
        runs[int(key.rsplit("/", 1)[1])] = {
            "status": status,
            "score": score if scored else None,
            "scored": scored,
            "error": error.splitlines()[0] if isinstance(error, str) and error.strip() else None,
        }
    return runs


# -- a command back-end's session (docs/coder.md "Back-ends") ---------------------------------------
def command_attempts(db: sqlite3.Connection, evaluation_id: int, *, error_chars: int) -> list[Record]:
    """The official attempts of a command back-end's session (`coder/N/attempt/<k>`, at most
    max_attempts), in order: each {"number", "tick", "path"} and the station's verdict of its run as
    coder_attempts gives it (status None: not run yet)."""
    attempted = f"{coder_prefix(evaluation_id)}/attempt/"
    found = sorted(
        (int(key[len(attempted) :]), tick, path)
        for key, tick, path in db.execute(
            "SELECT key, tick, json_extract(payload, '$.path') FROM inputs WHERE key >= ? AND key < ?",
            (attempted, f"{attempted[:-1]}0"),
        )
        if KEY_NUMBER.fullmatch(key[len(attempted) :])
    )
    runs = _attempt_runs(db, evaluation_id, [n for n, _, _ in found], error_chars)
    return [
        {"number": n, "tick": tick, "path": path if isinstance(path, str) else None, **runs.get(n, {"status": None})}
        for n, tick, path in found
    ]


def command_end(db: sqlite3.Connection, evaluation_id: int) -> Record | None:
    """How a command back-end's session ended (`coder/N/end`: "end", "exit_code", "status",
    "output_tail", "report", "report_problem", "missing_sections", "spawns", "calls", "attempts"),
    or None while it has not."""
    row = db.execute("SELECT payload FROM inputs WHERE key=?", (f"{coder_prefix(evaluation_id)}/end",)).fetchone()
    found = json.loads(row[0]) if row else None
    return found if isinstance(found, dict) else None


# -- evaluations by who and what they name --------------------------------------------------------
def headlines(db: sqlite3.Connection, ids: list[int]) -> list[Record]:
    """The headline fields (HEADLINE) of these evaluations that exist, in the database's order."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    return _records(db, f"SELECT {HEADLINE} FROM evaluations WHERE id IN ({marks})", tuple(ids))


def existing(db: sqlite3.Connection, ids: Iterable[int]) -> set[int]:
    """Which of these ids are evaluations (the first PARAMETER_LIMIT ids by number are checked)."""
    wanted = sorted(set(ids))[:PARAMETER_LIMIT]
    if not wanted:
        return set()
    marks = ",".join("?" * len(wanted))
    return {r[0] for r in db.execute(f"SELECT id FROM evaluations WHERE id IN ({marks})", wanted)}


def session_submissions(
    db: sqlite3.Connection, session: int | None, task: str, before: int, limit: int
) -> list[Record]:
    """One session's (None: System's) submissions to a task before evaluation `before`, latest
    first: their headline fields."""
    return _records(
        db,
        f"SELECT {HEADLINE} FROM evaluations WHERE session IS ? AND task=? AND id<? ORDER BY id DESC LIMIT ?",
        (session, task, before, limit),
    )


def leading_before(db: sqlite3.Connection, task: str, before: int, limit: int) -> list[Record]:
    """The `limit` best valid results of a task among the evaluations before `before`, best first:
    their headline fields."""
    found = leading_evaluations(_query(db), "e.task=? AND e.id<?", (task, before), limit, HEADLINE)
    return [dict(zip(HEADLINE.split(", "), row)) for row in found]


def session_evaluations(db: sqlite3.Connection, session: int, limit: int) -> list[Record]:
    """One session's latest evaluations: id, task, title, status, score and tick."""
    return _records(
        db,
        "SELECT id, task, title, status, score, tick FROM evaluations WHERE session=? ORDER BY id DESC LIMIT ?",
        (session, limit),
    )


def session_evaluation_count(db: sqlite3.Connection, session: int) -> int:
    """How many evaluations one session submitted."""
    return int(db.execute("SELECT COUNT(*) FROM evaluations WHERE session=?", (session,)).fetchone()[0])


def later_containing(db: sqlite3.Connection, evaluation_id: int, text: str) -> list[Record]:
    """Evaluations after `evaluation_id` whose abstract contains `text`, by id: id, author, title,
    score and abstract."""
    return _records(
        db,
        "SELECT id, author, title, score, abstract FROM evaluations WHERE id>? AND abstract LIKE ? ORDER BY id",
        (evaluation_id, f"%{text}%"),
    )


def recent_failures(db: sqlite3.Connection, limit: int) -> list[Record]:
    """The latest delivered evaluations that did not succeed (FAILED_STATES), latest first: id, task,
    author, title, status, finished_tick, error and details."""
    marks = ", ".join(f"'{state}'" for state in FAILED_STATES)
    return _records(
        db,
        "SELECT id, task, author, title, status, finished_tick, error, details FROM evaluations "
        f"WHERE status IN ({marks}) ORDER BY finished_tick DESC, id DESC LIMIT ?",
        (limit,),
    )


def delivered_counts(db: sqlite3.Connection) -> dict[str, int]:
    """How many evaluations were delivered in each state (queued ones are not delivered)."""
    return {
        r[0]: r[1]
        for r in db.execute("SELECT status, COUNT(*) FROM evaluations WHERE status != 'queued' GROUP BY status")
    }


# -- the leaderboard ------------------------------------------------------------------------------
# How the leaderboard can be sorted, as SQL over `evaluations e`; "rank" is ranking_order, per filter.
BOARD_SORTS = {"rank": "", "score": "e.score IS NULL, e.score DESC, e.id", "newest": "e.id DESC", "oldest": "e.id"}


def board_where(
    *,
    task: str = "",
    author: str = "",
    lineage: str = "",
    status: str = "",
    tag: str = "",
    first: int | None = None,
    last: int | None = None,
) -> tuple[str, tuple]:
    """The WHERE clause over `evaluations e` (and its parameters) that selects the evaluations of a
    task, author, lineage, status and tag, submitted from tick `first` to `last` (empty or None: any)."""
    clauses: list[str] = ["1"]
    params: list[str | int] = []
    for column, value in (("task", task), ("author", author), ("lineage", lineage), ("status", status)):
        if value:
            clauses.append(f"e.{column}=?")
            params.append(value)
    if tag:
        clauses.append("e.id IN (SELECT evaluation FROM evaluation_tags WHERE tag=?)")
        params.append(tag.lower().replace("_", "-"))  # tags are stored normalised
    if first is not None:
        clauses.append("e.tick>=?")
        params.append(first)
    if last is not None:
        clauses.append("e.tick<=?")
        params.append(last)
    return " AND ".join(clauses), tuple(params)


def board_total(db: sqlite3.Connection, where: str, params: tuple) -> int:
    """How many evaluations `where` (board_where) selects."""
    return int(db.execute(f"SELECT COUNT(*) FROM evaluations e WHERE {where}", params).fetchone()[0])


def board_page(db: sqlite3.Connection, where: str, params: tuple, sort: str, limit: int, offset: int) -> list[Record]:
    """One page of the evaluations `where` selects in a BOARD_SORTS order: their leaderboard fields."""
    order = BOARD_SORTS[sort] or ranking_order(_query(db), where, params)
    return _records(
        db,
        "SELECT e.id, e.task, e.author, e.lineage, e.tick, e.title, e.tags, e.status, e.score, e.finished_tick "
        f"FROM evaluations e WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?",
        (*params, limit, offset),
    )


def board_choices(db: sqlite3.Connection, *, recent: int, count: int, tags: int) -> dict[str, list[str]]:
    """The values the leaderboard's filters can take: every task, the `count` authors and lineages
    who submitted among the `recent` latest evaluations, and the `tags` most used tags."""
    column = lambda sql: [r[0] for r in db.execute(sql, (recent, count))]  # noqa: E731
    latest = "(SELECT author, lineage FROM evaluations ORDER BY id DESC LIMIT ?1)"
    return {
        "task": [
            r[0] for r in db.execute("SELECT DISTINCT task FROM evaluations ORDER BY CAST(task AS INTEGER), task")
        ],
        "author": column(f"SELECT author FROM (SELECT DISTINCT author FROM {latest} LIMIT ?2) ORDER BY 1"),
        "lineage": column(
            f"SELECT lineage FROM (SELECT DISTINCT lineage FROM {latest} WHERE lineage IS NOT NULL LIMIT ?2) ORDER BY 1"
        ),
        "tag": [
            r[0]
            for r in db.execute(
                "SELECT tag FROM evaluation_tags GROUP BY tag ORDER BY COUNT(*) DESC, tag LIMIT ?", (tags,)
            )
        ],
    }


def delivery_mark(db: sqlite3.Connection) -> tuple[int | None, int | None, int]:
    """What changes whenever a plot point may: (the latest id, the latest delivery tick, how many
    were delivered); each an index lookup."""
    latest, delivered_tick, delivered = db.execute(
        "SELECT (SELECT MAX(id) FROM evaluations), (SELECT MAX(finished_tick) FROM evaluations), "
        "(SELECT COUNT(*) FROM evaluations WHERE finished_tick IS NOT NULL)"
    ).fetchone()
    return latest, delivered_tick, delivered


def scored_points(db: sqlite3.Connection, where: str, params: tuple) -> list[Point]:
    """The scored evaluations `where` selects, in delivery order (a queued one at its submission tick)."""
    return [
        (row[0], row[1], row[2], row[3], row[4])
        for row in db.execute(
            "SELECT e.id, COALESCE(e.finished_tick, e.tick) AS tick, e.score, e.task, e.lineage "
            f"FROM evaluations e WHERE e.score IS NOT NULL AND {where} ORDER BY 2, 1",
            params,
        )
    ]


def authors_and_titles(db: sqlite3.Connection, ids: list[int]) -> dict[int, Record]:
    """{id: {"author", "title"}} of these evaluations."""
    found: dict[int, Record] = {}
    for start in range(0, len(ids), PARAMETER_LIMIT):
        part = ids[start : start + PARAMETER_LIMIT]
        marks = ",".join("?" * len(part))
        for r in db.execute(f"SELECT id, author, title FROM evaluations WHERE id IN ({marks})", part):
            found[r[0]] = {"author": r[1], "title": r[2]}
    return found


# -- the external evaluation (`station external`) ---------------------------------------------------
def external_results(db: sqlite3.Connection, evaluation_id: int | None = None, limit: int = 100) -> list[Record]:
    """External evaluations, newest first (of one evaluation when given), each with the internal
    result it re-ran (title, author, internal score) and its JSON columns decoded."""
    where, params = ("WHERE x.evaluation = ?", (evaluation_id,)) if evaluation_id is not None else ("", ())
    rows = _records(
        db,
        "SELECT x.*, e.title, e.author, e.score AS internal FROM external_evaluations x "
        f"LEFT JOIN evaluations e ON e.id = x.evaluation {where} ORDER BY x.id DESC LIMIT ?",
        (*params, limit),
    )
    for row in rows:
        for column in ("samples", "failures", "metrics"):
            row[column] = json.loads(row[column])
    return rows


# "evaluation 58", "Evaluation ID 58", "eval #58", "evaluations 18, 22 and 31", "evaluation IDs 4 & 5":
# how a text names evaluations (the web links them, the study counts them as citations).
MENTION = re.compile(
    r"\b(?:evaluations?|evals?)(?:\s+ids?)?\s*[#:]?\s*(\d{1,9}(?:\s*(?:,|and|&|or)\s*#?\d{1,9})*)\b", re.IGNORECASE
)
_NUMBER = re.compile(r"\d+")


def mentioned(text: str | None) -> list[int]:
    """Evaluation ids the text names, in order of first mention."""
    found: dict[int, None] = {}
    for match in MENTION.finditer(text or ""):
        for number in _NUMBER.findall(match.group(1)):
            found.setdefault(int(number), None)
    return list(found)


class EvaluationRow(NamedTuple):
    """One evaluation's fields that say who built what on what, and how it scored."""

    id: int
    task: str
    author: str
    session: int | None
    lineage: str | None
    tick: int
    finished_tick: int | None
    status: str
    score: float | None
    title: str
    abstract: str
    code: str


_ROW = "id, task, author, session, lineage, tick, finished_tick, status, score, title, abstract, code"


def evaluation_rows(db: sqlite3.Connection, first: int | None = None, last: int | None = None) -> list[tuple[Any, ...]]:
    """Every evaluation (baselines too) submitted from tick `first` to `last` (default all), by id, with
    its code: plain tuples in EvaluationRow's field order."""
    if first is None and last is None:
        return db.execute(f"SELECT {_ROW} FROM evaluations ORDER BY id").fetchall()
    span = (-1 if first is None else first, 2**62 if last is None else last)
    return db.execute(f"SELECT {_ROW} FROM evaluations WHERE tick BETWEEN ? AND ? ORDER BY id", span).fetchall()


def evaluation_rows_of(db: sqlite3.Connection, ids: Iterable[int]) -> list[tuple[Any, ...]]:
    """These evaluations' rows (EvaluationRow's fields; unknown ids are left out), by id."""
    wanted = sorted(set(ids))
    rows: list[tuple[Any, ...]] = []
    for at in range(0, len(wanted), PARAMETER_LIMIT):
        part = wanted[at : at + PARAMETER_LIMIT]
        marks = ",".join("?" * len(part))
        rows += db.execute(f"SELECT {_ROW} FROM evaluations WHERE id IN ({marks}) ORDER BY id", part).fetchall()
    return sorted(rows)


def delivered_rows(
    db: sqlite3.Connection, task: str, first: int, last: int, latest_before: int
) -> list[tuple[Any, ...]]:
    """The task's evaluations delivered from tick `first` to `last`, and the `latest_before` latest ones
    delivered before `first`, by delivery (tick, then id): EvaluationRow's fields. (+task: walk the
    delivery index, which stops at the window, not the task's, which holds every one of its rows.)"""
    before = db.execute(
        f"SELECT {_ROW} FROM evaluations WHERE +task=? AND finished_tick < ? "
        "ORDER BY finished_tick DESC, id DESC LIMIT ?",
        (task, first, latest_before),
    ).fetchall()
    during = db.execute(
        f"SELECT {_ROW} FROM evaluations WHERE +task=? AND finished_tick BETWEEN ? AND ? ORDER BY finished_tick, id",
        (task, first, last),
    ).fetchall()
    return before[::-1] + during


def best_scores_before(db: sqlite3.Connection, tick: int) -> list[tuple[Any, ...]]:
    """The best score delivered before `tick` per task, lineage, session and author:
    (task, lineage, session, author, score) tuples."""
    return db.execute(
        "SELECT task, lineage, session, author, MAX(score) FROM evaluations "
        "WHERE finished_tick < ? AND score IS NOT NULL GROUP BY task, lineage, session, author",
        (tick,),
    ).fetchall()


def scored_rows(db: sqlite3.Connection, first: int, last: int) -> list[tuple[Any, ...]]:
    """The evaluations delivered with a score from tick `first` to `last`, by id:
    (id, task, author, session, lineage, finished_tick, score) tuples."""
    return db.execute(
        "SELECT id, task, author, session, lineage, finished_tick, score "
        "FROM evaluations WHERE finished_tick BETWEEN ? AND ? AND score IS NOT NULL ORDER BY id",
        (first, last),
    ).fetchall()
