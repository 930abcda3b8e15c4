"""Text helpers for research views and messages: table cells, code fences, clipped logs."""

from __future__ import annotations

import json
import re
from typing import Any

TITLE_CELL_CHARS = 100


def cell(value: Any) -> str:
    return str(value).replace("|", r"\|").replace("\n", " ").replace("\r", " ")


def clip_title(title: str) -> str:
    return title if len(title) <= TITLE_CELL_CHARS else title[: TITLE_CELL_CHARS - 3] + "..."


def fence(text: str, lang: str = "") -> str:
    """A code block that the text itself cannot close."""
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def clip_log(text: str, limit: int) -> str:
    """At most `limit` characters: the head and the tail (where a traceback ends), with a note."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit:,} characters cut here ...]\n{text[-tail:]}"


def json_or(text: Any, default: Any) -> Any:
    """The JSON value stored in `text`, or `default` when it is missing, malformed or of another type."""
    if text is None:
        return default
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return default
    return value if isinstance(value, type(default)) else default
