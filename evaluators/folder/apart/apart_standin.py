"""The evaluator's side of an evolve program run apart (docs/security.md, "An evolve program and
its evaluator"): installed in the evaluator's process before the evaluator is imported.

Every way an evaluator loads the program file as code gives it a stand-in module instead, whose
functions call into the program's own process (apart_host.py) over <channel>/program.sock:
`importlib.util.spec_from_file_location` on the program's path, `importlib.machinery.SourceFileLoader`
on it, an `import` that finds it on sys.path, and `runpy.run_path`. Child Python interpreters get
the same hooks through site/sitecustomize.py (PYTHONPATH), and `python program.py` there runs the
program as __main__ in its own process, the exit code and the prints coming back. Reading the
program's text still reads the real file (judges, line counts). A copy of the program (the same
bytes elsewhere) counts as the program.

Arguments and results cross as plain data (apart_codec.py): anything else is refused with a
TypeError naming the function and the type. Python's and numpy's global random states go to the
program with each call and come back with the answer, so an evaluator that seeds them before a
call sees the same draws as before. An exception the program raises comes back as the nearest
builtin exception type with the same arguments (its traceback in a note); an interrupted call
(a timeout's signal) closes its connection, and the host kills that worker.
"""

from __future__ import annotations

import builtins
import ctypes
import importlib.abc
import importlib.machinery
import importlib.util
import os
import random
import runpy
import socket
import sys
import threading
import time
import types
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import apart_codec as codec  # noqa: E402 - found through the path set just above

del sys.path[0]

CHANNEL_ENV = "STATION_CHANNEL"  # station.core.run_types.CHANNEL_ENV
PROGRAM_ENV = "STATION_APART_PROGRAM"  # the program's path, for child interpreters' sitecustomize
SOCKET_NAME = "program.sock"
CONNECT_WAIT_S = 60.0  # the host starts with the run; the evaluator may import faster
SITE_DIR = os.path.join(_HERE, "site")
PR_SET_DUMPABLE = 4
SHARED_HINT = " (an evaluator that must hand its program objects declares `program_process: shared` in task.yaml)"


class _State:
    program = ""  # the real path of the program file
    program_bytes = b""
    channel = ""


def install(program: str, channel: str) -> None:
    """Hook every way of loading `program` in this process, and in the Python interpreters it starts."""
    _State.program = os.path.realpath(program)
    with open(_State.program, "rb") as f:
        _State.program_bytes = f.read()
    _State.channel = channel
    not_dumpable()
    importlib.util.spec_from_file_location = _spec_from_file_location
    importlib.machinery.SourceFileLoader = _SourceFileLoader  # type: ignore[misc]
    runpy.run_path = _run_path
    sys.meta_path.insert(0, _Finder())
    os.environ[PROGRAM_ENV] = _State.program
    os.environ[CHANNEL_ENV] = channel
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != SITE_DIR]
    os.environ["PYTHONPATH"] = os.pathsep.join([SITE_DIR, *paths])  # first: it runs the next sitecustomize


def not_dumpable() -> None:
    """No process of the program's (another uid, or the same in a plain subprocess) may read this
    one's memory or attach to it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def is_program(location: Any) -> bool:
    """Whether `location` is the program file, or a copy of it."""
    try:
        path = os.path.realpath(os.fspath(location))
        if path == _State.program:
            return True
        if not path.endswith(".py") or os.path.getsize(path) != len(_State.program_bytes):
            return False
        with open(path, "rb") as f:
            return f.read() == _State.program_bytes
    except (OSError, TypeError, ValueError):
        return False


# -- the hooks ----------------------------------------------------------------------------------------
_original_spec = importlib.util.spec_from_file_location
_OriginalLoader = importlib.machinery.SourceFileLoader
_original_run_path = runpy.run_path


def _spec_from_file_location(name: str, location: Any = None, *args: Any, **kwargs: Any) -> Any:
    if location is not None and is_program(location):
        return _spec(name, location)
    return _original_spec(name, location, *args, **kwargs)


def _spec(name: str, location: Any) -> importlib.machinery.ModuleSpec:
    spec = importlib.machinery.ModuleSpec(name, ApartLoader(), origin=os.fspath(location))
    spec.has_location = True  # __file__ is the program's path: reading its text reads the real file
    return spec


class _SourceFileLoader(_OriginalLoader):
    def exec_module(self, module: types.ModuleType) -> None:
        if is_program(self.path):
            ApartLoader().exec_module(module)
        else:
            super().exec_module(module)

    def load_module(self, fullname: str | None = None) -> types.ModuleType:
        if not is_program(self.path):
            return super().load_module(fullname)
        module = importlib.util.module_from_spec(_spec(fullname or self.name, self.path))
        sys.modules[module.__name__] = module
        ApartLoader().exec_module(module)
        return module


def _run_path(path_name: Any, init_globals: dict[str, Any] | None = None, run_name: str | None = None) -> Any:
    if not is_program(path_name):
        return _original_run_path(path_name, init_globals, run_name)
    module = types.ModuleType(run_name or "<run_path>")
    module.__file__ = os.fspath(path_name)
    ApartLoader().exec_module(module)
    return dict(vars(module))


class _Finder(importlib.abc.MetaPathFinder):
    """`import program` with the program's folder on sys.path."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        stem = os.path.splitext(os.path.basename(_State.program))[0]
        if name.rpartition(".")[2] != stem:
            return None
        found = importlib.machinery.PathFinder.find_spec(name, path)
        if found is None or not found.origin or not is_program(found.origin):
            return None
        return _spec(name, found.origin)


class ApartLoader(importlib.abc.Loader):
    """Fills a module with the program's names, as its own process describes them."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        program = Program(module.__name__)
        for name, (kind, *rest) in program.names.items():
            if kind == "call":
                setattr(module, name, program.function(name))
            elif kind == "value":
                setattr(module, name, rest[0])
            else:
                setattr(module, name, Kept(name, rest[0]))


class Kept:
    """A top-level object of the program that is neither a function nor plain data: it stays there."""

    def __init__(self, name: str, kind: str) -> None:
        self._name, self._kind = name, kind

    def __repr__(self) -> str:
        return f"<the program's {self._kind} {self._name}, kept in the program's process>"

    def __getattr__(self, attribute: str) -> Any:
        raise AttributeError(
            f"the program's {self._name} is a {self._kind}, which stays in the program's own process: "
            f"only its functions and plain data reach the evaluator{SHARED_HINT}"
        )


# -- the program's process ----------------------------------------------------------------------------
class Program:
    """One load of the program: a worker in the host, more if threads call it at the same time."""

    def __init__(self, run_name: str) -> None:
        self.run_name = run_name
        self.idle: list[Connection] = []
        self.lock = threading.Lock()
        first = Connection()
        self.names: dict[str, Any] = first.load(run_name)
        self.idle.append(first)

    def function(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, args, kwargs)

        call.__name__ = call.__qualname__ = name
        call.__module__ = self.run_name
        call.__doc__ = f"{name}() of the program, run in the program's own process"
        return call

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with self.lock:  # a forked child (multiprocessing) must not share its parent's stream
            mine = [c for c in self.idle if c.pid == os.getpid()]
            conn = mine[-1] if mine else None
            if conn is not None:
                self.idle.remove(conn)
        if conn is None:  # another thread's call is running (or was abandoned), or a child calls: a fresh load
            conn = Connection()
            conn.load(self.run_name)
        try:
            return conn.call(name, args, kwargs)
        finally:
            if not conn.closed:  # the program answered (a value or its exception): the worker goes on
                with self.lock:
                    self.idle.append(conn)


class Connection:
    def __init__(self) -> None:
        self.sock = _connect()
        self.closed = False
        self.pid = os.getpid()

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    def load(self, run_name: str) -> dict[str, Any]:
        reply = self.ask({"op": "load", "run_name": run_name}, "loading the program")
        return dict(reply["names"])

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        np = sys.modules.get("numpy")
        request = {
            "op": "call",
            "name": name,
            "args": args,
            "kwargs": kwargs,
            "random": random.getstate(),
            "np_random": np.random.get_state() if np is not None else None,
        }
        _check_arguments(name, args, kwargs)
        reply = self.ask(request, f"{name}()")
        random.setstate(reply["random"])
        if np is not None and reply.get("np_random") is not None:
            np.random.set_state(reply["np_random"])
        return reply["value"]

    def run_main(self, argv: list[str]) -> int:
        return int(self.ask({"op": "main", "argv": argv}, "the program run as __main__")["exit"])

    def ask(self, request: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            codec.send(self.sock, request)
        except codec.NotData as refused:
            raise TypeError(
                f"{what} was given {refused}: only plain data crosses from the evaluator to the program{SHARED_HINT}"
            ) from None
        except BaseException:
            self.close()
            raise
        try:
            reply = codec.receive(self.sock)
        except codec.Broken as err:
            self.close()
            raise RuntimeError(f"the program's process ended during {what} ({err})") from None
        except BaseException:  # interrupted (a timeout's signal): the host kills the worker
            self.close()
            raise
        _echo(reply)
        if "refused" in reply:
            raise TypeError(
                f"{what} returned {reply['refused']}: only plain data crosses from the program to its evaluator"
            )
        if "error" in reply:
            raise _rebuilt(reply["error"])
        return dict(reply)


def _check_arguments(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    for place, given in (("argument ", args), ("keyword argument ", kwargs)):
        try:
            codec.encode(given)
        except codec.NotData as refused:
            article = "an" if refused.kind[:1].lower() in "aeiou" else "a"
            raise TypeError(
                f"{name}() was given {article} {refused.kind} ({place}{refused.where.lstrip()}): only plain data "
                f"crosses from the evaluator to the program{SHARED_HINT}"
            ) from None


def _connect() -> socket.socket:
    address = os.path.join(_State.channel, SOCKET_NAME)
    deadline = time.monotonic() + CONNECT_WAIT_S
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(address)
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the program's process is not listening at {address}") from None
            time.sleep(0.01)


def _echo(reply: dict[str, Any]) -> None:
    """What the program printed, printed here, where the evaluator (or its caller) reads it."""
    for stream, text in ((sys.stdout, reply.get("out")), (sys.stderr, reply.get("err"))):
        if isinstance(text, str) and text:
            stream.write(text)
            stream.flush()


def _rebuilt(error: dict[str, Any]) -> BaseException:
    """The program's exception as the nearest builtin type with its arguments; RuntimeError when that
    is only Exception (a class of the program's own) or the type wants other arguments."""
    found = getattr(builtins, str(error.get("builtin")), None)
    failure: BaseException | None = None
    if isinstance(found, type) and issubclass(found, BaseException) and found not in (Exception, BaseException):
        try:
            failure = found(*error.get("args", ()))
        except Exception:  # noqa: BLE001 - e.g. UnicodeDecodeError wants five arguments
            failure = None
    if failure is None:
        failure = RuntimeError(f"{error.get('type')}: {error.get('message')}")
    failure.add_note(f"in the program's own process:\n{str(error.get('traceback', '')).rstrip()}")
    return failure


def run_as_main(argv: list[str]) -> int:
    """`python program.py ARGS` in a child interpreter: the program runs in its own process."""
    conn = Connection()
    try:
        return conn.run_main(argv)
    finally:
        conn.close()
