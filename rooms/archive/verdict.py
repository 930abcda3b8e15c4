"""Reading the archive reviewer's verdict from its reply (spec capsules §7.5): the score, comment,
suggestion and extra fields of its ```yaml block, or, failing that, a score found in the text."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

YAML_OPEN = re.compile(r"```\s*yaml", re.IGNORECASE)
SCORE_TEXT = re.compile(r"(?<![a-z_])score\s*\**\s*:\s*\**\s*(10|[1-9])\b")
LEADING_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


@dataclass
class PaperVerdict:
    score: int
    comment: str | None
    suggestion: str | None
    extra: dict[str, Any]
    status: str  # "success" (from the YAML block) or "parsing_error" (score read from free text)
    decision: str | None = None  # the reviewer's own accept/reject word, if it gave one

    def as_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "comment": self.comment,
            "suggestion": self.suggestion,
            "extra": self.extra,
            "status": self.status,
            "reviewer_decision": self.decision,
        }


def _score(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        found = LEADING_NUMBER.match(str(value))
        if not found:
            return None
        number = float(found.group(1))
    return max(1, min(10, int(number)))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        text = "\n".join(f"- {item}" for item in value)
    else:
        text = str(value)
    return text.strip() or None


def _field(value: Any) -> Any:
    """An extra field: a number when it reads as one, else a string; None when missing."""
    if value is None or isinstance(value, bool):
        return None if value is None else str(value).lower()
    if isinstance(value, (int, float)):
        return value
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() and "." not in text else number


def _yaml_mapping(text: str) -> dict | None:
    """The first ```yaml block (up to the next line holding ```), if it is a mapping."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if YAML_OPEN.search(line)), None)
    if start is None:
        return None
    end = next((j for j in range(start + 1, len(lines)) if "```" in lines[j]), None)
    if end is None:
        return None
    try:
        data = yaml.safe_load("\n".join(lines[start + 1 : end]))
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def parse_paper_verdict(text: str, extra_fields: Iterable[str] = ()) -> PaperVerdict | None:
    """The verdict in a reviewer's reply, or None when it holds no score at all.

    The first ```yaml block is read as a mapping (score clamped to 1-10, comment, suggestion,
    extra fields, an optional `decision`). Without a usable block, the last `score: N` in the
    text is taken (N from 1 to 10) and the verdict is marked `parsing_error`.
    """
    extra_fields = list(extra_fields)
    data = _yaml_mapping(text)
    if data is not None:
        score = _score(data.get("score"))
        if score is not None:
            return PaperVerdict(
                score,
                _text(data.get("comment")),
                _text(data.get("suggestion")),
                {name: _field(data.get(name)) for name in extra_fields},
                "success",
                _text(data.get("decision")),
            )
    found = SCORE_TEXT.findall(text.lower())
    if found:
        return PaperVerdict(int(found[-1]), None, None, {name: None for name in extra_fields}, "parsing_error")
    return None
