"""Trusted set-up inside a run's new namespaces: the first process of the sandbox (its PID 1).

LocalExecutor starts `unshare ... python -I -S sandbox_init.py <run dir>/sandbox.json`. As root
of the new mount namespace this script makes the host read-only, masks private and sensitive
directories with empty tmpfs, binds the run's scratch dir, its results dir and the storage
mounts (nosuid, nodev), then forks the code's process, which drops to the run's uid, sets its rlimits and execs
the harness (function mode) or `sh -c <entry>` (command mode). This process stays behind as
PID 1: it reaps orphans, kills whatever is left when the code's process ends, and writes
`status.json` (exit code or signal, the isolation in force) into the host run dir, which the
code never sees.

Stdlib only, no site (`-I -S`): it runs before anything else, in every mode. In "process" mode
(no namespaces available) it skips the mounts and only forks, limits and execs.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 0x20, 0x1000, 0x400, 0x800, 0x200000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, AT_RECURSIVE, AT_FDCWD, MNT_DETACH = 0x1, 0x2, 0x8000, -100, 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECUREBITS = 1, 24, 38, 28
# SECBIT_NOROOT | NO_SETUID_FIXUP | KEEP_CAPS_LOCKED | NO_CAP_AMBIENT_RAISE and their locks: a
# uid-0 process (user-namespace mode) gets no capabilities back when it execs
SECUREBITS_NO_ROOT = 0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80
STATUS_FILE = "status.json"
SETUP_FAILED = 111

libc = ctypes.CDLL(None, use_errno=True)


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None
    _check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def kept_flags(path: str) -> int:
    """Flags a bind remount must repeat (a user namespace may not clear them)."""
    f = os.statvfs(path).f_flag
    pairs = (
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NOATIME, MS_NOATIME),
        (os.ST_NODIRATIME, MS_NODIRATIME),
        (os.ST_RELATIME, MS_RELATIME),
    )
    return sum(ms for st, ms in pairs if f & st)


def bind(fd: int, target: str, writable: bool) -> None:
    """Bind what `fd` (opened before the masks went up) points at onto `target`: nosuid and nodev,
    so a set-id file or a device node in the scratch dir or the storage gives nothing here."""
    mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | kept_flags(target)
    mount(None, target, None, (flags & ~MS_RDONLY) if writable else flags | MS_RDONLY)


def under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def read_only_host() -> bool:
    """Make every mount read-only (one recursive call); False where the kernel lacks it."""
    setattr_ = getattr(libc, "mount_setattr", None)
    if setattr_ is None:
        return False
    attr = MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    _check(setattr_(AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)), "mount_setattr /")
    return True


def set_up_mounts(cfg: dict, run_fd: int) -> tuple[list[str], int]:
    """The file-system view of the code; returns the layers now in force and a writable
    descriptor of the host run dir."""
    # Everything we must still reach once the masks are up is opened first: a masked path
    # (the storage lives inside the hidden station dir) is bound back from its descriptor.
    opened = lambda p: os.open(p, os.O_PATH | os.O_CLOEXEC)  # noqa: E731
    work, out = opened(cfg["scratch"]), opened(cfg["out_dir"])
    keep = [(p, opened(p)) for p in cfg["keep"] if os.path.exists(p)]
    sources = [(m, opened(m["source"])) for m in cfg["mounts"]]
    layers = ["read-only-root"] if read_only_host() else []

    masked: list[str] = []
    for path in cfg["private_tmp"]:  # fresh, writable, size-capped
        if os.path.isdir(path) and not under(path, masked):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmpfs_mb']}m,mode=1777")
            masked.append(path)
    hidden = []
    for path in sorted(cfg["hide"]):  # empty and read-only
        if os.path.isdir(path) and not under(path, masked):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
            masked.append(path)
            hidden.append(path)
    # A writable handle on the host run dir for status.json, on a mount detached at once: the
    # handle keeps it alive, and nothing in the sandbox can reach it.
    os.makedirs(cfg["run_dir"], exist_ok=True)  # in the tmpfs masking the scratch base
    bind(run_fd, cfg["run_dir"], writable=True)
    status_fd = os.open(cfg["run_dir"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    _check(libc.umount2(cfg["run_dir"].encode(), MNT_DETACH), f"umount {cfg['run_dir']}")
    for path, fd in [(cfg["scratch"], work), (cfg["out_dir"], out)]:
        os.makedirs(path, exist_ok=True)
        bind(fd, path, writable=True)
    for path, fd in keep:  # the interpreter and the harness, when a mask covered them
        if under(path, masked):
            os.makedirs(path, exist_ok=True)
            bind(fd, path, writable=False)
    for path in hidden:
        mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for m, fd in sources:  # mountpoints were made by the executor in the scratch dir
        bind(fd, os.path.join(cfg["scratch"], m["target"]), writable=m["writable"])
    for fd in [work, out, *(fd for _, fd in keep), *(fd for _, fd in sources)]:
        os.close(fd)
    libc.sethostname(b"sandbox", 7)
    return layers + ["private-tmp", "nosuid-nodev"] + [f"hidden {p}" for p in hidden], status_fd


def drop_capabilities() -> None:
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0)  # EINVAL for caps we lack: fine


def start_code(cfg: dict) -> None:
    """In the forked child: become the unprivileged code process and exec (never returns)."""
    os.setsid()  # its own session: the executor's process group is out of reach
    if cfg["mode"] != "process":
        drop_capabilities()
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])  # clears every capability
    elif cfg["mode"] == "userns":
        prctl(PR_SET_SECUREBITS, SECUREBITS_NO_ROOT)  # uid 0 of the namespace, but no capabilities after exec
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # again: changing uid cleared it
    for name, (soft, hard) in cfg["rlimits"].items():  # None: unlimited (as far as allowed)
        limit = getattr(resource, name)
        ceiling = resource.getrlimit(limit)[1]
        clamp = lambda v: ceiling if v is None or (ceiling != resource.RLIM_INFINITY and v > ceiling) else v  # noqa: B023 - called at once, inside this iteration
        resource.setrlimit(limit, (clamp(soft), clamp(hard)))
    os.umask(0o002)  # files in writable storage stay writable for the other runs' uids (same group)
    os.chdir(cfg["scratch"])
    os.execve(cfg["argv"][0], cfg["argv"], os.environ)


def wait_for(pid: int, reap_all: bool) -> int:
    """Wait for the code's process, reaping orphans meanwhile (we are PID 1 of the namespace)."""
    while True:
        try:
            done, status = os.wait() if reap_all else os.waitpid(pid, 0)
        except InterruptedError:
            continue
        if done == pid:
            return status


def write_status(run_fd: int, record: dict) -> None:
    fd = os.open(STATUS_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=run_fd)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    run_fd = os.open(cfg["run_dir"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    in_namespaces = cfg["mode"] != "process"
    try:
        layers, run_fd = set_up_mounts(cfg, run_fd) if in_namespaces else ([], run_fd)
    except Exception as err:  # noqa: BLE001 - a system error; the host may be read-only to us by now
        os.write(2, f"sandbox set-up failed: {type(err).__name__}: {err}\n".encode())
        sys.exit(SETUP_FAILED)
    ready_r, ready_w = os.pipe()  # close-on-exec: EOF without a message means the exec worked
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            start_code(cfg)
        except BaseException as err:  # noqa: BLE001 - the code never started
            os.write(ready_w, f"{type(err).__name__}: {err}".encode())
        finally:
            os._exit(127)
    os.close(ready_w)
    failed = os.read(ready_r, 4096).decode(errors="replace")
    status = wait_for(pid, reap_all=in_namespaces)
    try:
        if in_namespaces:
            os.kill(-1, signal.SIGKILL)  # every other process of the namespace, daemons included
        else:
            os.killpg(pid, signal.SIGKILL)  # its process group; a child that called setsid escapes
    except ProcessLookupError:
        pass
    if in_namespaces:
        try:
            while True:
                os.wait()
        except ChildProcessError:
            pass
    if failed:
        write_status(run_fd, {"setup_error": f"could not start the code: {failed}"})
        sys.exit(SETUP_FAILED)
    record: dict[str, object] = (
        {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"exit": os.WEXITSTATUS(status)}
    )
    if cfg["uid"] is not None:
        layers.append(f"uid {cfg['uid']}")
    if in_namespaces or cfg["uid"] is not None:
        layers.append("no-capabilities")
    record["isolation"] = layers + ["no-new-privs", "rlimits"]
    write_status(run_fd, record)


if __name__ == "__main__":
    main()
