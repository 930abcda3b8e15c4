"""Hooks: watchers of engine events that act through the same Context as rooms."""
from __future__ import annotations

from ..config import StationConfig
from ..context import Hook
from .grader import TestGrader
from .inactivity import InactivityWarnings
from .maturity import Maturity
from .tips import RandomTips


def load_hooks(config: StationConfig, room_shorts: set[str]) -> list[Hook]:
    hooks: list[Hook] = [Maturity(), RandomTips(), InactivityWarnings()]
    if "test" in room_shorts:
        hooks.append(TestGrader())
    return hooks
