"""Survey requests: the table, the rules of the `survey` action, and what a survey is shown.

What the surveyor may read is fixed when the agent asks: the numbers of the papers then
published and the ids of the evaluation records then delivered are stored with the request,
with the first message it reads. Published papers and delivered records never change, so the
files the worker writes from those numbers, whenever it writes them, are the same, and the
walk of a session depends on the request's row and the recorded inputs alone.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ConfigDict

from rooms.archive.config import ArchiveConfig, SurveyConfig
from rooms.archive.events import SurveyRequested
from rooms.research.config import ResearchConfig
from rooms.research.store import DONE_STATES, SYSTEM_AUTHOR
from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Params
from station.core.store import Store

MIGRATIONS = [
    """
    CREATE TABLE surveys (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tick INTEGER NOT NULL,              -- the request's tick
        agent TEXT NOT NULL,
        session INTEGER NOT NULL,
        lineage TEXT,
        prompt TEXT NOT NULL,               -- the agent's question
        opening TEXT NOT NULL,              -- the surveyor's first message, fixed at the request
        papers TEXT NOT NULL,               -- JSON: the Archive paper numbers it may read
        evaluations TEXT NOT NULL,          -- JSON: the evaluation ids it may read
        brief_evaluations TEXT NOT NULL,    -- JSON: those among them shown without their abstract
        status TEXT NOT NULL DEFAULT 'open',  -- open / delivered / failed
        end_reason TEXT,                    -- the session's end: finished / turn_limit / model_failed
        turns INTEGER,                      -- model calls the session took
        report TEXT,                        -- the report mailed (delivered only)
        mail INTEGER,                       -- its mail number
        finished_tick INTEGER
    );
    CREATE INDEX surveys_status ON surveys(status, id);
    CREATE INDEX surveys_agent ON surveys(agent, status);
    """
]

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
PREVIEW_ABSTRACT_WORDS = 80  # of each paper in the surveyor's first message; it reads the rest in the files


class SurveyParams(Params):
    model_config = ConfigDict(extra="ignore", coerce_numbers_to_str=True)

    prompt: str  # the question; its size and characters are checked by `refusal`


def open_surveys(store: Store) -> list[Any]:
    return store.all("SELECT * FROM surveys WHERE status='open' ORDER BY id")


def survey_row(store: Store, number: int) -> Any:
    return store.one("SELECT * FROM surveys WHERE id=?", (number,))


def shown_papers(row: Any) -> list[int]:
    return [int(n) for n in json.loads(row["papers"])]


def shown_evaluations(row: Any) -> list[int]:
    return [int(n) for n in json.loads(row["evaluations"])]


# -- the request ------------------------------------------------------------------------------
def refusal(ctx: Context, agent: Agent, p: SurveyParams) -> str | None:
    """Why this request cannot be taken, in one clause, or None."""
    cfg = ctx.config.section(ArchiveConfig).survey
    if not cfg.enabled:
        return "this station has no Archive Surveyor"
    if agent.is_guest:
        return "surveys are for recursive agents"
    if not ctx.is_mature(agent):
        return (
            f"surveys are for mature agents (aged {ctx.config.lifecycle.maturity_ticks} ticks or more; "
            f"you are {agent.age(ctx.tick)})"
        )
    return _prompt_problem(p.prompt, cfg) or _busy(ctx, agent) or _empty_archive(ctx)


def _prompt_problem(prompt: str, cfg: SurveyConfig) -> str | None:
    text = prompt.strip()
    if not text:
        return "give your question as a YAML `prompt` (what you want to know about the Archive and the records)"
    if len(text) > cfg.max_prompt_chars:
        return f"the prompt has {len(text)} characters; at most {cfg.max_prompt_chars} are allowed"
    if CONTROL.search(text):
        return "the prompt holds control characters; write plain text"
    return None


def _busy(ctx: Context, agent: Agent) -> str | None:
    active = ctx.store.scalar(
        "SELECT id FROM surveys WHERE agent=? AND status='open' ORDER BY id LIMIT 1", (agent.name,)
    )
    if active is None:
        return None
    return f"your survey #{active} is still being written; one survey at a time (its report comes by mail)"


def _empty_archive(ctx: Context) -> str | None:
    if papers_now(ctx.store):
        return None
    return "the Archive has no published paper yet, so there is nothing to survey"


def papers_now(store: Store) -> list[Any]:
    return store.all(
        "SELECT number, title, author, created_tick, abstract, tags FROM capsules "
        "WHERE room='archive' AND scope='' AND deleted=0 ORDER BY number"
    )


def evaluations_now(ctx: Context, agent: Agent) -> tuple[list[int], list[int]]:
    """(ids of the delivered evaluation records, those among them shown without abstract): every
    record, as a mature agent sees the board; with `research.cross_lineage_review` off, other
    lineages' abstracts are left out, as their full records are closed to the agent."""
    if ctx.room("research") is None:  # no Research Counter: no records
        return [], []
    delivered = ",".join("?" * len(DONE_STATES))
    rows = ctx.store.all(
        f"SELECT id, lineage, author FROM evaluations WHERE status IN ({delivered}) ORDER BY id", DONE_STATES
    )
    ids = [r["id"] for r in rows]
    if ctx.config.section(ResearchConfig).cross_lineage_review:
        return ids, []
    own = [r["id"] for r in rows if r["author"] == SYSTEM_AUTHOR or (agent.lineage and r["lineage"] == agent.lineage)]
    return ids, sorted(set(ids) - set(own))


def request(ctx: Context, agent: Agent, prompt: str) -> int:
    """Store the request with what the surveyor is shown and its first message; returns its number."""
    papers = papers_now(ctx.store)
    evaluations, brief = evaluations_now(ctx, agent)
    cur = ctx.store.execute(
        "INSERT INTO surveys(tick, agent, session, lineage, prompt, opening, papers, evaluations, brief_evaluations)"
        " VALUES(?,?,?,?,?,?,?,?,?)",
        (
            ctx.tick,
            agent.name,
            agent.session,
            agent.lineage,
            prompt,
            opening(ctx, prompt, papers, len(evaluations)),
            json.dumps([r["number"] for r in papers]),
            json.dumps(evaluations),
            json.dumps(brief),
        ),
    )
    number = int(cur.lastrowid or 0)
    ctx.emit(SurveyRequested(number), agent.name)
    return number


def opening(ctx: Context, prompt: str, papers: list[Any], evaluations: int) -> str:
    cfg = ctx.config.section(ArchiveConfig).survey
    preview = "\n".join(
        ctx.texts.render(
            "survey_paper_entry",
            number=r["number"],
            title=r["title"],
            author=r["author"],
            tick=r["created_tick"],
            abstract=_clip_words(r["abstract"] or "", PREVIEW_ABSTRACT_WORDS),
        )
        for r in papers
    )
    task = ctx.task_summary()
    return ctx.texts.render(
        "survey_opening",
        prompt=prompt,
        task=task.strip() if task and task.strip() else ctx.texts.render("survey_no_task"),
        papers=preview,
        paper_count=len(papers),
        evaluation_count=evaluations,
        min_words=cfg.min_words,
        max_words=cfg.max_words,
    )


def _clip_words(text: str, limit: int) -> str:
    words = text.split()
    return " ".join(words[:limit]) + (" …" if len(words) > limit else "")
