"""The Test Chamber's events: an entrance test answered, and its grade."""

from __future__ import annotations

from dataclasses import dataclass

from station.core.events import Event, event_kind


@event_kind("test_submitted")
@dataclass(frozen=True)
class EntranceTestSubmitted(Event):
    test_id: str


@event_kind("test_graded")
@dataclass(frozen=True)
class EntranceTestGraded(Event):
    test_id: str
    status: str
