"""While a station runs in a terminal, only the station writes to the terminal.

Libraries write to the process's standard error as they please: Ray's Python logger and its C++
core (lines and, on SIGTERM, stack dumps), XLA, native extensions. Those lines broke the live
status line. While a station runs, file descriptor 2 points at `station.log` in the station's
directory, Python's logging goes there too (Ray's logger included, see executors/ray_executor.py),
and the station's own output (the status line, messages, errors) uses a copy of the terminal's
descriptor made first.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

LOG_NAME = "station.log"


@contextmanager
def station_log(directory: Path) -> Iterator[IO[str]]:
    """Route stderr and logging to DIR/station.log; yields the stream that still reaches the terminal."""
    log = open(directory / LOG_NAME, "a", encoding="utf-8", errors="replace", buffering=1)
    sys.stderr.flush()
    terminal_fd = os.dup(2)
    if _writes_to_fd2(sys.stderr):
        terminal: IO[str] = os.fdopen(
            os.dup(terminal_fd), "w", encoding=sys.stderr.encoding, errors="replace", buffering=1
        )
    else:  # sys.stderr was replaced (a caller capturing our output): keep writing to it
        terminal = sys.stderr
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    old_level, old_stderr = root.level, sys.stderr
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    os.dup2(log.fileno(), 2)
    sys.stderr = terminal
    try:
        yield terminal
    finally:
        terminal.flush()
        os.dup2(terminal_fd, 2)
        os.close(terminal_fd)
        sys.stderr = old_stderr
        root.removeHandler(handler)
        root.setLevel(old_level)
        if terminal is not old_stderr:
            terminal.close()
        log.close()


def _writes_to_fd2(stream: IO[str]) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream
        return False
