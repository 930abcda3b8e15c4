"""LocalExecutor: runs one submission in a sandbox on this host (see docs/sandbox.md).

Per run: a fresh run dir under the scratch base holding `work/` (the scratch dir: the code's
working dir and HOME, with the submission file and the storage mountpoints) and `out/` (the
private results channel), both owned by the run's uid. The command line is

    setpriv --pdeathsig KILL -- unshare --fork --kill-child --mount-proc --pid --net --mount
        --ipc --uts [--user --map-root-user] python -I -S /dev/fd/<sandbox_init.py> <sandbox.json's fd>

(both files passed as descriptors: PID 1's command line, which the code could read, names no host
path). sandbox_init builds the file-system view, with the run's folders at neutral paths (RUN_*)
and an empty mount table, drops privileges, closes the mount-table system calls to the code and
execs the harness (function mode) or `sh -c <entry>` (command mode); this side captures the
streams (bounded), enforces the wall clock and the caps (_Watch: CPU time of the whole process
tree, processes, disk) by killing the namespace's PID 1 (which ends every process in it), tidies
the writable storage (disk.py), reads the outcome back as data (results.py) and deletes the run
dir.

Modes, chosen once at construction: "namespaces" (root: new namespaces and a per-run uid),
"userns" (not root: the same namespaces inside a user namespace, capabilities dropped) and
"process" (no usable unshare: a plain process in its own session, rlimits and a scrubbed
environment only). RunResult.isolation says what was in force and what was missing.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import re
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from station.core.run_types import CHANNEL_ENV, Mount, RunResult, RunSpec, RunStatus
from station.executors import disk, shares
from station.executors.processes import cpu_budget, exit_message, kill_tree, pump, tree_usage
from station.executors.results import ResultRefused, StreamCapture, load_result, read_status

HERE = Path(__file__).resolve().parent
INIT, HARNESS = HERE / "sandbox_init.py", HERE / "harness.py"
UID_BASE, UID_COUNT, SANDBOX_GID = 60001, 1000, 60000  # per-run uids; one group for writable storage
LOCK_DIR = Path("/run/station-sandbox")  # flock per uid: unique across executors and processes
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")  # fresh writable tmpfs per run
# Where a run sees its own folders (namespace modes): names that say nothing of the host, the
# station, the task or its data. The scratch dir is also the working dir and HOME.
RUN_ROOT = "/run"
RUN_SCRATCH, RUN_OUT, RUN_HARNESS = f"{RUN_ROOT}/work", f"{RUN_ROOT}/out", f"{RUN_ROOT}/harness/harness.py"
# sitecustomize.py for every Python process of a run: where the sandbox has its copy, and (process mode) ours
RUN_SITE, HOST_SITE = f"{RUN_ROOT}/harness/site", HERE / "harness_site"
RUN_CHANNEL = f"{RUN_ROOT}/channel"  # a run with a companion: the folder both programs see
GPU_DEVICES = re.compile(r"nvidia.*")  # /dev entries a run given GPUs needs (driver, uvm, control)
NAMESPACE_FLAGS = ("--pid", "--net", "--mount", "--ipc", "--uts")
NAMESPACES = ["pid-namespace", "net-namespace", "mount-namespace", "ipc-namespace", "uts-namespace"]
FULL = NAMESPACES + [
    "allow-list-root",
    "read-only-root",
    "private-tmp",
    "nosuid-nodev",
    "neutral-paths",
    "hidden-mounts",
    "uid",
    "no-capabilities",
    "no-new-privs",
    "rlimits",
    "no-statmount",
]
CAPS = ["cpu-total", "process-count", "disk-quotas", "storage-tidy"]  # enforced from here, in every mode
STALE_AFTER_S = 60  # an unlocked run dir this old belongs to a dead station
RUN_DIR_NAME = re.compile(r"station-[A-Za-z0-9_.-]*-[a-z0-9_]{8}")  # mkdtemp(prefix=f"station-{label}-")
# what a run dir may hold, or part of it
RUN_DIR_ENTRIES = {"work", "out", "root", "companion", "channel", "sandbox.json", "status.json"}
PIPE_GRACE_S = 2.0  # reading what is left in the pipes after the process ended or was killed
TOOL_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
PROGRESS_FILE, PROGRESS_MAX_BYTES = "progress.txt", 120  # a harness's "epoch 3/120"
POLL_S = 1.0  # progress, CPU time and processes are looked at this often
DISK_POLL_S, DISK_DUTY = 2.0, 20  # disk use: every 2 s at most, and at most 1/20 of the time walking
Isolation = Literal["auto", "userns", "process"]


class SandboxError(Exception):
    """The sandbox could not be set up: a system error, not the code's fault."""


class LocalExecutor:
    name = "local"

    def __init__(
        self, scratch_base: str | Path | None = None, hide: list[Path] | tuple = (), isolation: Isolation = "auto"
    ) -> None:
        """`hide`: host dirs that must never enter a run (the station dir, with its database): a
        run's root holds only what it is given, so this only keeps package dirs inside them out.
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
        self._swept_at = 0.0
        self._sweep()

    def _sweep(self) -> None:
        """Delete run dirs left by a station killed mid-run, whatever is left in them: unlocked,
        idle for a while, named and filled like a run dir and ours. Called at the start and again by
        later runs once STALE_AFTER_S has passed: a station restarted right after a kill finds its
        predecessor's run dirs too fresh at first, and removes them a minute later."""
        self._swept_at = time.monotonic()
        for path in self.scratch_base.glob("station-*"):
            if not RUN_DIR_NAME.fullmatch(path.name):
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                info = os.fstat(fd)
                if (
                    info.st_uid != os.geteuid()
                    or time.time() - info.st_mtime < STALE_AFTER_S
                    or not set(os.listdir(fd)) <= RUN_DIR_ENTRIES
                ):
                    continue
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                disk.remove_tree(path)
            except OSError:
                pass  # locked: a run in flight, maybe another station's
            finally:
                os.close(fd)

    def _choose_mode(self, requested: Isolation) -> str:
        def works(flags: list[str]) -> bool:  # called only once unshare is found
            try:
                return (
                    subprocess.run(
                        [cast(str, self.unshare), *flags, "true"], capture_output=True, timeout=30
                    ).returncode
                    == 0
                )
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
        layers = {
            "namespaces": "pid/net/mount/ipc/uts namespaces, read-only host, per-run uid",
            "userns": "user+pid/net/mount/ipc/uts namespaces, read-only host, no capabilities",
            "process": "plain process (no namespaces: no network or file-system isolation)",
        }[self.mode]
        return (
            f"local sandbox: {layers}, rlimits, CPU/process/disk caps, scrubbed environment; "
            f"scratch in {self.scratch_base}"
        )

    def close(self) -> None:
        """Kill every run in flight (a stopping station re-runs them when it resumes); no new runs start."""
        with self._live_lock:
            self._closed = True
            live = list(self._live)
        for proc in live:
            kill_tree(proc)

    # -- one run ---------------------------------------------------------------------------------
    def run(self, spec: RunSpec) -> RunResult:
        began = time.monotonic()
        if began - self._swept_at > STALE_AFTER_S:
            self._sweep()
        try:
            _check(spec)
            with ExitStack() as stack:
                uid = stack.enter_context(_uid_lease()) if self.root and self.mode != "userns" else None
                # a companion gets a uid of its own: it cannot signal, trace or read the main code
                apart = stack.enter_context(_uid_lease()) if uid is not None and spec.companion else None
                run_dir = Path(tempfile.mkdtemp(prefix=f"station-{_safe(spec.label)}-", dir=self.scratch_base))
                lock = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                stack.callback(os.close, lock)
                fcntl.flock(lock, fcntl.LOCK_EX)  # "in use", for _sweep
                stack.callback(disk.remove_tree, run_dir)
                storages = self._prepare(spec, run_dir, uid, apart)
                result = self._launch(spec, run_dir, _Watch(spec, run_dir, storages, self.mode))
        except (SandboxError, ValueError, OSError) as err:
            result = RunResult(status="system_error", error=f"Sandbox error: {err}")
        result.duration_s = time.monotonic() - began
        return result

    def _prepare(self, spec: RunSpec, run_dir: Path, uid: int | None, apart: int | None = None) -> list[_Storage]:
        """Make the run dir and sandbox.json; tidy and measure the writable storage (the quotas'
        starting point). `apart`: the companion's uid, if it has one of its own."""
        scratch, out = run_dir / "work", run_dir / "out"
        scratch.mkdir(mode=0o700)
        out.mkdir(mode=0o700)
        (run_dir / "root").mkdir(mode=0o700)  # the sandbox's own root is mounted here, in its namespace only
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
        storages: dict[str, _Storage] = {}  # one per host dir, even when mounted twice
        for m in spec.mounts:
            if m.writable and (path := os.path.realpath(m.source)) not in storages:
                storages[path] = _Storage(m.target, Path(path))
        for s in storages.values():
            s.account = _account(spec, s, uid)
        if uid is not None:
            for owned in (scratch, out, scratch / spec.filename):
                os.chown(owned, uid, SANDBOX_GID)
            run_dir.chmod(0o711)  # process mode reaches work/ through it; the rest stays root's
        inside = self.inside(run_dir)
        config = {
            "mode": self.mode,
            "uid": uid,
            "gid": SANDBOX_GID,
            "uid_range": [UID_BASE, UID_BASE + UID_COUNT],  # named in the run's /etc/passwd
            "run_dir": str(run_dir),
            "new_root": str(run_dir / "root"),
            "scratch": str(scratch),
            "out_dir": str(out),
            "run_root": RUN_ROOT,
            "inside": inside,
            "harness": str(HARNESS),
            "tmpfs_mb": spec.max_file_mb,
            "private_tmp": list(PRIVATE_TMP),
            "keep": interpreter_paths(self.hide, self.scratch_base),
            "devices": gpu_devices() if spec.num_gpus else [],
            "loopback": spec.loopback,
            "mounts": _mount_records(spec.mounts),
            "rlimits": self._rlimits(spec, uid),
            "channel": str(run_dir / "channel") if spec.companion else None,
            "companion": self._prepare_companion(spec, run_dir, apart),
            "argv": (
                [self.python, "-s", inside["harness"], spec.entry, spec.filename, inside["out"]]
                if spec.mode == "function"
                else ["/bin/sh", "-c", spec.entry]
            ),
        }
        fd = os.open(run_dir / "sandbox.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)
        return list(storages.values())

    def _prepare_companion(self, spec: RunSpec, run_dir: Path, apart: int | None) -> dict | None:
        """The companion's scratch dir (`companion/`, holding its script and mountpoints) and the
        channel (`channel/`), both its own: the channel is writable by it alone and readable by
        the main code. Returns its entry of sandbox.json (None without a companion)."""
        comp = spec.companion
        if comp is None:
            return None
        scratch, channel = run_dir / "companion", run_dir / "channel"
        scratch.mkdir(mode=0o700)
        channel.mkdir(mode=0o755)
        (scratch / comp.filename).write_text(comp.code)
        for m in comp.mounts:
            if not Path(m.source).is_dir():
                raise SandboxError(f"companion mount source {m.source} is not a directory")
            target = scratch / m.target
            target.parent.mkdir(parents=True, exist_ok=True)
            if self.mode == "process":
                target.symlink_to(Path(m.source).resolve())
            else:
                target.mkdir(exist_ok=True)
        if apart is not None:  # a group of its own too: nothing it makes is the main code's by group
            for owned in (scratch, channel, scratch / comp.filename):
                os.chown(owned, apart, apart)
        cwd = str(scratch) if self.mode == "process" else self.inside(run_dir)["scratch"]
        # its own mounts, not the main code's, are what its imports must take as source only
        own = environment(dataclasses.replace(spec, mounts=list(comp.mounts)), cwd)
        env = {**own, CHANNEL_ENV: self.inside(run_dir)["channel"]}
        return {
            "uid": apart,
            "gid": apart if apart is not None else SANDBOX_GID,
            "scratch": str(scratch),
            "mounts": _mount_records(list(comp.mounts)),
            "argv": [self.python, "-s", comp.filename],
            "env": env,
            "cwd": cwd,
        }

    def inside(self, run_dir: Path) -> dict[str, str]:
        """The paths the run sees for its scratch dir, results dir, harness and channel: neutral
        ones in the namespace modes; without a mount namespace ("process") the host's own."""
        if self.mode == "process":
            return {
                "scratch": str(run_dir / "work"),
                "out": str(run_dir / "out"),
                "harness": str(HARNESS),
                "channel": str(run_dir / "channel"),
            }
        return {"scratch": RUN_SCRATCH, "out": RUN_OUT, "harness": RUN_HARNESS, "channel": RUN_CHANNEL}

    def _rlimits(self, spec: RunSpec, uid: int | None) -> dict[str, list[int | None]]:
        cpu = cpu_budget(spec)  # per process here; the whole tree's total is watched by _Watch
        memory = spec.memory_mb << 20 if spec.memory_mb else None
        limits: dict[str, list[int | None]] = {
            "RLIMIT_CPU": [cpu, cpu + 1],
            "RLIMIT_AS": [memory, memory],
            "RLIMIT_FSIZE": [spec.max_file_mb << 20] * 2,
            "RLIMIT_CORE": [0, 0],
        }
        if self.mode != "process" or uid is not None:  # otherwise it would count all of our user's processes
            # one more than allowed, so that _Watch sees the excess and says why the run failed
            limits["RLIMIT_NPROC"] = [spec.max_processes + 1] * 2
        return limits

    def _command(self, script: int, config: int) -> list[str]:
        """The launcher's command line, which becomes PID 1's: the init script and sandbox.json
        come as inherited descriptors, so it names no host path beyond the interpreter's."""
        prefix = [self.setpriv, "--pdeathsig", "KILL", "--"] if self.setpriv else []
        if self.mode != "process":
            prefix += [cast(str, self.unshare), *self._namespace_flags(self.mode)]  # namespace modes need unshare
        return [*prefix, self.python, "-I", "-S", f"/dev/fd/{script}", str(config)]

    def _launch(self, spec: RunSpec, run_dir: Path, watch: _Watch) -> RunResult:
        captures = StreamCapture(spec.max_output_bytes), StreamCapture(spec.max_output_bytes)
        with self._live_lock:
            if self._closed:
                raise SandboxError("the executor was closed: the station is stopping")
            inside = self.inside(run_dir)
            env = {**environment(spec, inside["scratch"]), "STATION_PROGRESS": f"{inside['out']}/{PROGRESS_FILE}"}
            if spec.companion is not None:
                env[CHANNEL_ENV] = inside["channel"]
            watch.since = time.time()  # what the storage holds from here on may be this run's
            with ExitStack() as files:  # ours closed once the launcher has its copies
                script = os.open(INIT, os.O_RDONLY | os.O_CLOEXEC)
                files.callback(os.close, script)
                config = os.open(run_dir / "sandbox.json", os.O_RDONLY | os.O_CLOEXEC)
                files.callback(os.close, config)
                proc = subprocess.Popen(
                    self._command(script, config),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                    cwd=run_dir,
                    start_new_session=True,
                    pass_fds=(script, config),
                )
            self._live.add(proc)
        readers = [
            threading.Thread(target=pump, args=(stream, capture), daemon=True)
            for stream, capture in zip((proc.stdout, proc.stderr), captures)
        ]
        for reader in readers:
            reader.start()
        try:  # a pidfd wakes us the moment it exits (Popen.wait(timeout) polls, up to 50 ms late)
            pidfd = os.pidfd_open(proc.pid)
            try:
                stop = self._supervise(proc, pidfd, spec, watch, run_dir / "out" / PROGRESS_FILE)
            finally:
                os.close(pidfd)
        finally:
            if proc.poll() is None:
                kill_tree(proc)
            proc.wait()
            with self._live_lock:
                self._live.discard(proc)
        for reader in readers:
            reader.join(PIPE_GRACE_S)
        left = watch.at_end()  # tidies the storage whatever happened; a quota the run's leftovers break
        if left is not None and (stop is None or stop[0] == "timeout"):
            stop = ("error", left)
        result = RunResult(status="ok", stdout=captures[0].text(), stderr=captures[1].text())
        return self._outcome(spec, run_dir, proc.returncode, stop, result)

    def _supervise(
        self, proc: subprocess.Popen, pidfd: int, spec: RunSpec, watch: _Watch, progress: Path
    ) -> tuple[RunStatus, str] | None:
        """Wait for the run to end (None) or for a reason to stop it: ("timeout" or "error", why).
        Meanwhile pass on what a training harness reports about its progress, and watch the caps."""
        deadline = time.monotonic() + spec.timeout_s
        last = None
        while (left := deadline - time.monotonic()) > 0:
            if select.select([pidfd], [], [], min(left, POLL_S))[0]:
                return None
            if self.on_progress is not None and (text := read_progress(progress)) and text != last:
                last = text
                self.on_progress(spec.label, text)
            if (broken := watch.while_running(proc)) is not None:
                return "error", broken
        return "timeout", f"Execution timed out after {spec.timeout_s:g} seconds"

    def _outcome(
        self, spec: RunSpec, run_dir: Path, returncode: int, stop: tuple[RunStatus, str] | None, result: RunResult
    ) -> RunResult:
        status = read_status(str(run_dir))
        result.isolation = self._isolation(status)
        if status is not None and not {"exit", "signal", "setup_error"} & status.keys():
            status = None  # PID 1 was stopped before the code ended: it wrote only the layers in force
        if stop is not None:  # a timeout or a cap: the code's doing
            result.status, result.error = stop
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
            limit = spec.max_result_mb << 20
            returned = disk.scan(run_dir / "out")  # before anything is loaded; at_end bounded its size
            if returned.bytes > limit:
                result.status, result.error = (
                    "error",
                    (f"Result too large: the run returned {_size(returned)}, the limit is {spec.max_result_mb:,} MB"),
                )
                return result
            try:
                record = load_result(str(run_dir / "out"), spec.max_file_mb << 20, limit)
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
        result.error = (
            exit_message(code) if code != 0 else "Execution failed: the process exited before the entry point returned"
        )
        return result

    def _isolation(self, status: dict | None) -> list[str]:
        layers = NAMESPACES[:] if self.mode != "process" else []
        if self.mode == "userns":
            layers.insert(0, "user-namespace")
        inside = status.get("isolation") if status else None
        layers += [str(x) for x in inside] if isinstance(inside, list) else []
        layers += ["scrubbed-env"] + (["pdeathsig"] if self.setpriv else []) + CAPS
        have = {x.split()[0] for x in layers}
        return layers + [f"missing: {x}" for x in FULL if x not in have]


def environment(spec: RunSpec, scratch: str) -> dict[str, str]:
    """Built from nothing: not one variable of the station's own environment gets through."""
    threads = str(run_threads(spec.num_cpus))
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": scratch,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
    }
    if spec.num_gpus == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(spec.env)
    # Every Python process of the run imports only .py sources from the folders other runs write
    # (harness_site/sitecustomize.py): no bytecode or extension module planted there runs.
    # (namespace modes: the sandbox's copy at a neutral path; process mode: ours, at its host path)
    site = RUN_SITE if scratch.startswith(RUN_ROOT + "/") else str(HOST_SITE)
    env["PYTHONPATH"] = ":".join([site, *filter(None, [spec.env.get("PYTHONPATH")])])
    env["STATION_SOURCE_ONLY"] = ":".join(f"{scratch}/{m.target}" for m in spec.mounts if shared_by_runs(m))
    return env


def run_threads(num_cpus: float) -> int:
    """BLAS and OpenMP threads for a run: one per CPU it reserved, but never more than the station's
    own OMP_NUM_THREADS where its operator set one (a machine shared with other work, or the test
    suite's workers): threads beyond the free cores spin while they wait, and a small SVD then took
    2 to 20 times the CPU of one thread. Only a count is read from the station's environment."""
    threads = max(1, int(num_cpus))
    cap = os.environ.get("OMP_NUM_THREADS", "")
    return min(threads, int(cap)) if cap.isdigit() and int(cap) >= 1 else threads


def shared_by_runs(mount: Mount) -> bool:
    """A folder other runs may have written: research storage (storage/..., also when mounted
    read-only, e.g. another lineage's) and any writable mount."""
    return mount.writable or mount.target.split("/")[0] == "storage"


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


def _size(usage: disk.Usage) -> str:
    mb = usage.bytes / (1 << 20)
    text = f"{math.ceil(mb):,} MB" if mb >= 100 else f"{math.ceil(mb * 10) / 10:g} MB"
    return ("at least " if usage.partial else "") + text


def _share_bytes(share: tuple[str, int] | None) -> tuple[str, int] | None:
    return (share[0], share[1] << 20) if share is not None else None


def _count(usage: disk.Usage) -> str:
    return ("at least " if usage.partial else "") + f"{usage.files:,} files"


@dataclass
class _Storage:
    target: str  # where the code sees it, e.g. "storage/shared"
    path: Path  # the host dir
    account: shares.Account | None = None  # what it held when the run started, who holds what (shares.py)


def _account(spec: RunSpec, s: _Storage, uid: int | None) -> shares.Account:
    """Tidy and measure a writable storage before the run (the quotas' starting point), with the
    station's ledger when the run names who its writes are charged to (spec.storage_share)."""
    ledger = None
    if spec.storage_share is not None:
        mounts = [*spec.mounts, *(spec.companion.mounts if spec.companion else ())]
        ledger = shares.Ledger.beside(s.path, [Path(m.source) for m in mounts])
    return shares.Account(s.path, s.target, ledger, uid, SANDBOX_GID if uid is not None else None)


class _Watch:
    """A run's caps, enforced from outside the sandbox: every second the CPU time and the tasks
    of its whole process tree, every few seconds (walks of bounded cost) its disk use, and at
    its end the disk use again, after tidying the storage it could write."""

    def __init__(self, spec: RunSpec, run_dir: Path, storages: list[_Storage], mode: str) -> None:
        self.spec, self.run_dir, self.storages, self.mode = spec, run_dir, storages, mode
        self.since = time.time()
        self.init: int | None = None
        self.next_disk = time.monotonic() + DISK_POLL_S

    def while_running(self, proc: subprocess.Popen) -> str | None:
        init = self._init(proc)
        if init is not None:
            cpu, tasks = tree_usage(init)
            if tasks > self.spec.max_processes:
                return (
                    f"Process limit exceeded: the run had {tasks} processes and threads at once, "
                    f"the limit is {self.spec.max_processes}"
                )
            if cpu > cpu_budget(self.spec):
                return (
                    f"CPU time limit exceeded: the run's processes used {cpu:.1f} CPU seconds together, "
                    f"the limit is {cpu_budget(self.spec)}"
                )
        if time.monotonic() < self.next_disk:
            return None
        began = time.monotonic()
        broken = self._disk(final=False)
        self.next_disk = time.monotonic() + max(DISK_POLL_S, DISK_DUTY * (time.monotonic() - began))
        return broken

    def at_end(self) -> str | None:
        return self._disk(final=True)

    def _init(self, proc: subprocess.Popen) -> int | None:
        """The sandbox's first process (unshare's child; the launcher itself in process mode),
        whose own CPU time is ours, not the code's."""
        if self.init is None:
            try:
                children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            except OSError:
                children = []
            self.init = proc.pid if self.mode == "process" else int(children[0]) if children else None
        return self.init

    def _disk(self, final: bool) -> str | None:
        """The first disk quota broken, if any. At the end every writable storage is tidied (set-id
        bits cleared, FIFOs, sockets and devices removed) and counted in full; while the run goes
        on, counting stops as soon as the answer is known."""
        spec, broken = self.spec, []
        max_bytes, max_files = spec.max_scratch_mb << 20, spec.max_files
        # the whole run dir: work/ (the scratch dir) and out/ (the results) are on the host's disk
        scratch = disk.scan(self.run_dir, enough=lambda u: u.over(max_bytes, max_files))
        if scratch.over(max_bytes, max_files):
            held, limit = (
                (_size(scratch), f"{spec.max_scratch_mb:,} MB")
                if scratch.bytes > max_bytes
                else (_count(scratch), f"{max_files:,} files")
            )
            broken.append(f"Scratch disk quota exceeded: the scratch dir holds {held}, the limit is {limit}")
        for s in self.storages:
            if broken and not final:
                break
            if s.account is None:  # never measured: the run did not start
                continue
            # Charged: what this run wrote (its uid's new entries, where runs have uids of their
            # own, and the files it grew) breaks the limit or its owner's share; at the end what
            # it wrote there is then undone (shares.py).
            s.account.since = self.since
            limits = shares.Limits(
                spec.max_storage_mb << 20, spec.max_files, spec.max_storage_mb, _share_bytes(spec.storage_share)
            )
            why = s.account.settle(limits) if final else s.account.check(limits)
            if why is not None:
                broken.append(why)
        return broken[0] if broken else None


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


def _check(spec: RunSpec) -> None:
    if spec.mode not in ("function", "command"):
        raise ValueError(f"unknown mode {spec.mode!r}")
    _check_files(spec.filename, spec.mounts, "")
    if spec.companion is not None:
        _check_files(spec.companion.filename, spec.companion.mounts, "companion ")
        for m in spec.companion.mounts:
            if m.writable:  # its files would escape the storage quotas, charged by the main code's uid
                raise ValueError(f"companion mount {m.target!r} must be read-only: a companion writes only its dirs")


def _check_files(filename: str, mounts: list[Mount] | tuple[Mount, ...], whose: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", filename) or filename.startswith(".."):
        raise ValueError(f"bad {whose}file name {filename!r}")
    for m in mounts:
        parts = Path(m.target).parts
        if not parts or m.target.startswith("/") or any(p in ("..", ".") for p in parts):
            raise ValueError(f"bad {whose}mount target {m.target!r}")


def _mount_records(mounts: list[Mount]) -> list[dict]:
    return [{"source": str(m.source), "target": m.target, "writable": m.writable} for m in mounts]


def interpreter_paths(hide: list[Path], scratch_base: Path) -> list[str]:
    """What the sandboxed interpreter needs, at the paths it has here: its prefixes and every
    package dir on this process's path (a
    .pth or PYTHONPATH can add one outside the prefix), except a package dir inside a dir that
    must stay out of runs (the station dir, a task's private data) or holding one, or the scratch
    base. Nothing else of the host goes into a run's root."""
    secret = [os.path.realpath(h) for h in hide]
    packages = {
        os.path.realpath(p)
        for p in sys.path
        if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)
    }
    packages = {
        p
        for p in packages
        if not any(_inside(p, s) for s in secret) and not any(_inside(s, p) for s in [*secret, str(scratch_base)])
    }
    prefixes = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix)}  # as the interpreter names them
    kept = sorted(prefixes | packages)
    return [p for p in kept if not any(p != q and _inside(p, q) for q in kept)]  # one bind covers what is inside it


def gpu_devices() -> list[str]:
    """The NVIDIA device files of this host, for a run that was given GPUs."""
    try:
        return sorted(name for name in os.listdir("/dev") if GPU_DEVICES.fullmatch(name))
    except OSError:
        return []


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:40] or "run"
