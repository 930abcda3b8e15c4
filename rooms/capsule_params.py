"""YAML parameters of the capsule actions, and the checks on their text (limits from the config).

Types are checked by pydantic (a list where a title belongs is an error, a number is taken as
its text); sizes, control characters and empty values are checked here against the station's
`capsules` limits, each with a clear message.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ConfigDict

from rooms.capsule_config import CapsulesConfig
from station.core.context import Context
from station.core.room import Params

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
LINE_BREAK = re.compile(r"[\n\r\x85\u2028\u2029]")  # every character that ends a line
BIDI = re.compile(r"[\u202a-\u202e\u2066-\u2069]")  # direction overrides that disguise a title
TAG_MAX_CHARS = 50


class CapsuleParams(Params):
    model_config = ConfigDict(extra="ignore", coerce_numbers_to_str=True)


class NoteParams(CapsuleParams):
    """Private Memory: a note for the lineage."""

    title: str | None = None
    content: str | None = None
    abstract: str | None = None
    tags: list[str] | str | None = None


class PostParams(NoteParams):
    """Public Memory: a forum thread (the abstract is required by the room)."""


class PaperParams(NoteParams):
    source_private: Any = None


class MailParams(NoteParams):
    recipients: list[str] | str | None = None


class ReplyParams(CapsuleParams):
    content: str
    title: str | None = None


class UpdateParams(CapsuleParams):
    title: str | None = None
    content: str | None = None
    abstract: str | None = None
    tags: list[str] | str | None = None


class ForwardParams(CapsuleParams):
    recipients: list[str] | str


def as_list(value: list[str] | str | None) -> list[str]:
    """A comma-separated string or a list -> trimmed, non-empty strings."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else value
    return [str(item).strip() for item in items if str(item).strip()]


class Limits:
    """The size rules of one room, read from the config."""

    def __init__(self, ctx: Context, max_words: int | None = None) -> None:
        cfg = ctx.config.section(CapsulesConfig)
        self.title_chars = cfg.max_title_chars
        self.abstract_words = cfg.max_abstract_words
        self.words = max_words or cfg.max_message_words
        self.chars = cfg.max_message_chars
        self.tags = cfg.max_tags

    def title(self, value: str | None, *, what: str = "title") -> str | None:
        """Problem with a title, or None. Single line, no control characters, bounded length."""
        if value is None or not value.strip():
            return f"the {what} is empty"
        if LINE_BREAK.search(value.strip()) or CONTROL.search(value) or BIDI.search(value):
            return f"the {what} must be one line of text without control characters"
        if len(value.strip()) > self.title_chars:
            return f"the {what} is {len(value.strip())} characters long; at most {self.title_chars} are allowed"
        return None

    def body(self, value: str, *, what: str = "content", max_words: int | None = None) -> str | None:
        if CONTROL.search(value):
            return f"the {what} contains control characters (only tabs and line breaks are allowed)"
        if len(value) > self.chars:
            return f"the {what} is {len(value):,} characters long; at most {self.chars:,} are allowed"
        words, limit = len(value.split()), max_words or self.words
        if words > limit:
            return f"the {what} has {words:,} words; at most {limit:,} are allowed"
        return None

    def abstract(self, value: str) -> str | None:
        if CONTROL.search(value):
            return "the abstract contains control characters (only tabs and line breaks are allowed)"
        if len(value.split()) > self.abstract_words:
            return f"the abstract has {len(value.split())} words; at most {self.abstract_words} are allowed"
        return None

    def tag_list(self, value: list[str] | str | None) -> tuple[list[str], str | None]:
        tags = as_list(value)
        if len(tags) > self.tags:
            return tags, f"{len(tags)} tags given; at most {self.tags} are allowed"
        for tag in tags:
            if len(tag) > TAG_MAX_CHARS or CONTROL.search(tag) or LINE_BREAK.search(tag):
                return tags, f"tag '{tag[:60]}' must be one short line (at most {TAG_MAX_CHARS} characters)"
        return tags, None
