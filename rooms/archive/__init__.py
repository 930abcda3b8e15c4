"""The Archive Room as one feature: the room where papers are published, its reviewer, and its surveyor."""

from .room import REVIEWER, ArchiveRoom

__all__ = ["REVIEWER", "ArchiveRoom"]
