"""Slow inputs produced ahead of the world (sandbox runs, reviewer calls), applied at fixed points.

A feature walks each item as a pure function of the inputs recorded so far. Its
`InputWorker` walks the pending items on its own connection and records each missing input,
changing no world state; the engine applies items only through `apply_ready`, whose list of
complete items is a recorded input itself, so a replay applies the same items at the same points.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from station.core.context import Context, WaitInterrupted
from station.core.store import Store

WAIT_POLL_SECONDS = 0.2  # a tick's wait looks again at least this often (a worker's new input wakes it sooner)


class Stopped(Exception):
    """Raised inside a worker's walk once the worker is asked to stop: nothing more is produced."""


class InputWorker(threading.Thread):
    """A daemon thread recording a feature's inputs; the feature's `serve` walks its items with `produce`.

    `wake` cuts the loop's wait (`idle`) short; `recorded` is set after each input recorded.
    """

    discard_late = False  # True: a payload that ends after a stop was asked for is cut short, not recorded

    def __init__(self, name: str, directory: Path, config: Any) -> None:
        super().__init__(name=name, daemon=True)
        self.directory, self.config = directory, config
        self.stop, self.wake, self.recorded = threading.Event(), threading.Event(), threading.Event()
        self.error: str | None = None  # the last unexpected failure, for the operator

    def run(self) -> None:
        try:
            store = Store(self.directory)
        except Exception as err:  # noqa: BLE001 - the station went away
            self.error = repr(err)
            return
        try:
            self.serve(store)
        finally:
            store.close()

    def serve(self, store: Store) -> None:
        """The feature's loop until `stop` is set, on the worker's own connection (closed after it)."""
        raise NotImplementedError

    def idle(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()

    def shutdown(self, timeout: float) -> None:
        self.stop.set()
        self.wake.set()
        self.join(timeout)

    def produce(
        self,
        store: Store,
        key: str,
        kind: str,
        agent: str | None,
        make: Callable[[], dict[str, Any]],
        request_hash: str | None = None,
    ) -> dict[str, Any]:
        """The input recorded under `key`, else `make()`'s payload, recorded in its own transaction."""
        found = store.get_input(key)
        if found is not None:
            return found
        if self.stop.is_set():
            raise Stopped
        began = time.perf_counter()
        payload = make()
        if self.discard_late and self.stop.is_set():
            raise Stopped
        try:
            store.record_input(
                key, kind, store.get_meta("tick", 1), agent, payload, request_hash, time.perf_counter() - began
            )
        except sqlite3.IntegrityError:  # recorded meanwhile by another connection: that one stands
            return store.get_input(key) or payload
        self.recorded.set()
        return payload


def apply_ready(
    ctx: Context,
    key: str,
    kind: str,
    rows: Iterable[Any],
    find_ready: Callable[[], list[int]],
    apply: Callable[[Any], None],
    *,
    in_order: bool = False,
    inline: bool = False,
) -> None:
    """Apply each of `rows` (by `id`) that the ready list recorded under `key` names, in the order of `rows`.

    The list is obtained like any input: the first time it is `find_ready()` (run outside the
    transaction), afterwards and in a replay the recorded one. `in_order`: stop at the first row
    not ready (items that must be applied in sequence). `inline`: `find_ready` waits for nothing,
    so the list is made and recorded inside the unit (see `Context.obtain`).
    """
    ready = set(ctx.obtain(key, kind, None, lambda: {"ready": find_ready()}, inline=inline)["ready"])
    for row in rows:
        if row["id"] in ready:
            apply(row)
        elif in_order:
            break


def recorded(
    ctx: Context, what: str, key: str, kind: str, agent: str | None = None, request_hash: str | None = None
) -> dict[str, Any]:
    """An input a ready list promised: obtained (a replay copies it from its source), never produced."""

    def missing() -> dict[str, Any]:
        raise RuntimeError(f"{what} input {key!r} was listed as ready but is not recorded")

    return ctx.obtain(key, kind, agent, missing, request_hash)


def wait_until_complete(
    ctx: Context,
    what: str,
    rows: list[Any],
    hold: list[Any],
    complete: Callable[[Any], bool],
    keep_going: Callable[[], InputWorker],
    detail: Callable[[], str] = lambda: "",
) -> list[int]:
    """Ids of the complete `rows` (by `id`); first waits, outside any transaction, until those in
    `hold` are. `keep_going()` makes sure a worker is producing their inputs, raising to pause the
    station when none can, and returns it; the wait line (once a second) names what is missing
    (`what`: "evaluation(s)") and `detail()`. A stop asked for ends the wait (WaitInterrupted)."""
    began = time.monotonic()
    shown = began - 1.0
    while True:
        ready = [r["id"] for r in rows if complete(r)]
        missing = [r["id"] for r in hold if r["id"] not in ready]
        if not missing:
            return ready
        stop = getattr(ctx, "stop_event", None)
        if stop is not None and stop.is_set():
            raise WaitInterrupted(f"stopped while the tick waited for {what} {missing}")
        worker = keep_going()
        if time.monotonic() - shown >= 1.0:  # the wait line may take a few queries: once a second is enough
            shown = time.monotonic()
            ctx.report_wait(f"waiting {shown - began:.0f}s for {what} {', '.join(f'#{n}' for n in missing)}{detail()}")
        worker.recorded.wait(WAIT_POLL_SECONDS)
        worker.recorded.clear()
