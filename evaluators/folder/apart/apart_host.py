"""The program host: an OpenEvolve or ShinkaEvolve program in a process of its own, apart from the
evaluator that scores it (docs/security.md, "An evolve program and its evaluator").

It runs as the run's Companion (station.core.run_types), `python -s apart_host.py [PROGRAM]`: the
program is the one .py file in ./program unless named, the apart/ folder beside it holds
apart_codec.py, and the channel folder is named by STATION_CHANNEL. It listens on
<channel>/program.sock; for each connection it forks a worker that executes the program file
afresh and serves the evaluator's stand-in (apart_standin.py), one request at a time:

    {"op": "load", "run_name"}             -> {"names": {name: ["call"] | ["value", v] | ["other", type]}}
    {"op": "call", "name", "args", "kwargs", "random", "np_random"}
                                           -> {"value", "random", "np_random"}
    {"op": "main", "argv"}                 -> {"exit": code}   (the program run as __main__)

Every reply carries "out" and "err", what the program printed meanwhile. A failure is {"error":
{"type", "builtin", "args", "message", "traceback"}}; a value that is not plain data is
{"refused": what}. The host kills a worker (its whole process group) as soon as its connection
hangs up: the evaluator timed out, was interrupted, or ended. Stdlib only, numpy if importable.
"""

from __future__ import annotations

import builtins
import ctypes
import importlib.util
import io
import os
import random
import select
import signal
import socket
import sys
import traceback
from typing import Any

CHANNEL_ENV = "STATION_CHANNEL"  # station.core.run_types.CHANNEL_ENV, which this script cannot import
SOCKET_NAME = "program.sock"
OUTPUT_MAX_CHARS = 1_000_000  # what one request's prints may send back, per stream
PR_SET_PDEATHSIG = 1

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE if os.path.isfile(os.path.join(_HERE, "apart_codec.py")) else os.path.join(_HERE, "apart"))
import apart_codec as codec  # noqa: E402 - found through the path set just above

del sys.path[0]


def main(argv: list[str]) -> None:
    program = os.path.abspath(argv[1] if len(argv) > 1 else _only_program("program"))
    channel = os.environ[CHANNEL_ENV]
    try:
        import numpy  # noqa: F401 - loaded once here, so that each worker starts with it
    except ImportError:
        pass
    sys.path.insert(0, os.path.dirname(program))  # as `python program.py` would have it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    address = os.path.join(channel, SOCKET_NAME)
    if os.path.lexists(address):
        os.unlink(address)
    listener.bind(address + ".new")
    os.chmod(address + ".new", 0o666)  # the evaluator runs as another user where runs get uids
    listener.listen(64)
    os.rename(address + ".new", address)  # whoever sees the name can connect
    _serve(listener, program)


def _only_program(folder: str) -> str:
    found = sorted(name for name in os.listdir(folder) if name.endswith(".py"))
    if len(found) != 1:
        raise SystemExit(f"apart_host: expected one program in {folder}/, found {found}")
    return os.path.join(folder, found[0])


def _serve(listener: socket.socket, program: str) -> None:
    """Accept connections, each served by a forked worker. A worker whose connection hangs up is
    killed; a worker that ends has its connection closed, so the evaluator's call ends too."""
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake)  # a SIGCHLD wakes the poll below
    poller = select.poll()
    poller.register(listener, select.POLLIN)
    poller.register(woken, select.POLLIN)
    workers: dict[int, tuple[socket.socket, int]] = {}
    while True:
        for fd, _ in poller.poll():
            if fd == listener.fileno():
                conn, _ = listener.accept()
                try:
                    workers[conn.fileno()] = (conn, _start(conn, program, listener, workers))
                except OSError:  # at the run's process cap: this load fails, the evaluator is told
                    conn.close()
                    continue
                poller.register(conn, select.POLLRDHUP)  # never POLLIN: the worker reads the requests
            elif fd == woken:
                os.read(woken, 4096)
            elif fd in workers:
                _kill(workers[fd][1])
        for fd in [fd for fd, (_, pid) in workers.items() if _ended(pid)]:
            poller.unregister(fd)
            workers.pop(fd)[0].close()


def _start(conn: socket.socket, program: str, listener: socket.socket, workers: dict[int, Any]) -> int:
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        listener.close()
        for other, _ in workers.values():
            other.close()
        _worker(conn, program)
    return pid


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the worker leads its own group: what it started goes too
    except ProcessLookupError:
        pass


def _ended(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True


def _worker(conn: socket.socket, program: str) -> None:
    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the host
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    code = 0
    try:
        Worker(conn, program).serve()
    except BaseException:  # noqa: BLE001 - the worker ends here whatever happened
        code = 1
    finally:
        os._exit(code)


class Capture(io.TextIOBase):
    """What the program prints during one request, up to OUTPUT_MAX_CHARS."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        text = str(text)
        if self.size < OUTPUT_MAX_CHARS:
            self.parts.append(text[: OUTPUT_MAX_CHARS - self.size])
            self.size += len(self.parts[-1])
        return len(text)

    def text(self) -> str:
        return "".join(self.parts)


class Worker:
    def __init__(self, conn: socket.socket, program: str) -> None:
        self.conn, self.program = conn, program
        self.module: Any = None

    def serve(self) -> None:
        while True:
            try:
                request = codec.receive(self.conn)
            except codec.Broken:
                return
            out, err = Capture(), Capture()
            sys.stdout, sys.stderr = out, err
            try:
                reply = self.answer(request)
            finally:
                sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
            reply.update(out=out.text(), err=err.text())
            try:
                codec.send(self.conn, reply)
            except codec.NotData as refused:
                codec.send(self.conn, {"refused": str(refused), "out": out.text(), "err": err.text()})

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            op = request["op"]
            if op == "load":
                return {"names": self.load(str(request["run_name"]))}
            if op == "main":
                return {"exit": self.run_main([str(a) for a in request["argv"]])}
            if op == "call":
                return self.call(request)
            raise ValueError(f"unknown request {op!r}")
        except BaseException as failure:  # noqa: BLE001 - the program's failure goes back to the evaluator
            return {"error": _described(failure)}

    def load(self, run_name: str) -> dict[str, Any]:
        spec = importlib.util.spec_from_file_location(run_name, self.program)
        self.module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[run_name] = self.module
        spec.loader.exec_module(self.module)  # type: ignore[union-attr]
        return {name: _kind(value) for name, value in vars(self.module).items() if not name.startswith("__")}

    def run_main(self, argv: list[str]) -> int:
        """The program as `python program.py ARGS` runs it: its exit code, its traceback printed."""
        sys.argv = [self.program, *argv[1:]]
        try:
            self.load("__main__")
        except SystemExit as ended:
            if ended.code is None or isinstance(ended.code, int):
                return ended.code or 0
            print(ended.code, file=sys.stderr)
            return 1
        except BaseException:  # noqa: BLE001 - printed, as the interpreter prints it
            traceback.print_exc()
            return 1
        return 0

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        function = vars(self.module)[request["name"]]
        np = sys.modules.get("numpy")
        if request.get("random") is not None:
            random.setstate(request["random"])
        if request.get("np_random") is not None and np is not None:
            np.random.set_state(request["np_random"])
        value = function(*request["args"], **request["kwargs"])
        try:
            codec.encode(value)
        except codec.NotData as refused:
            return {"refused": str(refused)}
        reply = {"value": value, "random": random.getstate(), "np_random": None}
        if request.get("np_random") is not None and np is not None:
            reply["np_random"] = np.random.get_state()
        return reply


def _kind(value: Any) -> list[Any]:
    """How the evaluator's stand-in shows one of the program's top-level names."""
    if callable(value):
        return ["call"]
    try:
        codec.encode(value)
    except codec.NotData:
        return ["other", type(value).__name__]
    return ["value", value]


def _described(failure: BaseException) -> dict[str, Any]:
    """A failure as data: its type, the nearest builtin exception type it derives from, its args."""
    builtin = next((k.__name__ for k in type(failure).__mro__ if getattr(builtins, k.__name__, None) is k), "Exception")
    args: Any = failure.args
    try:
        codec.encode(args)
    except codec.NotData:
        args = (str(failure),)
    shown = "".join(traceback.format_exception(type(failure), failure, failure.__traceback__))
    return {
        "type": type(failure).__name__,
        "builtin": builtin,
        "args": tuple(args),
        "message": str(failure),
        "traceback": shown[-20_000:],
    }


if __name__ == "__main__":
    main(sys.argv)
