"""Hooks: watchers of engine events that act through the same Context as rooms."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import StationConfig
from ..context import Hook
from .evaluations import Evaluations
from .grader import TestGrader
from .inactivity import InactivityWarnings
from .maturity import Maturity
from .reviewer import Reviewer
from .stagnation import Stagnation
from .tips import RandomTips

if TYPE_CHECKING:
    from rooms.base import Room


def load_hooks(config: StationConfig, rooms: list["Room"]) -> list[Hook]:
    hooks: list[Hook] = [Maturity(), RandomTips(), InactivityWarnings()]
    if any(room.short == "test" for room in rooms):
        hooks.append(TestGrader())
    if any(room.short == "archive" for room in rooms):
        hooks.append(Reviewer())
    if any(room.short == "research" for room in rooms) and config.stagnation.enabled:
        hooks.append(Stagnation())
    if any(room.short == "research" for room in rooms):
        hooks.append(Evaluations())
    for room in rooms:
        hooks.extend(room.hooks())
    return hooks
