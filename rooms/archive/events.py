"""The Archive's events: a paper handed in for review, the review's outcome, and surveys asked and ended."""

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


@event_kind("survey_requested")
@dataclass(frozen=True)
class SurveyRequested(Event):
    survey: int


@event_kind("survey_ended")
@dataclass(frozen=True)
class SurveyEnded(Event):
    survey: int
    status: str  # delivered (the report was mailed) or failed (turn limit, model failures)
    mail: int | None  # the mail holding the report, when delivered
