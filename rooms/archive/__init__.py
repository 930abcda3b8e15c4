"""The Archive Room as one feature: the room where papers are published, and its reviewer."""

from .room import REVIEWER, ArchiveRoom

__all__ = ["REVIEWER", "ArchiveRoom"]
