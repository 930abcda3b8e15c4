"""Hooks: watchers of engine events that act through the same Context as rooms.

The hooks here belong to no room; a room brings its own through `Room.hooks`.
"""
from __future__ import annotations

from ..config import StationConfig
from ..context import Hook
from ..room import Room
from .inactivity import InactivityWarnings
from .maturity import Maturity
from .tips import RandomTips


def load_hooks(config: StationConfig, rooms: list[Room]) -> list[Hook]:
    hooks: list[Hook] = [Maturity(), RandomTips(), InactivityWarnings()]
    for room in rooms:
        hooks.extend(room.hooks(config))
    return sorted(hooks, key=lambda hook: hook.order)  # stable: ties keep load order
