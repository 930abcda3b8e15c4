"""Task data cached on disk, built once: a lock so one process builds while the others wait,
and a fresh `building/` folder that is moved into place only when the build is complete."""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Held while building `directory`'s contents; waiters find them ready afterwards."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def fresh_building(directory: Path) -> Path:
    """An empty `building/` folder in `directory` (what a killed build left is discarded)."""
    building = directory / "building"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    return building


def build_once(directory: Path, ready: Callable[[], bool], build: Callable[[Path], None]) -> None:
    """Unless `ready()`, run `build(building)` under the lock; `ready` is asked again once the lock
    is held, so a process that waited for another's build reuses it instead of building again.
    `build` moves what it made out of `building` into place; a failed build leaves nothing behind."""
    if ready():
        return
    with exclusive(directory):
        if ready():
            return
        building = fresh_building(directory)
        try:
            build(building)
        finally:
            shutil.rmtree(building, ignore_errors=True)
