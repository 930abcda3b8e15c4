"""The research tables: evaluations (the queue and the leaderboard), their versions, task addenda.

World state only changes inside engine units: the Research Counter inserts a queued
evaluation; the evaluation hook applies a finished one (status, score, logs) in the same
transaction that delivers the author's message, so a result is shown exactly when it has
been sent. `evaluation_runs` is the one exception: the evaluation worker's own
bookkeeping of what is running where (not world state; never read by rooms' logic).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

SYSTEM_AUTHOR = "System"
OPEN_STATES = ("queued",)  # not yet delivered; 'running' is known from evaluation_runs
# scorer_failed: the task's fault; system_failed: the station's (given up after repeated identical system errors)
DONE_STATES = ("finished", "failed", "timed_out", "scorer_failed", "system_failed")

# The one ranking of results (the leaderboard, a task's best, stagnation, the web viewer).
VALID = "(e.status = 'finished' AND e.score IS NOT NULL)"
SORT_KEY_JSON = "CASE WHEN json_valid(e.sort_key) THEN e.sort_key END"  # malformed text counts as no key
MAX_SORT_KEY = 8  # sort-key positions compared in SQL
SUBMITTED_FIRST = "e.tick ASC, e.id ASC"
DELIVERED_FIRST = "COALESCE(e.finished_tick, e.tick) ASC, e.id ASC"
Query = Callable[[str, tuple], list[Any]]  # (sql, params) -> rows


def ranking_order(query: Query, where: str, params: tuple, ties: str = SUBMITTED_FIRST) -> str:
    """ORDER BY over `evaluations e`: valid results first, higher first, then `ties` (the
    leaderboard: the earlier submission; stagnation: the earlier delivery, i.e. whoever reached
    the top first). Sort keys are compared only when every valid row belongs to one task;
    scores of different tasks are compared as numbers."""
    valid_rows = f"FROM evaluations e WHERE {where} AND {VALID}"
    tasks = query(f"SELECT DISTINCT e.task {valid_rows} LIMIT 2", params)
    keys = ["e.score DESC"]
    if len(tasks) == 1:
        length = query(f"SELECT MAX(json_array_length({SORT_KEY_JSON})) {valid_rows}", params)[0][0] or 0
        if length:
            item = f"json_extract({SORT_KEY_JSON}, '$[{{i}}]')"
            keys = [f"COALESCE({item.format(i=0)}, e.score) DESC"]
            keys += [f"{item.format(i=i)} DESC" for i in range(1, min(length, MAX_SORT_KEY))]
    return f"{VALID} DESC, {', '.join(keys)}, {ties}"


def best_evaluation(query: Query, where: str, params: tuple, ties: str = SUBMITTED_FIRST) -> Any:
    """The best valid result among the evaluations `where` selects, or None."""
    order = ranking_order(query, where, params, ties)
    found = query(f"SELECT * FROM evaluations e WHERE {where} AND {VALID} ORDER BY {order} LIMIT 1", params)
    return found[0] if found else None


def leading_evaluations(query: Query, where: str, params: tuple, limit: int, columns: str = "*") -> list[Any]:
    """The `limit` best valid results among the evaluations `where` selects, best first."""
    order = ranking_order(query, where, params)
    return query(
        f"SELECT {columns} FROM evaluations e WHERE {where} AND {VALID} ORDER BY {order} LIMIT ?", (*params, limit)
    )


MIGRATIONS = [
    """
    CREATE TABLE evaluations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: an id is never reused
        task TEXT NOT NULL,                    -- task id ("1", "2", ...)
        author TEXT NOT NULL,                  -- agent name, or 'System' for baselines
        session INTEGER,                       -- the author's session (NULL for System)
        lineage TEXT,                          -- the author's lineage when submitted (NULL: System)
        tick INTEGER NOT NULL,                 -- submission tick
        title TEXT NOT NULL,
        tags TEXT NOT NULL,                    -- JSON list, normalised (lowercase, '-' for '_')
        abstract TEXT NOT NULL,
        code TEXT NOT NULL,
        no_debugger INTEGER NOT NULL DEFAULT 0,
        cpu_only INTEGER NOT NULL DEFAULT 0,
        holds_tick INTEGER NOT NULL DEFAULT 1, -- 0: the tick never waits for it (System baselines)
        status TEXT NOT NULL DEFAULT 'queued', -- queued / finished / failed / timed_out / scorer_failed (v4: system_failed)
        score REAL,                            -- NULL unless finished with success
        sort_key TEXT,                         -- JSON list, compared within one task only
        metrics TEXT,                          -- JSON {name: raw value or null}
        details TEXT,                          -- the evaluator's message
        error TEXT,                            -- one-line error of the reported version
        reported_version INTEGER,              -- 1: the author's code, 2, 3, ...: debugger versions
        stdout TEXT,                           -- logs of the reported version (head and tail kept)
        stderr TEXT,
        finished_tick INTEGER                  -- tick the result was delivered
    );
    CREATE INDEX evaluations_status ON evaluations(status, id);
    CREATE INDEX evaluations_author ON evaluations(author, status);
    CREATE INDEX evaluations_task_score ON evaluations(task, score);
    CREATE INDEX evaluations_lineage ON evaluations(lineage, id);
    CREATE TABLE evaluation_tags (
        evaluation INTEGER NOT NULL REFERENCES evaluations(id),
        tag TEXT NOT NULL,
        PRIMARY KEY (evaluation, tag)
    );
    CREATE INDEX evaluation_tags_tag ON evaluation_tags(tag, evaluation);
    CREATE TABLE evaluation_versions (        -- every run of an evaluation, filled when it is delivered
        evaluation INTEGER NOT NULL REFERENCES evaluations(id),
        version INTEGER NOT NULL,              -- 1: the author's code
        source TEXT NOT NULL,                  -- author / debugger
        code TEXT NOT NULL,
        status TEXT NOT NULL,                  -- ok / error / timeout / system_error / invalid / refused
        score REAL,
        error TEXT,
        input_key TEXT NOT NULL,               -- the recorded input holding the whole result
        PRIMARY KEY (evaluation, version)
    );
    CREATE TABLE evaluation_runs (            -- the evaluation worker's bookkeeping (not world state)
        evaluation INTEGER NOT NULL,
        version INTEGER NOT NULL,
        state TEXT NOT NULL,                   -- running / done / abandoned (its process ended)
        started_at REAL NOT NULL,
        finished_at REAL,
        executor TEXT NOT NULL,
        PRIMARY KEY (evaluation, version)
    );
    CREATE TABLE research_addenda (           -- text appended to a task's spec (Stagnation Protocol II)
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task TEXT NOT NULL,
        tick INTEGER NOT NULL,
        label TEXT NOT NULL,
        text TEXT NOT NULL,
        removed_tick INTEGER
    );
    """,
    # v2: the Research Counter counts and lists one agent's evaluations by session.
    """
    CREATE INDEX evaluations_session ON evaluations(session, status, id);
    """,
    # v3: what a training run last reported (epoch, step), for the status displays.
    """
    ALTER TABLE evaluation_runs ADD COLUMN progress TEXT;
    """,
    # v4: identical system errors of a run in a row, across resumes (worker.SYSTEM_ERROR_LIMIT ends it).
    """
    ALTER TABLE evaluation_runs ADD COLUMN system_errors INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE evaluation_runs ADD COLUMN system_error TEXT;
    """,
    # v5: the latest deliveries (the operator's alerts, a scorer's health) read from an index, not a sort of all.
    """
    CREATE INDEX evaluations_delivered ON evaluations(finished_tick, id);
    """,
    # v6: `station external` (external_evaluation.py): evaluations run again the paper's external way.
    # Not world state: no agent reads it, and the engine never writes it.
    """
    CREATE TABLE external_evaluations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        evaluation INTEGER NOT NULL,           -- the evaluation whose (reported) code was run again
        task TEXT NOT NULL,
        protocol TEXT NOT NULL,                -- what differed from the internal evaluation (one line)
        status TEXT NOT NULL,                  -- finished (every run scored) / failed
        mean REAL,                             -- over the seeds' scores; NULL unless finished
        se REAL,                               -- standard error of the mean; NULL with one seed
        samples TEXT NOT NULL,                 -- JSON list: each seed's score
        failures TEXT NOT NULL,                -- JSON list: one line per run without a score
        metrics TEXT NOT NULL,                 -- JSON {name: mean over runs}
        details TEXT NOT NULL,                 -- the evaluator's messages
        executor TEXT NOT NULL,
        created_at REAL NOT NULL,              -- unix time
        duration_s REAL NOT NULL
    );
    CREATE INDEX external_evaluations_evaluation ON external_evaluations(evaluation, id);
    """,
    # v7: scorings of a run that began and never ended (the station died in them), across resumes:
    # at worker.SCORING_DEATH_LIMIT the result is a charged failure instead of a scoring that kills again.
    """
    ALTER TABLE evaluation_runs ADD COLUMN scorings INTEGER NOT NULL DEFAULT 0;
    """,
    # v8: coder mode (docs/coder.md). An instruction instead of code (the code column then holds the
    # final attempt's code once delivered), the author's view fixed at submission, the coder's report
    # and how its session ended.
    """
    ALTER TABLE evaluations ADD COLUMN instruction TEXT;   -- NULL: a direct submission of code
    ALTER TABLE evaluations ADD COLUMN sees_all INTEGER;   -- coder mode: the author saw every lineage then
    ALTER TABLE evaluations ADD COLUMN coder_report TEXT;  -- the coder's report, its own words
    ALTER TABLE evaluations ADD COLUMN coder_end TEXT;     -- finished / turn_limit / model_failed
    """,
]


def insert_evaluation(
    store: Any,
    *,
    task: str,
    author: str,
    session: int | None,
    lineage: str | None,
    tick: int,
    title: str,
    tags: list[str],
    abstract: str,
    code: str,
    no_debugger: bool = False,
    cpu_only: bool = False,
    holds_tick: bool = True,
    instruction: str | None = None,
    sees_all: bool | None = None,
) -> int:
    """Queue an evaluation; returns its new id. With an `instruction` it is the coder's to implement
    (`code` is then empty until delivery), seen from where `sees_all` says its author stood."""
    cur = store.execute(
        "INSERT INTO evaluations(task, author, session, lineage, tick, title, tags, abstract, code, no_debugger, "
        "cpu_only, holds_tick, instruction, sees_all) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            task,
            author,
            session,
            lineage,
            tick,
            title,
            json.dumps(tags),
            abstract,
            code,
            int(no_debugger),
            int(cpu_only),
            int(holds_tick),
            instruction,
            None if sees_all is None else int(sees_all),
        ),
    )
    number = int(cur.lastrowid)
    for tag in dict.fromkeys(tags):
        store.execute("INSERT INTO evaluation_tags(evaluation, tag) VALUES(?,?)", (number, tag))
    return number


def open_evaluations(store: Any) -> list[Any]:
    return store.all("SELECT * FROM evaluations WHERE status='queued' ORDER BY id")


def running_ids(store: Any) -> set[int]:
    """Evaluations the evaluation worker is running now (runtime bookkeeping)."""
    return {r[0] for r in store.all("SELECT DISTINCT evaluation FROM evaluation_runs WHERE state='running'")}
