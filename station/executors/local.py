"""LocalExecutor: runs one submission in a sandbox on this host (see docs/sandbox.md).

Per run: a fresh run dir under the scratch base holding `work/` (the scratch dir: the code's
working dir and HOME, with the submission file and the storage mountpoints) and `out/` (the
private results channel), both owned by the run's uid. The command line is

    setpriv --pdeathsig KILL -- unshare --fork --kill-child --mount-proc --pid --net --mount
        --ipc --uts [--user --map-root-user] python -I -S sandbox_init.py <run dir>/sandbox.json

sandbox_init builds the file-system view, drops privileges and execs the harness (function mode)
or `sh -c <entry>` (command mode); this side captures the streams (bounded), enforces the wall
clock by killing the namespace's PID 1 (which ends every process in it), reads the outcome
back as data (results.py) and deletes the run dir.

Modes, chosen once at construction: "namespaces" (root: new namespaces and a per-run uid),
"userns" (not root: the same namespaces inside a user namespace, capabilities dropped) and
"process" (no usable unshare: a plain process in its own session, rlimits and a scrubbed
environment only). RunResult.isolation says what was in force and what was missing.
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator, Literal

from .base import RunResult, RunSpec
from .results import ResultRefused, StreamCapture, load_result, read_status

HERE = Path(__file__).resolve().parent
INIT, HARNESS = HERE / "sandbox_init.py", HERE / "harness.py"
UID_BASE, UID_COUNT, SANDBOX_GID = 60001, 1000, 60000  # per-run uids; one group for writable storage
LOCK_DIR = Path("/run/station-sandbox")  # flock per uid: unique across executors and processes
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")  # fresh writable tmpfs per run
ALWAYS_HIDDEN = ("/root", "/home", "/run")  # empty read-only tmpfs (/run: host sockets)
NAMESPACE_FLAGS = ("--pid", "--net", "--mount", "--ipc", "--uts")
NAMESPACES = ["pid-namespace", "net-namespace", "mount-namespace", "ipc-namespace", "uts-namespace"]
FULL = NAMESPACES + ["read-only-root", "private-tmp", "uid", "no-capabilities", "no-new-privs", "rlimits"]
STALE_AFTER_S = 60  # an unlocked run dir this old belongs to a dead station
PIPE_GRACE_S = 2.0  # reading what is left in the pipes after the process ended or was killed
TOOL_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
PROGRESS_FILE, PROGRESS_POLL_S, PROGRESS_MAX_BYTES = "progress.txt", 1.0, 120  # a harness's "epoch 3/120"
Isolation = Literal["auto", "userns", "process"]


class SandboxError(Exception):
    """The sandbox could not be set up: a system error, not the code's fault."""


class LocalExecutor:
    name = "local"

    def __init__(self, scratch_base: str | Path | None = None, hide: list[Path] | tuple = (),
                 isolation: Isolation = "auto") -> None:
        """`hide`: host dirs masked with an empty tmpfs (the station dir, with its database).
        `isolation`: "auto" picks the strongest mode available; the others are for tests."""
        self.scratch_base = Path(scratch_base or tempfile.gettempdir()).resolve()
        self.hide = [Path(p) for p in hide]
        self.python = sys.executable
        self.root = os.geteuid() == 0
        self.setpriv = shutil.which("setpriv", path=TOOL_PATH)
        self.unshare = shutil.which("unshare", path=TOOL_PATH)
        self.mode = self._choose_mode(isolation)
        self.on_progress: Callable[[str, str], None] | None = None  # (run label, what its harness reported)
        self._live: set[subprocess.Popen] = set()  # runs in flight, killed by close()
        self._live_lock = threading.Lock()
        self._closed = False
        self._sweep()

    def _sweep(self) -> None:
        """Delete run dirs left by a station killed mid-run: nobody holds their lock any more."""
        for path in self.scratch_base.glob("station-*"):
            try:
                if not (path / "sandbox.json").exists() or time.time() - path.stat().st_mtime < STALE_AFTER_S:
                    continue
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(path, ignore_errors=True)
            except BlockingIOError:
                pass  # a run in flight, maybe another station's
            finally:
                os.close(fd)

    def _choose_mode(self, requested: Isolation) -> str:
        def works(flags: list[str]) -> bool:
            try:
                return subprocess.run([self.unshare, *flags, "true"], capture_output=True, timeout=30).returncode == 0
            except OSError:
                return False

        if requested != "process" and self.unshare:
            if requested == "auto" and self.root and works(self._namespace_flags("namespaces")):
                return "namespaces"
            if works(self._namespace_flags("userns")):
                return "userns"
        if requested == "userns":
            raise SandboxError("user namespaces are not available here")
        return "process"

    @staticmethod
    def _namespace_flags(mode: str) -> list[str]:
        user = ["--user", "--map-root-user"] if mode == "userns" else []
        return [*user, "--fork", "--kill-child", "--mount-proc", *NAMESPACE_FLAGS]

    def gpu_count(self) -> int:
        """NVIDIA GPUs the kernel driver knows on this host (0 without a driver)."""
        try:
            return len(os.listdir("/proc/driver/nvidia/gpus"))
        except OSError:
            return 0

    def describe(self) -> str:
        layers = {"namespaces": "pid/net/mount/ipc/uts namespaces, read-only host, per-run uid",
                  "userns": "user+pid/net/mount/ipc/uts namespaces, read-only host, no capabilities",
                  "process": "plain process (no namespaces: no network or file-system isolation)"}[self.mode]
        return f"local sandbox: {layers}, rlimits, scrubbed environment; scratch in {self.scratch_base}"

    def close(self) -> None:
        """Kill every run in flight (a stopping station re-runs them when it resumes); no new runs start."""
        with self._live_lock:
            self._closed = True
            live = list(self._live)
        for proc in live:
            _kill(proc)

    # -- one run ---------------------------------------------------------------------------------
    def run(self, spec: RunSpec) -> RunResult:
        began = time.monotonic()
        try:
            _check(spec)
            with ExitStack() as stack:
                uid = stack.enter_context(_uid_lease()) if self.root and self.mode != "userns" else None
                run_dir = Path(tempfile.mkdtemp(prefix=f"station-{_safe(spec.label)}-", dir=self.scratch_base))
                lock = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                stack.callback(os.close, lock)
                fcntl.flock(lock, fcntl.LOCK_EX)  # "in use", for _sweep
                stack.callback(shutil.rmtree, run_dir, ignore_errors=True)
                self._prepare(spec, run_dir, uid)
                result = self._launch(spec, run_dir)
        except (SandboxError, ValueError, OSError) as err:
            result = RunResult(status="system_error", error=f"Sandbox error: {err}")
        result.duration_s = time.monotonic() - began
        return result

    def _prepare(self, spec: RunSpec, run_dir: Path, uid: int | None) -> None:
        scratch, out = run_dir / "work", run_dir / "out"
        scratch.mkdir(mode=0o700)
        out.mkdir(mode=0o700)
        (scratch / spec.filename).write_text(spec.code)
        for m in spec.mounts:
            if not Path(m.source).is_dir():
                raise SandboxError(f"mount source {m.source} is not a directory")
            target = scratch / m.target
            if self.mode == "process":  # no mount namespace: a link, and nothing is read-only
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(Path(m.source).resolve())
            else:
                target.mkdir(parents=True, exist_ok=True)
            if m.writable and uid is not None:
                share_with_group(Path(m.source), SANDBOX_GID)
        if uid is not None:
            for path in (scratch, out, scratch / spec.filename):
                os.chown(path, uid, SANDBOX_GID)
            run_dir.chmod(0o711)  # process mode reaches work/ through it; the rest stays root's
        config = {
            "mode": self.mode, "uid": uid, "gid": SANDBOX_GID, "run_dir": str(run_dir),
            "scratch": str(scratch), "out_dir": str(out), "tmpfs_mb": spec.max_file_mb,
            "private_tmp": list(PRIVATE_TMP),
            "hide": sorted({os.path.realpath(p) for p in (*ALWAYS_HIDDEN, *self.hide, self.scratch_base)}),
            "keep": sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, HERE)}),
            "mounts": [{"source": str(m.source), "target": m.target, "writable": m.writable} for m in spec.mounts],
            "rlimits": self._rlimits(spec, uid),
            "argv": ([self.python, "-s", str(HARNESS), spec.entry, spec.filename, str(out)]
                     if spec.mode == "function" else ["/bin/sh", "-c", spec.entry]),
        }
        fd = os.open(run_dir / "sandbox.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)

    def _rlimits(self, spec: RunSpec, uid: int | None) -> dict[str, list[int | None]]:
        cpu = spec.cpu_seconds or math.ceil(spec.timeout_s)
        memory = spec.memory_mb << 20 if spec.memory_mb else None
        limits = {"RLIMIT_CPU": [cpu, cpu + 1], "RLIMIT_AS": [memory, memory],
                  "RLIMIT_FSIZE": [spec.max_file_mb << 20] * 2, "RLIMIT_CORE": [0, 0]}
        if self.mode != "process" or uid is not None:  # otherwise it would count all of our user's processes
            limits["RLIMIT_NPROC"] = [spec.max_processes] * 2
        return limits

    def _command(self, run_dir: Path) -> list[str]:
        prefix = [self.setpriv, "--pdeathsig", "KILL", "--"] if self.setpriv else []
        if self.mode != "process":
            prefix += [self.unshare, *self._namespace_flags(self.mode)]
        return [*prefix, self.python, "-I", "-S", str(INIT), str(run_dir / "sandbox.json")]

    def _launch(self, spec: RunSpec, run_dir: Path) -> RunResult:
        captures = StreamCapture(spec.max_output_bytes), StreamCapture(spec.max_output_bytes)
        with self._live_lock:
            if self._closed:
                raise SandboxError("the executor was closed: the station is stopping")
            env = {**environment(spec, run_dir / "work"), "STATION_PROGRESS": str(run_dir / "out" / PROGRESS_FILE)}
            proc = subprocess.Popen(self._command(run_dir), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, cwd=run_dir, start_new_session=True)
            self._live.add(proc)
        readers = [threading.Thread(target=_pump, args=(stream, capture), daemon=True)
                   for stream, capture in zip((proc.stdout, proc.stderr), captures)]
        for reader in readers:
            reader.start()
        try:  # a pidfd wakes us the moment it exits (Popen.wait(timeout) polls, up to 50 ms late)
            pidfd = os.pidfd_open(proc.pid)
            try:
                timed_out = not self._wait_reporting(pidfd, spec, run_dir / "out" / PROGRESS_FILE)
            finally:
                os.close(pidfd)
        finally:
            if proc.poll() is None:
                _kill(proc)
            proc.wait()
            with self._live_lock:
                self._live.discard(proc)
        for reader in readers:
            reader.join(PIPE_GRACE_S)
        result = RunResult(status="ok", stdout=captures[0].text(), stderr=captures[1].text())
        return self._outcome(spec, run_dir, proc.returncode, timed_out, result)

    def _wait_reporting(self, pidfd: int, spec: RunSpec, progress: Path) -> bool:
        """Wait for the run to end (True) or its time to run out (False), passing on what a training
        harness reports about its progress meanwhile."""
        deadline = time.monotonic() + spec.timeout_s
        last = None
        while (left := deadline - time.monotonic()) > 0:
            if select.select([pidfd], [], [], min(left, PROGRESS_POLL_S))[0]:
                return True
            if self.on_progress is not None and (text := read_progress(progress)) and text != last:
                last = text
                self.on_progress(spec.label, text)
        return False

    def _outcome(self, spec: RunSpec, run_dir: Path, returncode: int, timed_out: bool,
                 result: RunResult) -> RunResult:
        status = read_status(str(run_dir))
        result.isolation = self._isolation(status)
        if timed_out:
            result.status, result.error = "timeout", f"Execution timed out after {spec.timeout_s:g} seconds"
            return result
        if status is None and returncode < 0 and self.mode == "process":
            # Without namespaces the code runs as the supervisor's user and can kill it: its fault.
            result.status, result.error = "error", f"{exit_message(returncode)}: the run's supervisor was killed"
            return result
        if status is None or "setup_error" in status:  # the code never ran: a system error
            last_line = (result.stderr.strip().splitlines() or [""])[-1]
            why = status["setup_error"] if status else f"it did not start (exit code {returncode}) {last_line}"
            result.status, result.error = "system_error", f"Sandbox error: {why.strip()}"
            return result
        code = -status["signal"] if "signal" in status else status.get("exit")
        result.exit_code = code if isinstance(code, int) else None
        if spec.mode == "function":
            try:
                record = load_result(str(run_dir / "out"), spec.max_file_mb << 20)
            except (ResultRefused, OSError) as err:
                result.status, result.error = "error", f"Result refused: {err}"
                return result
            if record is not None and record.status == "error":
                result.status, result.error, result.traceback = "error", record.error, record.traceback
                return result
            if record is not None and code == 0:
                result.value = record.value
                return result
        elif code == 0:
            return result
        result.status = "error"
        result.error = (exit_message(code) if code != 0 else
                        "Execution failed: the process exited before the entry point returned")
        return result

    def _isolation(self, status: dict | None) -> list[str]:
        layers = NAMESPACES[:] if self.mode != "process" else []
        if self.mode == "userns":
            layers.insert(0, "user-namespace")
        inside = status.get("isolation") if status else None
        layers += [str(x) for x in inside] if isinstance(inside, list) else []
        layers += ["scrubbed-env"] + (["pdeathsig"] if self.setpriv else [])
        have = {x.split()[0] for x in layers}
        return layers + [f"missing: {x}" for x in FULL if x not in have]


def environment(spec: RunSpec, scratch: Path) -> dict[str, str]:
    """Built from nothing: not one variable of the station's own environment gets through."""
    threads = str(max(1, int(spec.num_cpus)))
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(scratch), "LANG": "C.UTF-8",
           "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
           "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    if spec.num_gpus == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(spec.env)
    return env


def read_progress(path: Path) -> str | None:
    """What the run's harness last reported: untrusted bytes from the sandbox, so short, decoded
    leniently and stripped of control characters before anyone displays them."""
    try:  # never follow a link the code planted, never block on a FIFO, read only a regular file
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, PROGRESS_MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    text = "".join(c for c in raw.decode("utf-8", errors="replace") if c.isprintable())
    return text.strip() or None


def exit_message(code: int | None) -> str:
    if code is None or code >= 0:
        return f"Execution failed with exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    hint = {"SIGKILL": " (memory limit?)", "SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)"}
    return f"Execution killed by signal {name}{hint.get(name, '')}"


def share_with_group(root: Path, gid: int) -> None:
    """Make a writable mount usable by every run's uid: group `gid`, group read-write, setgid dirs.

    Files the station wrote (root-owned) get fixed here; files the code writes already come out
    right (umask 002 in a setgid dir). Walks with dir fds and never follows a link, so a link or a
    swap planted by a concurrent run cannot redirect the chown/chmod."""
    def fix(fd: int, info: os.stat_result, want: int) -> None:
        if info.st_gid != gid:
            os.fchown(fd, -1, gid)
        if stat.S_IMODE(info.st_mode) | want != stat.S_IMODE(info.st_mode):
            os.fchmod(fd, stat.S_IMODE(info.st_mode) | want)

    for _dir, _dirs, files, dfd in os.fwalk(root, follow_symlinks=False):
        fix(dfd, os.fstat(dfd), 0o2070)
        for name in files:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:
                continue  # a link, a socket, or gone
            try:
                info = os.fstat(fd)
                if stat.S_ISREG(info.st_mode):
                    fix(fd, info, 0o060)
            finally:
                os.close(fd)


@contextmanager
def _uid_lease() -> Iterator[int]:
    """A uid no other run on this host is using (a flock per uid; released if we die)."""
    LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    for uid in range(UID_BASE, UID_BASE + UID_COUNT):
        fd = os.open(LOCK_DIR / f"uid-{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            os.close(fd)
        return
    raise SandboxError(f"all {UID_COUNT} sandbox uids are in use")


def _pump(stream, capture: StreamCapture) -> None:
    fd = stream.fileno()
    while data := os.read(fd, 1 << 16):
        capture.feed(data)
    stream.close()


def _kill(proc: subprocess.Popen) -> None:
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


def _check(spec: RunSpec) -> None:
    if spec.mode not in ("function", "command"):
        raise ValueError(f"unknown mode {spec.mode!r}")
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", spec.filename) or spec.filename.startswith(".."):
        raise ValueError(f"bad file name {spec.filename!r}")
    for m in spec.mounts:
        parts = Path(m.target).parts
        if not parts or m.target.startswith("/") or any(p in ("..", ".") for p in parts):
            raise ValueError(f"bad mount target {m.target!r}")


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:40] or "run"
