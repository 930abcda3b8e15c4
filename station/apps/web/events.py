"""The overview's event feed: what happened, one human line each, with a link to where it is.

By default only the meaningful kinds (births, ascensions, departures, papers, evaluations,
requests, operator actions...): the turn and tick markers outnumber them a hundred to one.
Texts are plain strings; the template's autoescape and live.js's textContent make them safe.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from station.apps.web.data import has_table

MEANINGFUL = (
    "station_created",
    "agent_spawned",
    "agent_ascended",
    "agent_departed",
    "context_compacted",
    "agents_model_changed",
    "evaluation_submitted",
    "evaluation_finished",
    "paper_submitted",
    "paper_reviewed",
    "test_graded",
    "human_request",
    "suggestion",
    "stagnation_changed",
    "operator_command",
    "operator_pause",
    "operator_alert",
)
CLIP = 80  # agent-written text (titles, problems) is cut to this many characters


def clip(text: Any, size: int = CLIP) -> str:
    text = " ".join(str(text or "").split())  # one line, whatever the agent wrote
    return text if len(text) <= size else text[: size - 1] + "…"


def agent_link(name: str | None) -> str | None:
    return f"/agents/{quote(name, safe='')}" if name else None


def recent(db: sqlite3.Connection, limit: int = 25, after: int = 0, everything: bool = False) -> list[dict[str, Any]]:
    """The newest events after id `after`, newest first, as {id, tick, kind, agent, text, href}.
    The kind filter is in SQL so the rowid walk stops after `limit` matches."""
    where = "id>?"
    args: list[Any] = [after]
    if not everything:  # `+kind`: walk the rowid backwards, not the kind index (all of the kinds, then a sort)
        where += f" AND +kind IN ({','.join('?' * len(MEANINGFUL))})"
        args += MEANINGFUL
    found = db.execute(
        f"SELECT id, tick, kind, agent, payload FROM events WHERE {where} ORDER BY id DESC LIMIT ?", (*args, limit)
    ).fetchall()
    events = [(row[0], row[1], row[2], row[3], payload_of(row[4])) for row in found]
    titles = Titles(db, events)
    return [describe(*event, titles) for event in events]


def payload_of(text: str) -> dict[str, Any]:
    try:
        payload = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return payload if isinstance(payload, dict) else {}


class Titles:
    """Titles of the papers and evaluations the events name, read in one query per table."""

    def __init__(self, db: sqlite3.Connection, events: list[tuple[int, int, str, str | None, dict]]) -> None:
        papers = {p.get("submission") for _, _, k, _, p in events if k.startswith("paper_")}
        runs = {p.get("evaluation") for _, _, k, _, p in events if k.startswith("evaluation_")}
        self.papers: dict[Any, tuple[Any, Any]] = self._read(db, "paper_submissions", "''", papers)
        self.evaluations: dict[Any, tuple[Any, Any]] = self._read(db, "evaluations", "task", runs)

    @staticmethod
    def _read(db: sqlite3.Connection, table: str, task: str, ids: set[Any]) -> dict[Any, tuple[Any, Any]]:
        wanted = [i for i in ids if isinstance(i, int)]
        if not wanted or not has_table(db, table):
            return {}
        marks = ",".join("?" * len(wanted))
        query = f"SELECT id, title, {task} FROM {table} WHERE id IN ({marks})"
        return {row[0]: (row[1], str(row[2])) for row in db.execute(query, wanted)}


def describe(
    id_: int, tick: int, kind: str, agent: str | None, payload: dict[str, Any], titles: Titles
) -> dict[str, Any]:
    writer = WRITERS.get(kind)
    text, href = writer(agent or "someone", payload, titles) if writer else generic(kind, agent)
    return {"id": id_, "tick": tick, "kind": kind, "agent": agent, "text": text, "href": href}


def generic(kind: str, agent: str | None) -> tuple[str, str | None]:
    what = kind.replace("_", " ")
    return (f"{agent}: {what}" if agent else what), agent_link(agent)


Text = tuple[str, str | None]


def spawned(agent: str, p: dict, t: Titles) -> Text:
    instead = f" in place of {p['replaces']}" if p.get("replaces") else ""
    return f"{agent} arrived ({p.get('agent_kind', 'agent')}, {clip(p.get('model'), 40)}){instead}", agent_link(agent)


def ascended(agent: str, p: dict, t: Titles) -> Text:
    return f"{p.get('guest') or 'a guest'} ascended as {agent}", agent_link(agent)


def departed(agent: str, p: dict, t: Titles) -> Text:
    return f"{agent} left: {clip(p.get('reason') or 'unknown reason')}", agent_link(agent)


def compacted(agent: str, p: dict, t: Titles) -> Text:
    first, last = p.get("ticks") or ("?", "?")
    if p.get("failed"):
        return f"{agent}'s context was not compacted: {clip(p['failed'])}", agent_link(agent)
    before, after = p.get("tokens_before", 0), p.get("tokens_after", 0)
    return f"{agent}'s context compacted: ticks {first}-{last}, {before:,} to {after:,} tokens", agent_link(agent)


def model_changed(agent: str, p: dict, t: Titles) -> Text:
    changed = p.get("agents") or []
    return f"operator set {clip(p.get('key'))} to {clip(p.get('model'))} ({len(changed)} agents)", None


def evaluation_submitted(agent: str, p: dict, t: Titles) -> Text:
    number = p.get("evaluation")
    title, task = t.evaluations.get(number, (p.get("title"), p.get("task")))
    named = f" '{clip(title)}'" if title else ""
    to_task = f" to task {task}" if task else ""
    return f"{agent} submitted evaluation #{number}{named}{to_task}", research_link(number)


def evaluation_finished(agent: str, p: dict, t: Titles) -> Text:
    number, score = p.get("evaluation"), p.get("score")
    if p.get("status") == "finished" and isinstance(score, (int, float)):
        outcome = f"scored {score:.4g}"
    else:
        outcome = str(p.get("status") or "ended").replace("_", " ")
    return f"evaluation #{number} {outcome} ({agent})", research_link(number)


def research_link(number: Any) -> str | None:
    return f"/research/{number}" if isinstance(number, int) else None


def paper_submitted(agent: str, p: dict, t: Titles) -> Text:
    title = t.papers.get(p.get("submission"), (p.get("title"), ""))[0]
    return f"{agent} submitted the paper '{clip(title or '?')}' for review", submission_link(p.get("submission"))


def submission_link(number: Any) -> str | None:
    return f"/submissions/{number}" if isinstance(number, int) else None


def paper_reviewed(agent: str, p: dict, t: Titles) -> Text:
    title = t.papers.get(p.get("submission"), (p.get("title"), ""))[0]
    decision, score, number = p.get("decision") or "reviewed", p.get("score"), p.get("paper")
    decision = "review failed" if decision == "failed" else decision
    scored = f" (score {score})" if score is not None else ""
    text = f"{agent}'s paper '{clip(title or '?')}' {clip(decision, 20)}{scored}"
    if decision == "accepted" and isinstance(number, int):
        return text, f"/papers/{number}"
    return text, submission_link(p.get("submission")) or agent_link(agent)


def graded(agent: str, p: dict, t: Titles) -> Text:
    status = {"pass": "passed", "fail": "failed"}.get(str(p.get("status")), clip(p.get("status"), 20))
    return f"{agent} {status} test {clip(p.get('test_id'), 20)}", agent_link(agent)


def human_request(agent: str, p: dict, t: Titles) -> Text:
    return f"{agent} asked the operator: '{clip(p.get('title'))}'", "/operator"


def suggestion(agent: str, p: dict, t: Titles) -> Text:
    return f"{agent} suggested: {clip(p.get('text'))}", agent_link(agent)


def stagnation(agent: str, p: dict, t: Titles) -> Text:
    tag = f" ({clip(p.get('tag'), 40)})" if p.get("tag") else ""
    return f"research on task {p.get('task')}: {clip(p.get('status'), 40)}{tag}", "/research"


def operator_command(agent: str, p: dict, t: Titles) -> Text:
    raw = p.get("command")
    command: dict[str, Any] = raw if isinstance(raw, dict) else {}
    op = command.get("op", "?")
    target = command.get("agent") or command.get("to") or command.get("key") or command.get("request")
    if isinstance(target, dict):  # a spawned agent's spec
        target = target.get("name") or target.get("kind")
    return f"operator: {op}" + (f" {clip(target, 40)}" if target else ""), "/operator"


def operator_pause(agent: str, p: dict, t: Titles) -> Text:
    return "operator paused the station", "/operator"


def operator_alert(agent: str, p: dict, t: Titles) -> Text:
    about = f" ({agent})" if agent != "someone" else ""
    where = "/research/queue" if isinstance(p.get("evaluation"), int) else "/operator"
    return f"alert: {clip(p.get('problem'))}{about}", where


def station_created(agent: str, p: dict, t: Titles) -> Text:
    return "station created", None


WRITERS: dict[str, Callable[[str, dict, Titles], Text]] = {
    "station_created": station_created,
    "agent_spawned": spawned,
    "agent_ascended": ascended,
    "agent_departed": departed,
    "context_compacted": compacted,
    "agents_model_changed": model_changed,
    "evaluation_submitted": evaluation_submitted,
    "evaluation_finished": evaluation_finished,
    "paper_submitted": paper_submitted,
    "paper_reviewed": paper_reviewed,
    "test_graded": graded,
    "human_request": human_request,
    "suggestion": suggestion,
    "stagnation_changed": stagnation,
    "operator_command": operator_command,
    "operator_pause": operator_pause,
    "operator_alert": operator_alert,
}
