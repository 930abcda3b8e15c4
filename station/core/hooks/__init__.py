"""Hooks: watchers of engine events that act through the same Context as rooms.

The hooks here belong to no room; a room brings its own through `Room.hooks`.
"""

from __future__ import annotations

from station.core.config import StationConfig
from station.core.context import STATION_HOOKS, Hook
from station.core.hooks import inactivity, maturity, tips  # noqa: F401 - importing registers them
from station.core.room import Room


def load_hooks(config: StationConfig, rooms: list[Room]) -> list[Hook]:
    hooks: list[Hook] = [STATION_HOOKS.get(name)() for name in STATION_HOOKS.names()]
    for room in rooms:
        hooks.extend(room.hooks(config))
    return sorted(hooks, key=lambda hook: hook.order)  # stable: ties keep load order
