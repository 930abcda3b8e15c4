"""Processes that make the provider calls (`engine.request_processes`).

At a thousand agents the SDKs' work (building each request, parsing each answer, HTTP) and a
thread per call cost the station's process seconds of CPU per tick, under the one interpreter
lock it shares with the engine: on a machine with cores to spare, a tick then lasts that CPU
time, not the slowest call. Here each call goes whole to one of N worker processes
(request_worker.py), which makes it as the station's own process would, retries and backoff
included, and sends back the `Reply` or the failure. The station only sends and reads: the
engine sends a tick's calls without waiting and takes the answers as they come (`submit`), and
the other callers (reviewer, grader, a turn's later steps) wait for theirs (`call`). Budgets
are still checked and booked in the station's process (models/__init__.py).

An endpoint's `max_in_flight` is shared out among the workers, so together they never send more
than it allows. A rate limit holds back the calls of the worker that met it (in one process it
holds back all of them). A worker that dies is started again and its calls in flight are sent
to the new one (up to RESENDS times each, then they fail as transient failures); workers end
with the station, or on their own when its process is gone (their pipe closes). Workers are
forked, SDKs loaded, from a zygote the station's process starts once (request_zygote.py): a
worker started as a fresh interpreter would load them itself, seconds of CPU at every start.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from station.core.config import ModelConfig
from station.core.model_api import TRANSIENT, Message, ModelError, Reply, Tool

# Where `station` is imported from, for the zygote (a fresh interpreter, not multiprocessing's
# spawn, which would re-run the station's own script).
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
MESSAGE_MAX = 1 << 20  # a worker's settings sent to the zygote: its environment is most of them
WAITING = -1  # the number of a worker's message that is a retry notice, not an answer
SWITCHED = -2  # ... that tells a model's calls moved to another endpoint (a fallback.Switch)
RESENDS = 2  # times a call is sent again after the worker making it died
MANY = 256  # messages sent to a worker in one write, at most


def worker_share(limit: int, workers: int, index: int) -> int:
    """Worker `index`'s part of an endpoint's bound: the parts add up to `limit`."""
    return limit // workers + (index < limit % workers)


class Forked:
    """A worker the zygote forked: the zygote's child, not the station's, so it is watched and
    killed through a pidfd (never by its pid alone, which the system may give to another process)."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid, self._pidfd, self.ended = pid, pidfd, False

    def running(self) -> bool:
        return not self.wait(0)

    def wait(self, timeout: float | None) -> bool:
        """Whether the worker has ended, waiting up to `timeout` seconds (None: until it has)."""
        self.ended = self.ended or bool(select.select([self._pidfd], [], [], timeout)[0])
        return self.ended

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # it has ended already
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close(self) -> None:
        """Once it has ended: its pidfd is let go (`running` stays False)."""
        assert self.ended
        os.close(self._pidfd)


class _Zygote:
    """The station's end of the zygote."""

    def __init__(self) -> None:
        self.owner = os.getpid()  # a fork of the station's process starts a zygote of its own
        self.socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "station.models.request_zygote", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env=_environment(),
            )

    def fork(self, index: int, count: int, providers: list[str]) -> tuple[Forked, Connection, Connection]:
        """A new worker: its process, the connection that sends it calls and the one its answers come on."""
        calls, to_worker = os.pipe()
        from_worker, answers = os.pipe()
        try:
            settings = json.dumps([index, count, providers, _environment()])
            socket.send_fds(self.socket, [settings.encode()], [calls, answers])
            reply, fds, _, _ = socket.recv_fds(self.socket, MESSAGE_MAX, 1)
        except OSError:
            reply, fds = b"", []
        finally:
            os.close(calls)
            os.close(answers)
        if not fds:
            os.close(to_worker)
            os.close(from_worker)
            why = reply.decode(errors="replace") or "the request processes' zygote had ended"
            raise ModelError(f"could not start a request process: {why}", kind=TRANSIENT)
        return (
            Forked(int(reply), fds[0]),
            Connection(to_worker, readable=False),
            Connection(from_worker, writable=False),
        )


def _environment() -> dict[str, str]:
    """The station's environment as it is now, and where `station` is imported from."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (PACKAGE_ROOT, os.environ.get("PYTHONPATH"))))}


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def start_worker(index: int, count: int, providers: list[str]) -> tuple[Forked, Connection, Connection]:
    """Request worker `index` of `count`, for a station whose config names `providers`: forked
    from this process's zygote, which is started at the first need and again if it has ended."""
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.owner != os.getpid() or _zygote.process.poll() is not None:
            _zygote = _Zygote()
        return _zygote.fork(index, count, providers)


class _Call:
    """A call in flight: what was sent, to send it again if its worker dies."""

    def __init__(self, message: tuple[Any, ...], future: Future[Reply]) -> None:
        self.message, self.future, self.resent = message, future, 0


class _Worker:
    """The station's end of one worker process."""

    def __init__(
        self,
        index: int,
        count: int,
        providers: list[str],
        on_wait: Callable[[str], None],
        on_lost: Callable[[list[_Call]], None],
        on_switch: Callable[[Any], None],
    ) -> None:
        self.process, self.outgoing, self.incoming = start_worker(index, count, providers)
        self.on_wait, self.on_lost, self.on_switch = on_wait, on_lost, on_switch
        self.pending: dict[int, _Call] = {}
        self.lock = threading.Lock()  # guards `pending` and `alive`
        self.alive = True
        # Messages are written by a thread of their own: a worker busy with its calls reads its
        # pipe late, and the engine must not wait on a full pipe while it has turns to apply.
        self.unsent: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self.writer = threading.Thread(target=self._write, name="requests-writer", daemon=True)
        self.writer.start()
        threading.Thread(target=self._read, name="requests-reader", daemon=True).start()

    def send(self, message: tuple[Any, ...], call: _Call | None = None) -> None:
        """Queue a message for the worker; a call's answer comes to its future. If the worker
        has died, or dies before the call is written, the call goes to its successor (on_lost)."""
        with self.lock:
            if not self.alive:
                raise ModelError("the request process had ended", kind=TRANSIENT)
            if call is not None:
                self.pending[message[1]] = call
            self.unsent.put(message)

    def _write(self) -> None:
        """Send the queued messages, those queued together as one ("many", [...]): the worker
        then reads a tick's batch of calls at once, not one pipe read each between its calls."""
        while True:
            messages = [self.unsent.get()]
            while messages[-1] is not None and len(messages) < MANY and not self.unsent.empty():
                messages.append(self.unsent.get())
            closing = messages[-1] is None
            if closing:
                messages.pop()
            try:
                if messages:
                    self.outgoing.send(messages[0] if len(messages) == 1 else ("many", messages))
                if closing:
                    self.outgoing.send(None)
            except OSError:
                return  # the worker is gone: its reader hands the calls pending on (on_lost)
            if closing:
                return

    def _read(self) -> None:
        while True:
            try:
                number, ok, value = self.incoming.recv()
            except (EOFError, OSError):
                break
            if number == WAITING:
                self.on_wait(value)
                continue
            if number == SWITCHED:  # recorded by a thread of its own: this one never waits for the ledger
                threading.Thread(target=self.on_switch, args=(value,), name="endpoint-switch").start()
                continue
            with self.lock:
                call = self.pending.pop(number, None)
            if call is None:
                continue
            if ok:
                value.retries += call.resent
                call.future.set_result(value)
            else:
                call.future.set_exception(ModelError(value[1], kind=value[0]))
        with self.lock:
            self.alive = False
            lost, self.pending = self.pending, {}
        self.on_lost(list(lost.values()))

    def close(self) -> None:
        self.unsent.put(None)  # after the messages queued before it
        self.writer.join(timeout=5)
        self.outgoing.close()
        if not self.process.wait(5):
            self.process.kill()
            self.process.wait(None)
        self.process.close()
        self.incoming.close()


class RequestProcesses:
    """N worker processes, each started by the first call it gets. `providers()`: the providers
    the station's config names now, whose SDKs a worker loads as it starts."""

    def __init__(
        self,
        count: int,
        on_wait: Callable[[str], None] | None = None,
        providers: Callable[[], Iterable[str]] = lambda: (),
        on_switch: Callable[[Any], None] = lambda switch: None,
    ) -> None:
        self.count, self.providers, self.on_switch = count, providers, on_switch
        self.on_wait = on_wait or (lambda text: None)
        self._workers: list[_Worker | None] = [None] * count
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._stop: threading.Event | None = None
        self._sent_settings: dict[int, tuple[ModelConfig, str]] = {}

    def watch(self, stop: threading.Event) -> None:
        """The station's stop signal: once it is set, the calls waiting to retry end (as in the
        station's own process). A new signal (the station runs again) lets them wait again."""
        self._stop = stop
        self._tell("go")
        threading.Thread(target=self._relay_stop, args=(stop,), name="requests-stop", daemon=True).start()

    def submit(
        self,
        config: ModelConfig,
        messages: list[Message],
        system: str | None,
        agent: str,
        tools: list[Tool] | None = None,
    ) -> Future[Reply]:
        """Send one call of `config`'s model (retries included) to a worker; its Reply comes in
        the future, or the ModelError it ended with."""
        number = next(self._numbers)
        # Only workers with a part of the endpoint's bound get its calls (see worker_share).
        call = _Call(("call", number, self._settings(config), messages, system, agent, tools), Future())
        self._send(call, number % min(self.count, config.max_in_flight))
        return call.future

    def _send(self, call: _Call, index: int) -> None:
        self._worker(index).send(call.message, call)

    def _resend(self, index: int, calls: list[_Call]) -> None:
        """Worker `index` died: its calls go to a new one, each at most RESENDS times."""
        for call in calls:
            call.resent += 1
            try:
                if call.resent > RESENDS:
                    raise ModelError("the request process kept ending during the call", kind=TRANSIENT)
                self._send(call, index)
            except ModelError as err:
                call.future.set_exception(err)

    def _settings(self, config: ModelConfig) -> str:
        """The config as sent to the workers (made once per config: this runs for every call)."""
        found = self._sent_settings.get(id(config))
        if found is None or found[0] is not config:
            found = self._sent_settings[id(config)] = (config, config.model_dump_json())
        return found[1]

    def call(
        self,
        config: ModelConfig,
        messages: list[Message],
        system: str | None,
        agent: str,
        tools: list[Tool] | None = None,
    ) -> Reply:
        return self.submit(config, messages, system, agent, tools).result()

    def _worker(self, index: int) -> _Worker:
        with self._lock:
            if self._closed:
                raise ModelError("the station is closing", kind=TRANSIENT)
            worker = self._workers[index]
            if worker is None or not worker.alive:
                if worker is not None:
                    worker.close()
                worker = self._workers[index] = _Worker(
                    index,
                    self.count,
                    sorted(set(self.providers())),
                    self.on_wait,
                    lambda calls: self._resend(index, calls),
                    self.on_switch,
                )
                if self._stop is not None and self._stop.is_set():
                    worker.send(("stop",))
            return worker

    def _relay_stop(self, stop: threading.Event) -> None:
        stop.wait()
        if stop is self._stop:
            self._tell("stop")

    def _tell(self, word: str) -> None:
        with self._lock:
            workers = [w for w in self._workers if w is not None and w.alive]
        for worker in workers:
            try:
                worker.send((word,))
            except ModelError:
                pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, [None] * self.count
        for worker in workers:
            if worker is not None:
                worker.close()
