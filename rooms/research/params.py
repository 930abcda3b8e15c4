"""YAML parameters of the Research Counter's actions, and the normalisation of their text fields.

The fields are typed `Any` on purpose: the room checks them itself, in the order the spec
gives (research §1.4), so that a submission is told the first thing that is wrong in plain
words instead of a pydantic error list.
"""

from __future__ import annotations

import re
from typing import Any

from station.core.room import Params

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tabs and line breaks are fine in bodies
LINE_BREAK = re.compile(r"[\n\r\x85\u2028\u2029]")
BIDI = re.compile(r"[\u202a-\u202e\u2066-\u2069]")
REQUIRED = ("title", "tags", "abstract", "content")
CODER_REQUIRED = ("title", "tags", "abstract", "instruction")  # research.mode: coder


class SubmitParams(Params):
    title: Any = None
    tags: Any = None
    abstract: Any = None
    content: Any = None
    instruction: Any = None  # coder mode: what the research coder is to implement
    no_debugger: Any = None
    cpu_only: Any = None


class StorageParams(Params):
    content: Any = None  # storage write only


def blank(value: Any) -> bool:
    """Missing or empty: None, a blank string, an empty list."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, tuple)):
        return not value
    return False


def as_text(value: Any) -> str | None:
    """A YAML scalar as text (numbers are taken as written); None for anything else (lists, bytes...)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def normalise_tag(value: str) -> str:
    """One tag as stored and as matched by `filter`: trimmed, lower case, '_' written as '-'."""
    return value.strip().lower().replace("_", "-")


def normalise_tags(value: Any, max_tags: int, max_chars: int) -> tuple[list[str], list[str], str | None]:
    """(tags, warnings, error) for a submission's `tags`: a comma-separated string or a list."""
    if isinstance(value, str):
        items: list[Any] = [value]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        return [], [], "tags must be a comma-separated string or a YAML list of words"
    raw: list[str] = []
    for item in items:
        text = as_text(item)
        if text is None:
            return [], [], "each tag must be a short word or phrase (a list of tags may not contain lists or mappings)"
        raw += text.split(",")
    tags: list[str] = []
    underscores = False
    for item in raw:
        if CONTROL.search(item) or LINE_BREAK.search(item) or BIDI.search(item):
            return [], [], "tags may not contain line breaks or control characters"
        tag = item.strip().lower()
        if not tag:
            continue
        if "_" in tag:
            underscores, tag = True, tag.replace("_", "-")
        if len(tag) > max_chars:
            return [], [], f"the tag '{tag[:40]}' is {len(tag)} characters long; at most {max_chars} are allowed"
        if tag not in tags:
            tags.append(tag)
    if not tags:
        return [], [], "give at least one tag"
    warnings = []
    if underscores:
        warnings.append("'_' in tags was written as '-' (tags use hyphens)")
    if len(tags) > max_tags:
        warnings.append(
            f"{len(tags)} tags were given; only the first {max_tags} were kept (dropped: {', '.join(tags[max_tags:])})"
        )
        tags = tags[:max_tags]
    return tags, warnings, None


def cut_words(text: str, limit: int) -> tuple[str, int]:
    """The text up to its `limit`-th word (layout kept) and its original word count."""
    words = list(re.finditer(r"\S+", text))
    if len(words) <= limit:
        return text, len(words)
    return text[: words[limit - 1].end()], len(words)
