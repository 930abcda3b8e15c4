"""The Test Chamber as one feature: the room where guests take the test, and its grader."""

from .room import TestChamber

__all__ = ["TestChamber"]
