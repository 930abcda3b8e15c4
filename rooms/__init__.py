"""The rooms of a station. Importing a room's module registers it (`@register_room`); `load_rooms` builds
the enabled ones in the order the Lobby lists them."""

from __future__ import annotations

from station.room import ROOMS, Room

from . import (  # noqa: F401 - importing a room's module registers it
    archive,
    codex,
    common,
    exit,
    external,
    lobby,
    mail,
    misc,
    private_memory,
    public_memory,
    reflection,
    research,
    test,
    token_management,
)


def room_classes() -> list[type[Room]]:
    """Every registered room, in Lobby order."""
    return sorted((ROOMS.get(name) for name in ROOMS.names()), key=lambda cls: cls.lobby_order)


def load_rooms(disabled: list[str]) -> list[Room]:
    unknown = sorted(set(disabled) - set(ROOMS.names()))
    if unknown:
        known = ", ".join(cls.short for cls in room_classes())
        raise ValueError(f"rooms.disabled: unknown room(s) {unknown}; known: {known}")
    return [cls() for cls in room_classes() if cls.short not in disabled]
