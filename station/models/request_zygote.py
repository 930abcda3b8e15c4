"""The request workers' zygote: a process that loads the workers' imports once and forks every
request worker (request_worker.py) from itself, ready to make calls.

A worker started as a fresh interpreter paid its imports itself at every start and restart: 0.4
CPU-seconds for the station's model layer, 1 to 3 more for each provider's SDK (anthropic's alone
2.6). Forked from the zygote it costs milliseconds, and shares those pages with it. The zygote is
as clean as a fresh worker: the station starts it as a fresh interpreter (never a fork of its own
process, which runs threads and holds the world), it runs no thread of its own (so forking it is
safe), makes no call and holds no model; each worker it forks gets the station's environment as
it is at that moment (a key changed since the zygote started included) and the two pipes the
station made for it.

One zygote serves a station's process (request_processes.start_worker). The station sends it a
worker's settings (JSON) with the worker's ends of its two pipes; the zygote loads the SDKs of the
providers named (once each), forks, and sends back the worker's pid and a pidfd, through which the
station watches and kills a process that is not its own child. The zygote ends when the station's
process does (its socket closes), and its workers end then on their own (their pipes close).

Run as `python -m station.models.request_zygote FD`, FD being its end of the station's socket.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import traceback
from multiprocessing.connection import Connection

from station.models.request_processes import MESSAGE_MAX


def serve(control: socket.socket) -> None:
    """Fork a worker for each request until the station's process is gone."""
    from station.models.request_worker import preload

    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, MESSAGE_MAX, 2)
        except OSError:
            return
        if not message:  # the station's process has ended
            return
        _reap()
        try:
            index, count, providers, env = json.loads(message)
            preload(providers)  # here, once each: every later worker starts with them
            pid = os.fork()
        except Exception as err:  # noqa: BLE001 - the station is told, and may ask again
            for fd in fds:
                os.close(fd)
            control.send(f"{type(err).__name__}: {err}".encode())
            continue
        if pid == 0:
            control.close()
            _become_worker(index, count, providers, env, *fds)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)  # before any reaping: the pid is still this child's
        socket.send_fds(control, [str(pid).encode()], [pidfd])
        os.close(pidfd)


def _become_worker(index: int, count: int, providers: list[str], env: dict[str, str], calls: int, answers: int) -> None:
    from station.models.request_worker import Worker

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh worker's
    os.environ.clear()
    os.environ.update(env)
    status = 0
    try:
        Worker(Connection(answers, readable=False), index, count, providers).serve(Connection(calls, writable=False))
    except BaseException:  # noqa: BLE001 - reported, and the worker ends; the station starts another
        traceback.print_exc()
        status = 1
    finally:
        sys.stderr.flush()
        os._exit(status)  # never back into the zygote's loop


def _reap() -> None:
    """Collect the workers that have ended (each stays a zombie until then, its pid not reused)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


if __name__ == "__main__":
    os.dup2(2, 1)  # anything printed goes to stderr, never into a worker's answers
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the station's; the zygote ends with it
    serve(socket.socket(fileno=int(sys.argv[1])))
