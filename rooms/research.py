"""Research Counter: read tasks, submit code for evaluation, browse the leaderboard, use storage.

(Skeleton: the room's actions are being written.)
"""
from __future__ import annotations

from .base import Room
from .research_store import MIGRATIONS


class ResearchCounter(Room):
    short, name = "research", "Research Counter"
    guests_allowed = False
    migrations = MIGRATIONS
    migration_component = "research"
