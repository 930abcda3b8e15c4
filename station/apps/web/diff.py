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

from rooms.research import views
from station.apps.web import refs
from station.apps.web.render import CONTROL

MAX_DIFF_LINES = 5_000  # of either side; longer code is cut before diffing (a page, not a file dump)


def built_on(db: sqlite3.Connection, ev: dict[str, Any]) -> dict[str, Any] | None:
    """The evaluation `ev` most plausibly built on, with `why` saying how it was chosen, or None."""
    for number in refs.mentioned(ev.get("abstract")):
        if number < ev["id"]:
            named = views.headlines(db, [number])
            if named and named[0]["task"] == ev["task"]:
                return {**named[0], "why": "named in its abstract"}
    if ev.get("session") is None:
        return None
    previous = views.session_submissions(db, ev["session"], ev["task"], ev["id"], 1)
    return {**previous[0], "why": "the author's previous submission"} if previous else None


def candidates(db: sqlite3.Connection, ev: dict[str, Any], limit: int = 40) -> list[dict[str, Any]]:
    """Earlier submissions to compare with: the author's own, those its abstract names, the task's best."""
    mine = views.session_submissions(db, ev.get("session"), ev["task"], ev["id"], limit)
    named = [n for n in refs.mentioned(ev.get("abstract")) if n < ev["id"]][:limit]
    cited = views.headlines(db, named)
    best = views.leading_before(db, ev["task"], ev["id"], 10)
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
