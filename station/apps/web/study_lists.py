"""The lists behind the study page's counts: the acts (edges), the lives and the texts of a window,
filtered by kind (and agent), a page at a time, each row linked to the record it comes from.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pandas as pd

PER_PAGE = 100
RECORD = re.compile(r"(mail|forum|paper|submission|common|evaluation)/(\d+)(?:#(\d+))?$")


def record_href(record: Any, author: Any = None, tick: Any = None) -> str | None:
    """The viewer's page of a study record (see station.study.schema's `record`), or None.

    A Common Room message has no page of its own: its writer's dialogue at its tick shows it."""
    if not isinstance(record, str):
        return None
    if record.startswith("note/"):  # note/LINEAGE/N: lineage notes are shown with their lineage
        lineage = record[5:].rsplit("/", 1)[0]
        return f"/lineages?lineage={quote(lineage, safe='')}" if lineage else None
    found = RECORD.match(record)
    if found is None:
        return None
    room, number, message = found.groups()
    anchor = f"#message-{message}" if message and room in ("mail", "forum") else ""
    if room == "common":
        if not isinstance(author, str) or tick is None or pd.isna(tick):
            return None
        return f"/agents/{quote(author, safe='')}?tick={int(tick)}#tick-{int(tick)}"
    path = {"paper": "papers", "evaluation": "research", "submission": "submissions"}.get(room, room)
    return f"/{path}/{number}{anchor}"


def agent_href(name: Any, session: Any) -> str | None:
    """An agent's page; the reviewer and System (no session) have none."""
    if not isinstance(name, str) or session is None or pd.isna(session):
        return None
    return f"/agents/{quote(name, safe='')}"


def page_of(frame: pd.DataFrame, page: int) -> tuple[pd.DataFrame, int, int]:
    """(the rows of page `page`, the page shown, the number of pages)."""
    pages = max(1, -(-len(frame) // PER_PAGE))
    page = min(max(1, page), pages)
    return frame.iloc[(page - 1) * PER_PAGE : page * PER_PAGE], page, pages


def _text(value: Any) -> str:
    return "" if value is None or (not isinstance(value, str) and pd.isna(value)) else str(value)


def between(frame: pd.DataFrame, first: int, last: int) -> pd.DataFrame:
    """The rows of ticks `first`–`last` (a list may be cut from a wider study's table)."""
    return frame[(frame["tick"] >= first) & (frame["tick"] <= last)]


def edge_rows(edges: pd.DataFrame, first: int, last: int, kind: str, agent: str, page: int) -> dict[str, Any]:
    """The acts of ticks `first`–`last` of `kind` (all: "") done or received by `agent` (all: ""), in tick order."""
    chosen = between(edges, first, last)
    if kind:
        chosen = chosen[chosen["kind"] == kind]
    if agent:
        chosen = chosen[(chosen["source"] == agent) | (chosen["target"] == agent)]
    shown, page, pages = page_of(chosen, page)
    rows = [
        {
            "tick": int(row.tick),
            "kind": row.kind,
            "source": _text(row.source),
            "source_href": agent_href(row.source, row.source_session),
            "target": _text(row.target),
            "target_href": agent_href(row.target, row.target_session),
            "record": _text(row.record),
            "record_href": record_href(row.record, row.source, row.tick),
            "detail": _text(row.detail),
        }
        for row in shown.itertuples(index=False)
    ]
    return {"rows": rows, "total": len(chosen), "page": page, "pages": pages}


def life_rows(lives: pd.DataFrame, first: int, last: int, page: int) -> dict[str, Any]:
    """The lives alive at some tick of `first`–`last`, by session."""
    alive = lives[(lives["birth_tick"] <= last) & (lives["end_tick"].isna() | (lives["end_tick"] >= first))]
    shown, page, pages = page_of(alive, page)
    rows = [
        {
            "agent": _text(row.agent),
            "href": agent_href(row.agent, row.session),
            "lineage": _text(row.lineage),
            "generation": _text(row.generation),
            "kind": _text(row.kind),
            "birth": int(row.birth_tick),
            "end": _text(row.end_tick),
            "cause": _text(row.end_cause),
        }
        for row in shown.itertuples(index=False)
    ]
    return {"rows": rows, "total": len(alive), "page": page, "pages": pages}


def text_rows(texts: pd.DataFrame, first: int, last: int, kind: str, page: int) -> dict[str, Any]:
    """The texts of ticks `first`–`last` of `kind` (all: ""), in tick order, each with its beginning."""
    chosen = between(texts, first, last)
    chosen = chosen[chosen["kind"] == kind] if kind else chosen
    shown, page, pages = page_of(chosen, page)
    rows = [
        {
            "tick": int(row.tick),
            "kind": row.kind,
            "author": _text(row.author),
            "author_href": agent_href(row.author, row.session),
            "record": _text(row.record),
            "record_href": record_href(row.record, row.author, row.tick),
            "title": _text(row.title),
            "start": _text(row.text)[:160],
        }
        for row in shown.itertuples(index=False)
    ]
    return {"rows": rows, "total": len(chosen), "page": page, "pages": pages}
