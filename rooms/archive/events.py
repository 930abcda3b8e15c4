"""The Archive's events: a paper handed in for review, and the review's outcome."""

from __future__ import annotations

from dataclasses import dataclass

from station.core.events import Event, event_kind


@event_kind("paper_submitted")
@dataclass(frozen=True)
class PaperSubmitted(Event):
    submission: int


@event_kind("paper_reviewed")
@dataclass(frozen=True)
class PaperReviewed(Event):
    submission: int
    decision: str  # accepted, rejected, or failed (the review could not be had)
    score: float | None
    paper: int | None  # its number in the Archive, when published
