"""The calls in flight to one provider endpoint, shared by every model and thread that uses it.

An endpoint is a provider, a base URL and an API key: what a provider's limits are counted against.
It holds three things:

* a bound on the calls in flight (`max_in_flight`): a call takes a numbered slot for its request
  and gives it back when the answer is read, so turns, grader, reviewer and debugger together
  never send more than that many at once;
* a shared "not before" time: when the server says to slow down (429, overload), no call to the
  endpoint is sent before the time it asked for, instead of every call finding out for itself;
* the SDKs' (async) clients, each over its own small HTTP connection pool, reused from call to
  call. A slot always uses the same pool (slot // POOL_SIZE): httpx scans its whole pool on
  every request, so one pool of 1,000 connections costs milliseconds of CPU per call where pools
  of ten cost almost nothing, and a slot's connection stays open for its next call.
"""

from __future__ import annotations

import heapq
import os
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

POOL_SIZE = 10  # connections per HTTP pool (see the module docstring)
STOP_POLL_S = 0.25  # how often a call waiting for a free slot looks whether the station is stopping


class Stopped(Exception):
    """The station was asked to stop while a call waited for its endpoint."""


@dataclass(frozen=True)
class EndpointKey:
    provider: str
    base_url: str  # "" for the provider's own
    key_id: str  # a digest of the key ("" for none): another key is another account


class Endpoint:
    def __init__(self, key: EndpointKey, limit: int) -> None:
        self.key, self.limit = key, limit
        self.in_flight = 0
        self.not_before = 0.0  # time.monotonic() before which no request is sent
        self._changed = threading.Condition()
        self._free: list[int] = []  # slots given back (a heap: the lowest is reused first)
        self._issued = 0  # slots handed out so far: 0 .. _issued-1
        self._pools: dict[int, Any] = {}  # pool number -> HTTP client
        self._clients: dict[tuple[Hashable, int], Any] = {}  # (variant, pool number) -> SDK client

    def lower_limit(self, limit: int) -> None:
        """Models that share an endpoint and disagree: the smallest bound holds for all."""
        with self._changed:
            self.limit = min(self.limit, limit)

    # -- sending --------------------------------------------------------------------------
    @contextmanager
    def slot(self, stop: threading.Event) -> Iterator[int]:
        """A slot to send one request in; waits for a free one and for the "not before" time."""
        number = self._take(stop)
        try:
            yield number
        finally:
            with self._changed:
                self.in_flight -= 1
                heapq.heappush(self._free, number)
                self._changed.notify()

    def _take(self, stop: threading.Event) -> int:
        while True:
            while (left := self.not_before - time.monotonic()) > 0:
                if stop.wait(left):
                    raise Stopped
            with self._changed:
                while self.in_flight >= self.limit:
                    if stop.is_set():
                        raise Stopped
                    self._changed.wait(STOP_POLL_S)
                if time.monotonic() < self.not_before:  # a call failed with a 429 while this one queued
                    continue
                self.in_flight += 1
                if self._free:
                    return heapq.heappop(self._free)
                self._issued += 1
                return self._issued - 1

    def hold_off(self, seconds: float) -> None:
        """The server asked to wait: no call to this endpoint is sent for `seconds`."""
        with self._changed:
            self.not_before = max(self.not_before, time.monotonic() + seconds)

    # -- the clients ----------------------------------------------------------------------
    def client(self, slot: int, variant: Hashable, make_pool: Callable[[int], Any], make: Callable[[Any], Any]) -> Any:
        """The SDK client for a slot: `make(pool)` over the slot's HTTP pool, which is made by
        `make_pool(connections)`. `variant` tells apart clients over the same pool made with
        other settings (a model with another timeout)."""
        number = slot // POOL_SIZE
        with self._changed:
            found = self._clients.get((variant, number))
            if found is None:
                if number not in self._pools:
                    self._pools[number] = make_pool(POOL_SIZE)
                found = self._clients[(variant, number)] = make(self._pools[number])
            return found


# Held by the models that use them: an endpoint no model uses any more goes, with its clients.
_ENDPOINTS: weakref.WeakValueDictionary[EndpointKey, Endpoint] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()
_PID = os.getpid()


def endpoint_for(key: EndpointKey, limit: int) -> Endpoint:
    """The process's one Endpoint for `key` (shared by the models that use it, the reviewer's,
    grader's and evaluation workers' too), its bound lowered to `limit` if that is smaller."""
    global _PID
    with _LOCK:
        if _PID != os.getpid():  # a forked child: the clients belong to the parent's request loop
            _ENDPOINTS.clear()
            _PID = os.getpid()
        found = _ENDPOINTS.get(key)
        if found is None:
            found = _ENDPOINTS[key] = Endpoint(key, limit)
            return found
    found.lower_limit(limit)
    return found


def known_limit(key: EndpointKey) -> int | None:
    """The bound of an endpoint already in use, if any."""
    with _LOCK:
        found = _ENDPOINTS.get(key)
    return found.limit if found else None
