"""Evaluation ids in what agents wrote ("evaluation 58", "eval #12", "evaluations 18, 22 and 31"):
found in plain text, and turned into links in rendered HTML (marked when no such evaluation exists).

One pattern serves both, so the paper that a page says cites an evaluation is the paper whose text
shows that evaluation as a link.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable

from markupsafe import Markup

from rooms.research import views
from rooms.research.views import MENTION as MENTION  # one pattern: the study counts what is linked here
from rooms.research.views import mentioned as mentioned

NUMBER = re.compile(r"\d+")
TAG_OR_TEXT = re.compile(r"(<[^>]*>)")
SKIPPED = ("a", "code", "pre")  # text inside these stays as it is


def existing(db: sqlite3.Connection, ids: Iterable[int]) -> set[int]:
    """Which of these ids are evaluations of this station (the research read model's answer)."""
    return views.existing(db, ids)


def link_mentions(html: str, known: set[int]) -> Markup:
    """`html` (already safe) with each mentioned id a link to its evaluation, or marked as unknown."""
    depth = 0  # inside how many skipped elements
    out = []
    for piece in TAG_OR_TEXT.split(html):
        if piece.startswith("<"):
            name = re.match(r"</?\s*([a-zA-Z0-9]+)", piece)
            if name and name.group(1).lower() in SKIPPED:
                depth += -1 if piece.startswith("</") else 1
            out.append(piece)
        elif depth > 0 or not piece:
            out.append(piece)
        else:
            out.append(MENTION.sub(lambda m: _linked(m, known), piece))
    return Markup("".join(out))


def _linked(match: re.Match, known: set[int]) -> str:
    text, start = match.group(0), match.start(1) - match.start(0)

    def one(number: re.Match) -> str:
        n = int(number.group(0))
        if n in known:
            return f'<a class="ref" href="/research/{n}">{number.group(0)}</a>'
        return f'<span class="missing-ref" title="this station has no evaluation #{n}">{number.group(0)}</span>'

    return text[:start] + NUMBER.sub(one, text[start:])
