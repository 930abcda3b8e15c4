"""Scoring in a process of its own: nothing a submission returned is scored in the station's process.

`score(task, result)` sends the run's result to a scoring process of the task and waits for its
verdict. The process is a fresh interpreter (`python -m evaluators.scoring_process`), never a fork
of the station's threads; it sets its own address-space limit (RLIMIT_AS, `task.scorer_memory_mb`)
before it reads anything, and the station gives it `task.scorer_timeout_s` to answer. It lives on
after a scoring, so the caches a scorer keeps per process (scRNA's solution and compiled metrics)
stay warm; one that is killed or dies is replaced at the next scoring.

Who is charged for what goes wrong:
- the scorer raises an exception (ScorerFailure or any other) on a result: the task's own fault, as
  in the station's process before (the task checks its input's types and shapes first, so that
  whatever is left is its own bug): ScorerFailure;
- the scorer runs out of its memory (MemoryError, or the process dies of it) or of its time on a
  result: the submission's, an invalid verdict that says which limit it met;
- the task cannot be sent to a process, or one cannot be started: the station's, a RuntimeError
  (the worker makes it a system error).

The wire: frames of an 8-byte length and a payload. The station sends pickles (the task, then one
RunResult per scoring, arrays as out-of-band buffers, so a large embedding is not copied on the way
out); the process answers in JSON only, so the station unpickles nothing from it.
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable
from typing import IO, Any

from station.core.run_types import RunResult

from .base import ScorerFailure, Task, Verdict

FRAME = struct.Struct("<Q")
MAX_ANSWER_BYTES = 64 << 20  # a verdict's details and figure; far above any task's
KEEP_IDLE = 4  # idle scoring processes kept per task (one per evaluation scored at the same time)
START_TIMEOUT_S = 120.0  # a fresh interpreter and the task's imports, on a busy machine
PARENT_POLL_S = 1.0  # how soon a scoring process notices that the station's process ended
CHILD_ENV = {"MALLOC_ARENA_MAX": "2"}  # glibc's per-thread arenas reserve 64 MB of address space each
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")  # variables a scorer never needs


def scorer_environment(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """The station's environment without its secrets (API keys, the console's token): the scoring
    process reads what a submission returned, and a bug there must find no key to take."""
    return {name: value for name, value in environ.items() if not any(w in name.upper() for w in SECRET_WORDS)}


class ScoringExhausted(Exception):
    """The scoring process met its memory or time limit, or died, on a submission's result."""


class ScoringUnavailable(RuntimeError):
    """No scoring process could be started for the task: the station's fault, not the submission's."""


# -- the station's side -------------------------------------------------------------------------------
class ScoringProcess:
    """One scoring process for one task: started, fed results one at a time, killed."""

    def __init__(self, task: Task) -> None:
        self.memory_mb, self.timeout_s = task.scorer_memory_mb, task.scorer_timeout_s
        env = {**scorer_environment(os.environ), **CHILD_ENV}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evaluators.scoring_process", str(self.memory_mb), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        try:
            self._send(list(sys.path))  # first, so that the task's own modules import there
            self._send(task)
            answer = self._answer(START_TIMEOUT_S)
        except BaseException:
            self.kill()
            raise
        if answer.get("ready") is not True:
            self.kill()
            raise RuntimeError(f"the scoring process of task {task.kind} did not start: {answer.get('error')}")

    def score(self, result: RunResult) -> dict[str, Any]:
        """The process's answer for `result`: {"verdict": payload} or {"scorer_failure": message} or
        {"exhausted": what}. ScoringExhausted when it died or ran out of time (it is killed)."""
        try:
            self._send(("score", result))
            return self._answer(self.timeout_s)
        except (BrokenPipeError, ConnectionResetError):
            raise ScoringExhausted(self._death()) from None

    def warm_up(self, say: Callable[[str], None]) -> dict[str, Any]:
        """The task's warm_up, run in this process (each step it says passed on to `say`)."""
        try:
            self._send(("warm", None))
            answer = self._answer(self.timeout_s)
            while "say" in answer:
                say(str(answer["say"]))
                answer = self._answer(self.timeout_s)
            return answer
        except (BrokenPipeError, ConnectionResetError):
            raise ScoringExhausted(self._death()) from None

    def _send(self, message: Any) -> None:
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
        pipe = self.proc.stdin
        assert pipe is not None
        pipe.write(FRAME.pack(len(head)) + FRAME.pack(len(buffers)))
        pipe.write(head)
        for buffer in buffers:
            raw = buffer.raw()
            pipe.write(FRAME.pack(raw.nbytes))
            pipe.write(raw)
        pipe.flush()

    def _answer(self, timeout_s: float) -> dict[str, Any]:
        pipe = self.proc.stdout
        assert pipe is not None
        deadline = time.monotonic() + timeout_s
        data = bytearray()
        want = FRAME.size
        while len(data) < want:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                self.kill()
                raise ScoringExhausted(f"it took longer than its limit of {timeout_s:g} seconds")
            chunk = os.read(pipe.fileno(), min(want - len(data), 1 << 20))
            if not chunk:
                raise ScoringExhausted(self._death())
            data += chunk
            if want == FRAME.size and len(data) == FRAME.size:
                (size,) = FRAME.unpack(data)
                if size > MAX_ANSWER_BYTES:
                    self.kill()
                    raise RuntimeError(f"the scoring process answered {size:,} bytes")
                data, want = bytearray(), size
        answer = json.loads(bytes(data))
        if not isinstance(answer, dict):
            raise RuntimeError("the scoring process answered something that is not a JSON object")
        return answer

    def _death(self) -> str:
        try:
            code = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            how = f"was killed by {name}"
        else:
            how = f"exited with status {code}"
        return f"its process {how} (memory limit {self.memory_mb:,} MB)"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """SIGKILL only: the thread scoring with it, if any, sees it end and closes its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass


class _Pool:
    """Scoring processes per task (by identity: each task object its own): the idle ones, kept for
    the next scoring, and the busy ones, so that a station that stops can end those too."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: weakref.WeakKeyDictionary[Task, list[ScoringProcess]] = weakref.WeakKeyDictionary()
        self.busy: weakref.WeakKeyDictionary[Task, set[ScoringProcess]] = weakref.WeakKeyDictionary()

    def take(self, task: Task) -> ScoringProcess:
        with self.lock:
            kept = self._idle(task)
            while kept:
                proc = kept.pop()
                if proc.alive():
                    self.busy[task].add(proc)
                    return proc
                proc.kill()
        proc = ScoringProcess(task)
        with self.lock:
            self.busy[task].add(proc)
        return proc

    def give_back(self, task: Task, proc: ScoringProcess, keep: bool) -> None:
        with self.lock:
            self.busy[task].discard(proc)
            kept = self._idle(task)
            if keep and len(kept) < KEEP_IDLE and proc.alive():
                kept.append(proc)
                return
        proc.kill()

    def _idle(self, task: Task) -> list[ScoringProcess]:
        if task not in self.idle:  # the task's first scoring: its processes end when it is collected
            kept: list[ScoringProcess] = []
            busy: set[ScoringProcess] = set()
            self.idle[task], self.busy[task] = kept, busy
            weakref.finalize(task, _kill_all, kept, busy)
        return self.idle[task]

    def close(self, tasks: Iterable[Task] | None) -> None:
        with self.lock:
            chosen = list(self.idle.keys()) if tasks is None else [t for t in tasks if t in self.idle]
            idle = [proc for t in chosen for proc in self.idle.pop(t, [])]
            busy = [proc for t in chosen for proc in self.busy.get(t, ())]
        for proc in busy:
            proc.stop()
        _kill_all(idle)


def _kill_all(idle: list[ScoringProcess], busy: set[ScoringProcess] | None = None) -> None:
    for proc in list(busy or ()):
        proc.stop()
    for proc in list(idle):
        proc.kill()


POOL = _Pool()


def _take(task: Task) -> ScoringProcess:
    """An idle scoring process of the task's, or a new one; ScoringUnavailable when none can start."""
    try:
        return POOL.take(task)
    except (OSError, pickle.PicklingError, TypeError, AttributeError, RuntimeError, ScoringExhausted) as err:
        raise ScoringUnavailable(f"no scoring process for task {task.kind}: {type(err).__name__}: {err}") from err


def score(task: Task, result: RunResult) -> Verdict:
    """The task's verdict on `result`, judged in a scoring process of the task's. An exhausted
    memory or time limit is an invalid verdict (the submission's); ScorerFailure is the task's."""
    proc = _take(task)
    answer: dict[str, Any] = {}
    try:
        answer = proc.score(result)
    except ScoringExhausted as err:
        return Verdict(False, details=f"Scoring stopped: {err}; scoring this result exhausted its limits.")
    finally:  # a process that met a limit, or broke the wire, is not trusted with the next result
        POOL.give_back(task, proc, keep="verdict" in answer or "scorer_failure" in answer)
    return _verdict(answer, result)


def _verdict(answer: dict[str, Any], result: RunResult) -> Verdict:
    if "verdict" in answer:
        p = answer["verdict"]
        sort_key = tuple(p["sort_key"]) if p.get("sort_key") else None
        return Verdict(
            p["success"],
            p["score"],
            p["details"],
            p["metrics"],
            sort_key,
            p.get("figure"),
            p.get("samples"),
            p.get("certificate"),
        )
    if "exhausted" in answer:
        return Verdict(
            False, details=f"Scoring stopped: {answer['exhausted']}; scoring this result exhausted its limits."
        )
    raise ScorerFailure(str(answer.get("scorer_failure", "the scoring process gave no verdict")), result)


def warm_up(task: Task, say: Callable[[str], None]) -> None:
    """Pay the scorer's first-call costs (task.warm_up) in a scoring process, which is then kept for
    the task's first scoring; ValueError, naming the step, when it fails."""
    try:
        proc = _take(task)
    except ScoringUnavailable as err:
        raise ValueError(str(err)) from err
    answer: dict[str, Any] = {}
    try:
        answer = proc.warm_up(say)
    except ScoringExhausted as err:
        raise ValueError(f"the scorer's warm-up stopped: {err}") from None
    finally:
        POOL.give_back(task, proc, keep=answer.get("warmed") is True)
    if answer.get("warmed") is not True:
        raise ValueError(f"the scorer's warm-up failed: {answer.get('scorer_failure') or answer.get('exhausted')}")


def close(tasks: Iterable[Task] | None = None) -> None:
    """Ends the scoring processes of `tasks` (default: every task's), idle or busy: a scoring in
    flight then ends as exhausted, which a stopping station does not record."""
    POOL.close(tasks)


# -- the scoring process's side ------------------------------------------------------------------------
def _read_exact(pipe: IO[bytes], size: int) -> bytearray:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = pipe.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            raise EOFError
        got += n
    return data


def _receive_message(pipe: IO[bytes]) -> Any:
    sizes = _read_exact(pipe, 2 * FRAME.size)
    (head_size,), (count,) = FRAME.unpack(sizes[: FRAME.size]), FRAME.unpack(sizes[FRAME.size :])
    head = _read_exact(pipe, head_size)
    buffers = []
    for _ in range(count):
        (size,) = FRAME.unpack(_read_exact(pipe, FRAME.size))
        buffers.append(_read_exact(pipe, size))
    return pickle.loads(head, buffers=buffers)


def _reply(pipe: IO[bytes], answer: dict[str, Any]) -> None:
    data = json.dumps(answer, allow_nan=True).encode()
    pipe.write(FRAME.pack(len(data)) + data)
    pipe.flush()


def _judge(task: Task, result: RunResult) -> dict[str, Any]:
    try:
        verdict = task.score(result)
        payload = verdict.to_payload()
        json.dumps(payload, allow_nan=True)  # what the station records must be JSON
        return {"verdict": payload}
    except MemoryError:
        return {"exhausted": f"it ran out of its memory limit of {int(sys.argv[1]):,} MB"}
    except ScorerFailure as err:
        return {"scorer_failure": str(err)}
    except Exception as err:  # noqa: BLE001 - the task's scorer broke on a checked result: its fault
        traceback.print_exc()
        return {"scorer_failure": f"{type(err).__name__}: {err}"}


def _warm(task: Task, wire_out: IO[bytes]) -> dict[str, Any]:
    try:
        task.warm_up(lambda step: _reply(wire_out, {"say": step}))
        return {"warmed": True}
    except MemoryError:
        return {"exhausted": f"it ran out of its memory limit of {int(sys.argv[1]):,} MB"}
    except Exception as err:  # noqa: BLE001 - the station reports it as the task's
        traceback.print_exc()
        return {"scorer_failure": f"{type(err).__name__}: {err}"}


def _die_with(parent: int) -> None:
    """End this process when the station's process ends, whatever it is doing then. (Not
    PR_SET_PDEATHSIG: that follows the thread that started the process, and the station starts them
    from evaluation threads that end after each evaluation.)"""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="station-watch", daemon=True).start()


def main() -> None:
    memory_mb, parent = int(sys.argv[1]), int(sys.argv[2])
    _die_with(parent)
    limit = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # The wire keeps fds 0 and 1; whatever a scorer prints goes to stderr, never into an answer.
    wire_in, wire_out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        sys.path[:] = _receive_message(wire_in)
        task = _receive_message(wire_in)
    except EOFError:
        return
    except Exception as err:  # noqa: BLE001 - the station hears why, then stops this process
        _reply(wire_out, {"ready": False, "error": f"{type(err).__name__}: {err}"})
        return
    _reply(wire_out, {"ready": isinstance(task, Task)})
    while True:
        try:
            kind, result = _receive_message(wire_in)  # ("score", RunResult) or ("warm", None)
        except EOFError:
            return  # the station closed the pipe: it is done with this process
        except MemoryError:  # the rest of the message is still in the pipe: answer, then end
            _reply(wire_out, {"exhausted": f"its result did not fit in the memory limit of {memory_mb:,} MB"})
            return
        _reply(wire_out, _warm(task, wire_out) if kind == "warm" else _judge(task, result))
        del result


if __name__ == "__main__":
    main()
