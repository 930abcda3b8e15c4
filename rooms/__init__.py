"""The rooms of a station. Every module here is imported, which registers its rooms
(`@register_room`); `load_rooms` builds the enabled ones in the order the Lobby lists them."""

from __future__ import annotations

import importlib
import pkgutil

from station.core.room import ROOMS, Room


def _import_room_modules() -> None:
    """Import every module and package here, so that each room's `@register_room` runs: a new
    room is a new module (or package) in rooms/, and nothing else lists it."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


_import_room_modules()


def room_classes() -> list[type[Room]]:
    """Every registered room, in Lobby order."""
    return sorted((ROOMS.get(name) for name in ROOMS.names()), key=lambda cls: cls.lobby_order)


# The rooms of every station created before a station recorded its room set (issue 31). A stored
# config without `rooms.enabled` had exactly these (less its `rooms.disabled`), so a room added
# to the code since does not appear in it (its prompts, and so its replay, stay as recorded).
ROOMS_BEFORE_RECORDING = (
    "lobby",
    "codex",
    "reflect",
    "private_memory",
    "public_memory",
    "archive",
    "research",
    "mail",
    "common",
    "test",
    "token_management",
    "external",
    "misc",
    "exit",
)


def every_room(disabled: list[str]) -> list[str]:
    """The room set of a new station: every room this code has, less `disabled`."""
    check_known(disabled, "rooms.disabled")
    return [cls.short for cls in room_classes() if cls.short not in disabled]


def recorded_room_set(enabled: list[str] | None, disabled: list[str]) -> list[str]:
    """The room set a stored config records; one from before the set was recorded: the rooms of that time."""
    names = ROOMS_BEFORE_RECORDING if enabled is None else enabled
    return [short for short in names if short not in disabled]


def load_rooms(names: list[str]) -> list[Room]:
    """The named rooms, built, in Lobby order."""
    check_known(names, "rooms.enabled")
    return [cls() for cls in room_classes() if cls.short in names]


def check_known(names: list[str], key: str) -> None:
    unknown = sorted(set(names) - set(ROOMS.names()))
    if unknown:
        known = ", ".join(cls.short for cls in room_classes())
        raise ValueError(f"{key}: unknown room(s) {unknown}; known: {known}")
