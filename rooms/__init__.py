"""The rooms of a station. Every module here is imported, which registers its rooms
(`@register_room`); `load_rooms` builds the enabled ones in the order the Lobby lists them."""

from __future__ import annotations

import importlib
import pkgutil

from station.room import ROOMS, Room


def _import_room_modules() -> None:
    """Import every module and package here, so that each room's `@register_room` runs: a new
    room is a new module (or package) in rooms/, and nothing else lists it."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


_import_room_modules()


def room_classes() -> list[type[Room]]:
    """Every registered room, in Lobby order."""
    return sorted((ROOMS.get(name) for name in ROOMS.names()), key=lambda cls: cls.lobby_order)


def load_rooms(disabled: list[str]) -> list[Room]:
    unknown = sorted(set(disabled) - set(ROOMS.names()))
    if unknown:
        known = ", ".join(cls.short for cls in room_classes())
        raise ValueError(f"rooms.disabled: unknown room(s) {unknown}; known: {known}")
    return [cls() for cls in room_classes() if cls.short not in disabled]
