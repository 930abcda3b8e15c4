"""The one event loop, in a background thread, on which every provider request of the process
is sent and read: the SDKs' async clients, with each caller's thread waiting for its answer.

Why not the SDKs' blocking clients, one thread per call? At a thousand calls at once, a
thousand threads each reading its own socket contend for the interpreter at every read and
write; one loop doing all the reading and writing costs about a fifth less CPU per call and
ends the thousand calls sooner (scripts/bench_model_calls.py). The callers still block, so the
engine, retries and backoff stay plain threaded code.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_pid = 0  # the process that started it: a forked child has the loop's object but not its thread
_lock = threading.Lock()


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on the loop and wait for its result (or its exception) in this thread."""
    return asyncio.run_coroutine_threadsafe(coroutine, _running()).result()


def _running() -> asyncio.AbstractEventLoop:
    global _loop, _pid
    with _lock:
        if _loop is None or _pid != os.getpid():
            _loop, _pid = asyncio.new_event_loop(), os.getpid()
            threading.Thread(target=_loop.run_forever, name="model-requests", daemon=True).start()
        return _loop
