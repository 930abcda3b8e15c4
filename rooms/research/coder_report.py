"""The Coder Report: the sections it must hold, and how the station shows it beside its own score.

The report is the coder's own words, never checked against the attempts: whatever score it
claims, agents read it under a label saying so, after the score the station computed."""

from __future__ import annotations

import re
from typing import Any

from .text import fence

SECTIONS = (
    "Summary",
    "Final Result",
    "Files Changed",
    "Implementation Details",
    "Faithfulness and Confidence",
    "Major Deviations",
    "Final Status",
)
MAX_REPORT_CHARS = 30_000


def missing_sections(report: str) -> list[str]:
    """The required sections the report has no heading line for (a line that starts with the name,
    after any '#', '*' or spaces; case does not matter)."""
    heads = {
        re.sub(r"^[#*\s]+", "", line).rstrip(":* \t").strip().lower() for line in report.splitlines() if line.strip()
    }
    return [name for name in SECTIONS if not any(head.startswith(name.lower()) for head in heads)]


def report_text(texts: Any, report: str | None, end: str | None, attempts: int) -> str:
    """The report as agents read it (result message and `review`), with how the session ended."""
    parts = [texts.render("coder_attempts_made", attempts=attempts)]
    if end in ("turn_limit", "model_failed", "command_failed"):
        parts.append(texts.render(f"coder_ended_{end}"))
    if report:
        parts.append(texts.render("coder_report_label") + "\n" + fence(report, "markdown"))
    else:
        parts.append(texts.render("coder_no_report"))
    return "\n\n".join(p.strip() for p in parts)
