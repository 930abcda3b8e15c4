"""The Research Counter's events: submissions, their results, and the stagnation watch."""

from __future__ import annotations

from dataclasses import dataclass

from station.core.events import Event, event_kind


@event_kind("evaluation_submitted")
@dataclass(frozen=True)
class EvaluationSubmitted(Event):
    evaluation: int


@event_kind("evaluation_finished")
@dataclass(frozen=True)
class EvaluationFinished(Event):
    evaluation: int
    task: str
    status: str
    score: float | None  # only for a finished evaluation
    version: int  # the stored result version that was delivered


@event_kind("stagnation_tag_progress")
@dataclass(frozen=True)
class StagnationTagProgress(Event):
    task: str
    tag: str | None
    best: list[float]  # the tag's new best ranking key


@event_kind("stagnation_changed")
@dataclass(frozen=True)
class StagnationChanged(Event):
    task: str
    status: str
    tag: str | None
    recipients: int  # agents told
