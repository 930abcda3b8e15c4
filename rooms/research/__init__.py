"""The Research Counter as one feature: the room, its store and storage, its tasks, the
background worker that runs submissions, and the hooks that deliver results and watch for
stagnation."""

from . import plays  # noqa: F401 - registers the scripted policy's play at this room
from .room import ResearchCounter
from .tasks import load_tasks, tasks_of

__all__ = ["ResearchCounter", "load_tasks", "tasks_of"]
