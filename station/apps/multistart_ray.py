"""`station multistart --on ray`: each branch's `station run` as a Ray task, one CPU each.

The cluster is the one the station's config names for its evaluations (research.executor.ray_address;
none: a local Ray instance started for the multistart with research.executor.ray_num_cpus CPUs),
joined or started as RayExecutor does it, once per process. The task runs the branch's `station run
--dir DIR/branches/N --until-tick LAST` on its node with the node's Python and environment, its output
appended to DIR/branches/N.log. So the multistart's folder must be at the same path on every node
(this host, or a shared file system); a node that does not see the branch says so, and the
multistart stops with that one line.

`_run_branches` looks at a RayBranch as at a local process (poll, returncode, wait, send_signal). A
signal is passed on through the file DIR/branches/N.signal, which the task watches and sends to its
run: SIGINT makes it commit its turn in flight and stop, as a local branch does on Ctrl-C. A
multistart killed outright takes its tasks with it (a local instance dies with its driver; a cluster
ends the tasks of a driver that is gone), and a task's worker that dies ends its run (parent-death
signal); the branch's run.lock keeps any second run out of its directory meanwhile.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from station.apps.cli_commands import CliError
from station.core.store import Store

POLL_S = 0.1  # how often a task looks at its run and its signal file (a stat), and a RayBranch's wait at it
_connected: list[Any] = []  # [the remote task] once Ray is joined or started (once per process)


def start_on_ray(directory: Path, log: Path, arguments: list[str]) -> RayBranch:
    """Branch `directory`'s `station ARGUMENTS` (its run) as a Ray task on the cluster its config names."""
    if not _connected:
        from station.executors.ray_executor import RayExecutor

        executor = RayExecutor(_executor_config(directory))
        try:
            cluster = executor.connect()
        except Exception as err:  # noqa: BLE001 - unreachable, refused, failed to start: said in one line
            raise CliError(f"--on ray: {' '.join(str(err).split()) or type(err).__name__}") from None
        atexit.register(executor.close)  # a local instance stops, a cluster is left, as after a station's runs
        _connected.append(cluster.remote(num_cpus=1, max_retries=0)(_run_on_node))
    import ray

    signal_file = _signal_file(directory)
    signal_file.unlink(missing_ok=True)  # one left by an interrupted multistart is no request to this run
    here = str(directory.resolve())  # the node's working folder is Ray's
    arguments = [here if argument == str(directory) else argument for argument in arguments]
    ref = _connected[0].remote(here, str(log.resolve()), str(signal_file.resolve()), arguments)
    return RayBranch(ray, ref, signal_file, log)


def _executor_config(directory: Path) -> Any:
    """The branch's research.executor (where its Ray cluster is); a station without research: the defaults."""
    from station.apps.endpoints import stored_config
    from station.core.config import ExecutorConfig

    store = Store(directory)
    try:
        research = getattr(stored_config(store), "research", None)
    finally:
        store.close()
    return research.executor if research is not None else ExecutorConfig()


def _signal_file(directory: Path) -> Path:
    return directory.with_name(f"{directory.name}.signal")


class RayBranch:
    """A branch's Ray task, looked at as a local branch's process is (subprocess.Popen's methods)."""

    def __init__(self, ray: Any, ref: Any, signal_file: Path, log: Path) -> None:
        self._ray, self._ref, self._signal_file, self._log = ray, ref, signal_file, log
        self.returncode: Any = None  # an int once it ended (typed as Popen's, which callers read as an int)

    def poll(self) -> int | None:
        if self.returncode is None and self._ray.wait([self._ref], timeout=0)[0]:
            self.returncode = self._outcome()
        return self.returncode

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(POLL_S)
        return int(self.returncode)

    def send_signal(self, sig: int) -> None:
        """Sent on by the task to its run (before the run starts: it starts none)."""
        if self.returncode is None:
            self._signal_file.write_text(str(int(sig)), encoding="utf-8")

    def _outcome(self) -> int:
        try:
            result = self._ray.get(self._ref)
        except Exception as err:  # noqa: BLE001 - its worker or node died, the cluster is gone: said in the log
            with open(self._log, "a", encoding="utf-8") as log:
                log.write(f"\nRay: the branch's task failed: {type(err).__name__}: {err}\n")
            return -1
        if isinstance(result, str):  # the node's refusal
            raise CliError(result)
        return int(result)


# -- on the node --------------------------------------------------------------------------------
def _run_on_node(directory: str, log: str, signal_file: str, arguments: list[str]) -> int | str:
    """The Ray task: the branch's `station run`, with the signals the multistart asks for passed on."""
    if not Store.exists(Path(directory)):
        return (
            f"the Ray node {socket.gethostname()} does not see the branch {directory}: the multistart's folder "
            "must be at the same path on every Ray node (a shared file system), or run with --on local"
        )
    asked = _take(Path(signal_file))
    if asked is not None:
        return -asked  # stopped before it began
    command = [sys.executable, "-m", "station.apps.cli", *arguments]
    with open(log, "ab") as output:
        run = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=output, stderr=output, preexec_fn=_die_with_worker
        )
    while run.poll() is None:
        try:
            asked = _take(Path(signal_file))
            if asked is not None:
                run.send_signal(asked)
            time.sleep(POLL_S)
        except KeyboardInterrupt:  # Ray's cancel, or a Ctrl-C that reached the worker: the run stops cleanly
            run.send_signal(signal.SIGINT)
    return run.returncode


def _take(signal_file: Path) -> int | None:
    """The signal the multistart asks for, if any; taken (the file removed), so each is sent once."""
    try:
        asked = int(signal_file.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):  # none, or being written: looked at again
        return None
    signal_file.unlink(missing_ok=True)
    return asked


def _die_with_worker() -> None:
    """In the run's process before it starts: killed when the task's worker dies (Linux), so a task that
    Ray ends (its driver gone, a forced cancel) leaves no run behind; and SIGINT as Python's default (a
    Ray worker's thread may block or ignore it, and a child inherits both), so the run gets the interrupt,
    even one that comes before its own handler is set."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
