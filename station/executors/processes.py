"""The processes of one local run: the CPU time and tasks below it, its exit in words, reading
its output pipes, and killing the whole tree."""

from __future__ import annotations

import math
import os
import signal
import subprocess
from pathlib import Path

from station.core.run_types import RunSpec
from station.executors.results import StreamCapture

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def exit_message(code: int | None) -> str:
    if code is None or code >= 0:
        return f"Execution failed with exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    hint = {"SIGKILL": " (memory limit?)", "SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)"}
    return f"Execution killed by signal {name}{hint.get(name, '')}"


def cpu_budget(spec: RunSpec) -> int:
    """CPU seconds the whole run may use: by default all its cores for the whole wall clock."""
    return spec.cpu_seconds or math.ceil(spec.timeout_s * max(1.0, spec.num_cpus))


def tree_usage(init: int) -> tuple[float, int]:
    """CPU seconds used below `init` (its reaped children included, its own start-up not) and
    the tasks (processes and threads) alive there now. A parent is read before its children, so
    a child reaped meanwhile is missed for once, never counted twice."""
    ticks = tasks = 0
    todo = [init]
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            children = [
                int(c)
                for tid in os.listdir(f"/proc/{pid}/task")
                for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
            ]
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile: its time is in its parent's cutime by now
        utime, stime, cutime, cstime = map(int, fields[11:15])  # fields 14-17 of proc(5)
        ticks += cutime + cstime + (utime + stime if pid != init else 0)
        tasks += int(fields[17]) if pid != init else 0  # field 20: num_threads
        todo += children
    return ticks / CLOCK_TICKS, tasks


def pump(stream, capture: StreamCapture) -> None:
    fd = stream.fileno()
    while data := os.read(fd, 1 << 16):
        capture.feed(data)
    stream.close()


def kill_tree(proc: subprocess.Popen) -> None:
    """Kill unshare's child, the namespace's PID 1, which takes every process inside with it
    (in process mode: the code's process group), then the launcher itself."""
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        children = []
    for child in map(int, children):
        for send in (os.killpg, os.kill):
            try:
                send(child, signal.SIGKILL)
            except OSError:
                pass
    proc.kill()
