"""The rooms of a station. `load_rooms` builds the enabled ones in the order the Lobby lists them."""
from __future__ import annotations

from .archive import ArchiveRoom
from station.room import Room
from .codex import CodexRoom
from .common import CommonRoom
from .exit import ExitRoom
from .external import ExternalCounter
from .lobby import Lobby
from .mail import MailRoom
from .misc import MiscRoom
from .private_memory import PrivateMemoryRoom
from .public_memory import PublicMemoryRoom
from .reflection import ReflectionChamber
from .research import ResearchCounter
from .test import TestChamber
from .token_management import TokenManagementRoom

# Lobby order; rooms added by later work slot in here.
ROOM_CLASSES: list[type[Room]] = [
    Lobby, CodexRoom, ReflectionChamber, PrivateMemoryRoom, PublicMemoryRoom, ArchiveRoom, ResearchCounter, MailRoom,
    CommonRoom, TestChamber, TokenManagementRoom, ExternalCounter, MiscRoom, ExitRoom,
]


def known_rooms() -> list[str]:
    return [cls.short for cls in ROOM_CLASSES]


def load_rooms(disabled: list[str]) -> list[Room]:
    unknown = sorted(set(disabled) - set(known_rooms()))
    if unknown:
        raise ValueError(f"rooms.disabled: unknown room(s) {unknown}; known: {', '.join(known_rooms())}")
    return [cls() for cls in ROOM_CLASSES if cls.short not in disabled]
