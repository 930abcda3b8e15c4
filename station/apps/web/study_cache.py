"""The studies the viewer computed (station.study over a window of ticks, the build-on trees of every
evaluation), kept per the station's change mark, a few at a time.

Reading a study is quick on a small station and takes a minute on one of a thousand agents, so a page
never waits for a large one: it asks, a single background thread computes (one at a time), and the
page says so until the result is there; meanwhile an older result of the same window, if any, is shown
as of its tick. A small station's study (and every study of a static export) is computed at once.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

KEPT = 3  # results kept: the page's study, one more window, and the trees (the oldest goes first)
SMALL_STATION = 200_000  # events: a station with fewer is studied while the page waits


@dataclass(frozen=True)
class Failed:
    """A computation that raised: its one line, shown where the value would be."""

    error: str


@dataclass
class Answer:
    value: Any  # None: nothing computed yet; Failed: the computation raised
    tick: Any  # the station's tick the value was computed at
    fresh: bool  # computed at the station's current change mark
    computing: str | None  # what the background thread is computing now ("" when idle)


_results: OrderedDict[Hashable, tuple[tuple, Any]] = OrderedDict()
_lock = threading.Lock()
_worker: threading.Thread | None = None
_working_on = ""


def change_mark(db: Any) -> tuple:
    """What moves when the station records anything: its tick and its latest event."""
    tick = db.execute("SELECT value FROM meta WHERE key='tick'").fetchone()
    event = db.execute("SELECT MAX(id) FROM events").fetchone()
    return (tick[0] if tick else None, event[0] if event else 0)


def small(mark: tuple) -> bool:
    return (mark[1] or 0) < SMALL_STATION


def get(key: Hashable, what: str, db: Any, compute: Callable[[], Any], *, wait: bool = False) -> Answer:
    """The value of `key` at the station's change mark: computed now when `wait` or the station is
    small, else by the background thread (the answer then holds an older value, or none)."""
    mark = change_mark(db)
    with _lock:
        held = _results.get(key)
        if held is not None:
            _results.move_to_end(key)
    if held is not None and held[0] == mark:
        return Answer(held[1], mark[0], True, _working_on)
    if wait or small(mark):
        value = _attempt(compute)
        _keep(key, mark, value)
        return Answer(value, mark[0], True, _working_on)
    _start(key, what, mark, compute)
    return Answer(held[1] if held else None, held[0][0] if held else None, False, _working_on)


def find(test: Callable[[Hashable, Any], bool], db: Any) -> Any:
    """A value kept at the current change mark whose key and value pass `test`, or None."""
    mark = change_mark(db)
    with _lock:
        for key, (held_mark, value) in reversed(_results.items()):
            if held_mark == mark and not isinstance(value, Failed) and test(key, value):
                return value
    return None


def _keep(key: Hashable, mark: tuple, value: Any) -> None:
    with _lock:
        _results[key] = (mark, value)
        _results.move_to_end(key)
        while len(_results) > KEPT:
            _results.popitem(last=False)


def _start(key: Hashable, what: str, mark: tuple, compute: Callable[[], Any]) -> None:
    """Compute in the background unless something already is (a page asks again later)."""
    global _worker, _working_on
    with _lock:
        if _worker is not None and _worker.is_alive():
            return
        _working_on = f"{what} (since {time.strftime('%H:%M:%S')})"
        _worker = threading.Thread(target=_run, args=(key, mark, compute), name="station-study", daemon=True)
        _worker.start()


def _run(key: Hashable, mark: tuple, compute: Callable[[], Any]) -> None:
    global _working_on
    try:
        _keep(key, mark, _attempt(compute))
    finally:
        _working_on = ""


def _attempt(compute: Callable[[], Any]) -> Any:
    try:
        return compute()
    except Exception as err:  # noqa: BLE001 - a study that fails is said on the page, never a broken page
        return Failed(f"{type(err).__name__}: {err}".splitlines()[0][:300])


def join() -> None:
    """Wait for the background computation, if any (tests, and a server shutting down)."""
    worker = _worker
    if worker is not None:
        worker.join()


def forget() -> None:
    """Drop every kept result (tests)."""
    with _lock:
        _results.clear()
