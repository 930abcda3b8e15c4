"""One engine per station directory: the run lock, and asking whether a station runs now.

The lock is an advisory `flock` on `run.lock`, so it goes away with the process that held it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# A reader asking `is_running` holds a shared lock on run.lock for an instant: a run starting then tries
# again for this long before it says the station is busy (a real run holds the lock throughout).
PROBE_GRACE_S = 0.5


class StationBusy(RuntimeError):
    """Another process runs this station."""


@contextmanager
def run_lock(directory: Path) -> Iterator[None]:
    handle = open(directory / "run.lock", "w")
    deadline = time.monotonic() + PROBE_GRACE_S
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                raise StationBusy(f"station {directory} is already running in another process") from None
            time.sleep(0.01)
    try:
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()


def is_running(directory: Path) -> bool:
    lock = directory / "run.lock"
    if not lock.exists():
        return False
    with open(lock) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False
