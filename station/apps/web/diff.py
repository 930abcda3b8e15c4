"""What a submission built on, and the unified diff of its code against an earlier submission.

"Built on": the earliest evaluation of the same task its abstract names that came before it, or else
the same agent's (session's) previous submission to the task. The diff is rendered line by line,
escaped, with added and removed lines marked.
"""

from __future__ import annotations

import difflib
import sqlite3
from html import escape
from typing import Any

from markupsafe import Markup

from rooms.research.store import leading_evaluations
from station.apps.web import refs
from station.apps.web.data import one, rows
from station.apps.web.render import CONTROL

MAX_DIFF_LINES = 5_000  # of either side; longer code is cut before diffing (a page, not a file dump)


def built_on(db: sqlite3.Connection, ev: dict[str, Any]) -> dict[str, Any] | None:
    """The evaluation `ev` most plausibly built on, with `why` saying how it was chosen, or None."""
    for number in refs.mentioned(ev.get("abstract")):
        if number < ev["id"]:
            found = one(db, "SELECT id, task, author, title, score, status FROM evaluations WHERE id=?", (number,))
            if found and found["task"] == ev["task"]:
                return {**found, "why": "named in its abstract"}
    if ev.get("session") is None:
        return None
    found = one(
        db,
        "SELECT id, task, author, title, score, status FROM evaluations WHERE session=? AND task=? AND id<? "
        "ORDER BY id DESC LIMIT 1",
        (ev["session"], ev["task"], ev["id"]),
    )
    return {**found, "why": "the author's previous submission"} if found else None


def candidates(db: sqlite3.Connection, ev: dict[str, Any], limit: int = 40) -> list[dict[str, Any]]:
    """Earlier submissions to compare with: the author's own, those its abstract names, the task's best."""
    mine = rows(
        db,
        "SELECT id, author, title, score FROM evaluations WHERE session IS ? AND task=? AND id<? ORDER BY id DESC "
        "LIMIT ?",
        (ev.get("session"), ev["task"], ev["id"], limit),
    )
    named = [n for n in refs.mentioned(ev.get("abstract")) if n < ev["id"]][:limit]
    marks = ",".join("?" * len(named)) or "NULL"
    cited = rows(db, f"SELECT id, author, title, score FROM evaluations WHERE id IN ({marks})", tuple(named))
    query = lambda sql, params: db.execute(sql, params).fetchall()  # the research store's query shape
    leading = leading_evaluations(query, "e.task=? AND e.id<?", (ev["task"], ev["id"]), 10, "id, author, title, score")
    best = [dict(zip(("id", "author", "title", "score"), row)) for row in leading]
    seen: dict[int, dict[str, Any]] = {}
    for entry in [*cited, *mine, *best]:
        seen.setdefault(entry["id"], entry)
    return list(seen.values())


def unified(old: str, new: str, old_name: str, new_name: str) -> list[tuple[str, str]]:
    """(kind, line) pairs: kind is "add", "del", "hunk", "file" or "same"."""
    a = old.splitlines()[:MAX_DIFF_LINES]
    b = new.splitlines()[:MAX_DIFF_LINES]
    out = []
    for line in difflib.unified_diff(a, b, old_name, new_name, lineterm="", n=3):
        if line.startswith(("---", "+++")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "same"
        out.append((kind, line))
    return out


def diff_html(lines: list[tuple[str, str]]) -> Markup:
    if not lines:
        return Markup("<p class='empty'>The two submissions have the same code.</p>")
    body = "\n".join(f"<span class='{kind}'>{escape(CONTROL.sub('', line))}</span>" for kind, line in lines)
    return Markup(f"<pre class='diff' id='diff'>{body}</pre>")
