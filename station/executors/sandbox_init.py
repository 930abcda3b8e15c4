"""Trusted set-up inside a run's new namespaces: the first process of the sandbox (its PID 1).

LocalExecutor starts `unshare ... python -I -S /dev/fd/<this script> <descriptor of sandbox.json>`:
both come as inherited descriptors, so PID 1's command line names no host path. As root of the
new mount namespace this script builds the code's file system from an allow-list on a fresh tmpfs
(the OS's programs and libraries, the interpreter, a copy of the harness, the run's own folders and
mounts: nothing else of the host) and pivots into it, with the run's folders at neutral paths
(RUN_* in local.py: /run/work, /run/out), never at their host paths. It then moves into a detached
copy of that root, so that every mount table the sandbox can read is empty, and forks the code's
process, which drops to the run's uid, sets its rlimits, closes the mount-table system calls
(statmount, listmount) to itself and its children, and execs the harness (function mode) or
`sh -c <entry>` (command mode). This process stays behind as PID 1: it reaps orphans, kills whatever is left
when the code's process ends, and writes `status.json` (exit code or signal, the isolation in
force) into the host run dir through a descriptor opened before the pivot, which the code never
sees.

A run with a companion (run_types.Companion) has PID 1 fork that first: the child takes a mount
namespace of its own (and network and IPC namespaces), builds its own root the same way (its own
scratch dir at /run/work, its own mounts, the channel writable at /run/channel; none of the main
code's folders), and starts like the code's process, at a uid of its own where runs get uids;
the main code sees the channel read-only. Both share the PID namespace, the rlimits and the
caps, and end together.

Stdlib only, no site (`-I -S`): it runs before anything else, in every mode. In "process" mode
(no namespaces available) it skips the mounts and only forks, limits and execs.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import resource
import signal
import socket
import stat
import struct
import sys

MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000  # Python 3.11 has no os.unshare
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
AT_RECURSIVE, AT_FDCWD, MNT_DETACH = 0x8000, -100, 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers: glibc has no wrapper
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECUREBITS = 1, 24, 38, 28
# SECBIT_NOROOT | NO_SETUID_FIXUP | KEEP_CAPS_LOCKED | NO_CAP_AMBIENT_RAISE and their locks: a
# uid-0 process (user-namespace mode) gets no capabilities back when it execs
SECUREBITS_NO_ROOT = 0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80
STATUS_FILE = "status.json"
SETUP_FAILED = 111
# What the new root holds besides the interpreter, the harness and the run's own folders.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # the OS's programs and libraries
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "os-release", "alternatives")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
ROOT_MB = 8  # the new root's own tmpfs: directories, mountpoints and /etc's few files
OPEN_TREE, OPEN_TREE_CLONE = 428, 0x1  # same number on every architecture
# statmount and listmount (same numbers everywhere since 6.8) read the mount table without /proc
MOUNT_TABLE_SYSCALLS = (457, 458)
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ENOSYS = 22, 2, 38
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"  # struct ifreq: the interface's name, its flags, the rest of the union

libc = ctypes.CDLL(None, use_errno=True)


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None
    _check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


def under(path: str, roots: list[str] | tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def set_attr(path: str, add: int, clear: int, recursive: bool) -> None:
    attr = MountAttr(add, clear, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    _check(
        libc.mount_setattr(AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr)),
        f"mount_setattr {path}",
    )


def pivot_root(new_root: str) -> None:
    """Make `new_root` the root and let go of the host's: after this no path leads back to it."""
    os.chdir(new_root)
    number = PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(libc.syscall(number, b".", b"."), "pivot_root")  # the old root now sits under the new one
    _check(libc.umount2(b".", MNT_DETACH), "umount the host's root")
    os.chdir("/")


def _within(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _mountpoint(target: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def main_side(cfg: dict) -> dict:
    """What the main code's root holds of its own: its scratch and results dirs, the harness, the
    run's mounts, and the channel (read-only: only the companion writes there)."""
    own = {"scratch": cfg["scratch"], "out": cfg["out_dir"], "harness": True, "mounts": cfg["mounts"]}
    return {"uid": cfg["uid"], "gid": cfg["gid"], **own, "channel_writable": False}


def companion_side(cfg: dict) -> dict:
    """What the companion's root holds of its own: its scratch dir, its mounts and the channel
    (writable), none of the main code's folders. The harness's copy comes too: what sits beside
    it is imported by every Python process of a run, the companion's included."""
    comp = cfg["companion"]
    own = {"scratch": comp["scratch"], "out": None, "harness": True, "mounts": comp["mounts"]}
    return {"uid": comp["uid"], "gid": comp["gid"], **own, "channel_writable": True}


def set_up_root(cfg: dict, side: dict) -> list[str]:
    """Build one program's file system from nothing on a fresh tmpfs and pivot into it: the OS's
    programs and libraries, the interpreter and its packages, a few /etc files, a minimal /dev,
    /proc and /sys, private /tmp, and that program's own folders (`side`: main_side or
    companion_side): its scratch dir and mounts, the results dir and the harness (main code), the
    channel (a run with a companion). Nothing else of the host exists there (no home folders,
    checkouts, .git, data or station folders): an allow-list cannot forget a secret the way a
    deny-list can. All of it is read-only except the private tmpfs dirs, the scratch and results
    dirs, the writable storage mounts and the companion's channel, which are nosuid and nodev.
    Its own folders sit at neutral paths (cfg["inside"]), never at their host paths. Returns the
    layers now in force."""
    new = cfg["new_root"]
    _check_no_clash(cfg["keep"], cfg["run_root"])
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, f"size={ROOT_MB}m,mode=755")
    binds: list[tuple[int, str, bool]] = []  # (descriptor of the host path, target in the new root, writable)

    def add(host: str, writable: bool = False, at: str | None = None) -> None:
        target = _within(new, at or host)
        if os.path.islink(host) and at is None:  # merged /usr: /bin -> usr/bin, kept as a link
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(os.readlink(host), target)
        elif os.path.exists(host):  # opened now: later mounts may cover the host path
            binds.append((os.open(host, os.O_PATH | os.O_CLOEXEC), target, writable))

    for path in SYSTEM_DIRS:
        add(path)
    for name in ETC_FILES:
        add(f"/etc/{name}")
    for path in cfg["keep"]:  # the interpreter and its packages
        if not under(path, [d for d in SYSTEM_DIRS if not os.path.islink(d)]):
            add(os.path.realpath(path), at=path)
    add("/proc")
    add("/sys")
    for name in [*DEVICES, *cfg["devices"]]:
        add(f"/dev/{name}")
    _add_own(cfg, side, add)
    _write_etc_and_dev(cfg, side)
    private = [_within(new, p) for p in cfg["private_tmp"]]  # fresh, writable, size-capped
    for at in private:
        os.makedirs(at, exist_ok=True)
        mount("tmpfs", at, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmpfs_mb']}m,mode=1777")
    for fd, target, _ in sorted(binds, key=lambda b: b[1]):  # parents before what is mounted inside them
        if not os.path.lexists(target):
            _mountpoint(target, stat.S_ISDIR(os.fstat(fd).st_mode))
        mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        os.close(fd)
    set_attr(new, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, recursive=True)
    for at in [*private, *(target for _, target, writable in binds if writable)]:
        set_attr(at, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, MOUNT_ATTR_RDONLY, recursive=False)
    pivot_root(new)
    libc.sethostname(b"sandbox", 7)
    hide_mount_table()  # its descriptor stays open in PID 1, never inherited (close-on-exec)
    return ["allow-list-root", "read-only-root", "private-tmp", "nosuid-nodev", "neutral-paths", "hidden-mounts"]


def _add_own(cfg: dict, side: dict, add) -> None:  # noqa: ANN001 - set_up_root's add()
    """One program's own folders, at their neutral paths: its scratch dir and mounts, the channel,
    and for the main code the results dir and a copy of the harness."""
    inside = cfg["inside"]
    add(side["scratch"], writable=True, at=inside["scratch"])
    if side["out"] is not None:
        add(side["out"], writable=True, at=inside["out"])
    if cfg.get("channel") is not None:
        add(cfg["channel"], writable=side["channel_writable"], at=inside["channel"])
    for m in side["mounts"]:  # their mountpoints were made by the executor in the scratch dir
        add(m["source"], m["writable"], at=os.path.join(inside["scratch"], m["target"]))
    if side["harness"]:
        copy_harness(cfg["harness"], _within(cfg["new_root"], inside["harness"]))


def _write_etc_and_dev(cfg: dict, side: dict) -> None:
    """/etc's files written for the run (its user, its group, localhost) and /dev's links."""
    etc = _within(cfg["new_root"], "/etc")
    os.makedirs(etc, exist_ok=True)
    uid, gid, home = side["uid"] if side["uid"] is not None else 0, side["gid"], cfg["inside"]["scratch"]
    # the other uids runs lease, named too: a file another run wrote into a folder they share (an
    # evaluation's JAX compilation cache) has an owner a lookup finds (JAX's cache eviction stats
    # each entry with its owner's name, and warns when there is none)
    leased = range(*cfg["uid_range"]) if side["uid"] is not None else range(0)
    others = "".join(f"run{n}:x:{n}:{gid}::/:/bin/sh\n" for n in leased if n != uid)
    _write(f"{etc}/passwd", f"root:x:0:0:root:/:/bin/sh\nsandbox:x:{uid}:{gid}::{home}:/bin/sh\n{others}")
    _write(f"{etc}/group", f"root:x:0:\nsandbox:x:{gid}:\n")
    _write(f"{etc}/hosts", "127.0.0.1 localhost\n::1 localhost\n")
    dev = _within(cfg["new_root"], "/dev")
    os.makedirs(dev, exist_ok=True)
    for name, target in (("fd", "self/fd"), ("stdin", "self/fd/0"), ("stdout", "self/fd/1"), ("stderr", "self/fd/2")):
        os.symlink(f"/proc/{target}", f"{dev}/{name}")


def _check_no_clash(keep: list[str], run_root: str) -> None:
    clash = [p for p in keep if under(p, [run_root])]
    if clash:
        raise OSError(f"the interpreter lives in {clash[0]}, under {run_root}, where a run's own folders go")


def copy_harness(source: str, target: str) -> None:
    """A copy on the new root's own tmpfs, not a bind: not even the mount table names its host folder.
    With it, site/sitecustomize.py (from harness_site/ beside the harness), which every Python
    process of the run imports (PYTHONPATH): storage imports .py sources only."""
    site = os.path.join(os.path.dirname(target), "site")
    os.makedirs(site, exist_ok=True)
    customize = os.path.join(os.path.dirname(source), "harness_site", "sitecustomize.py")
    for origin, copy in ((source, target), (customize, os.path.join(site, "sitecustomize.py"))):
        with open(origin, "rb") as src, open(copy, "wb") as dst:
            dst.write(src.read())
        os.chmod(copy, 0o644)


def hide_mount_table() -> int:
    """Move this process, and so the code it forks, into a detached copy of its root (an anonymous
    mount namespace), and detach the namespace's own mounts. A process's mount table
    (/proc/<pid>/mountinfo, mounts, mountstats) lists only the mounts reachable from its root,
    and none of the namespace's is reachable from the copy: it reads empty, for every process of
    the sandbox, while every path works as before (the copy keeps the mounts' flags). Without
    this, each bind mount's "root" column names its source's host path. Every other /proc file
    stays readable (threadpoolctl reads /proc/self/maps, for one). The kernel counts a root that
    is not its namespace's as a chroot, so the code cannot make user namespaces (nor, without
    one, any other kind) either. Returns the descriptor that holds the copy, which PID 1 keeps
    for the run's life."""
    flags = ctypes.c_uint(OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC)
    tree = libc.syscall(OPEN_TREE, AT_FDCWD, b"/", flags)
    if tree < 0:
        _check(-1, "open_tree")
    for point in sorted(mount_points(tree), key=lambda p: p.count("/"), reverse=True):
        if point != "/":
            libc.umount2(point.encode(), MNT_DETACH)  # EINVAL for one already gone with its parent: fine
    left = mount_points(tree)  # read through the copy's /proc: the namespace's own is gone
    if left != ["/"]:
        raise OSError(f"the sandbox's namespace still holds mounts: {left[:5]}")
    os.fchdir(tree)
    os.chroot(".")
    os.chdir("/")
    return tree


def mount_points(root: int) -> list[str]:
    """Where this process's mount table has a mount (mountinfo's fifth column, octal escapes undone),
    read through the /proc of the tree that `root` holds."""
    with open(os.open("proc/thread-self/mountinfo", os.O_RDONLY | os.O_CLOEXEC, dir_fd=root), "rb") as f:
        return [_unescape(line.split()[4]) for line in f if line.strip()]


def _unescape(field: bytes) -> str:
    return field.decode("unicode_escape").encode("latin-1").decode("utf-8", errors="surrogateescape")


def close_mount_syscalls() -> list[str]:
    """A seccomp filter on the code's process and its children: statmount and listmount, which
    read the mount table (with each bind mount's host source) without /proc, fail with ENOSYS,
    as on an older kernel. Every other system call is allowed. [] without seccomp filters."""
    load_nr, drop_x32_bit, if_equal, give = 0x20, 0x54, 0x15, 0x06  # BPF: ld [nr], and, jeq, ret
    first, second = MOUNT_TABLE_SYSCALLS
    program = [
        SockFilter(load_nr, 0, 0, 0),
        SockFilter(drop_x32_bit, 0, 0, 0xBFFFFFFF),
        SockFilter(if_equal, 2, 0, first),
        SockFilter(if_equal, 1, 0, second),
        SockFilter(give, 0, 0, 0x7FFF0000),  # SECCOMP_RET_ALLOW
        SockFilter(give, 0, 0, 0x00050000 | ENOSYS),  # SECCOMP_RET_ERRNO
    ]
    fprog = SockFprog(len(program), (SockFilter * len(program))(*program))
    if libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0) != 0:
        if ctypes.get_errno() == errno.EINVAL:  # a kernel built without seccomp filters
            return []
        _check(-1, "seccomp")
    return ["no-statmount"]


def drop_capabilities() -> None:
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0)  # EINVAL for caps we lack: fine


def main_program(cfg: dict) -> dict:
    """How the main code starts: the harness or `sh -c`, in its scratch dir, with PID 1's environment."""
    ids = {"uid": cfg["uid"], "gid": cfg["gid"]}
    return {**ids, "argv": cfg["argv"], "env": dict(os.environ), "cwd": cfg["inside"]["scratch"]}


def start_code(cfg: dict, program: dict, report: int) -> None:
    """In the forked child: become the unprivileged `program` (main_program, or the companion's
    entry of sandbox.json) and exec it (never returns). The layers it put in force go to PID 1
    through `report`, one per line."""
    os.setsid()  # its own session: the executor's process group is out of reach
    if cfg["mode"] != "process":
        drop_capabilities()
    uid, gid = program["uid"], program["gid"]
    if uid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)  # clears every capability
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
    os.chdir(program["cwd"])
    for layer in close_mount_syscalls():  # last: it needs no-new-privs
        os.write(report, f"+{layer}\n".encode())
    os.execve(program["argv"][0], program["argv"], program["env"])


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


def read_config() -> dict:
    """sandbox.json from the descriptor argv[1] names; this script itself came as /dev/fd/N. Both
    are closed at once: the code's process must not inherit them (they name host paths)."""
    with os.fdopen(int(sys.argv[1])) as f:
        cfg = json.load(f)
    folder, name = os.path.split(sys.argv[0])
    if folder == "/dev/fd" and name.isdigit():
        os.close(int(name))
    return cfg


def read_report(ready: int) -> tuple[list[str], str]:
    """The layers the code's process put in force, and why it could not start ("" if it did):
    its end of the pipe closes on exec, so EOF comes once it runs or fails."""
    text = b""
    while chunk := os.read(ready, 4096):
        text += chunk
    lines = text.decode(errors="replace").splitlines()
    failed = "".join(line[1:] for line in lines if line.startswith("!"))
    return [line[1:] for line in lines if line.startswith("+")], failed


def start_companion(cfg: dict) -> tuple[int, int]:
    """Fork the companion before anything else, while the host's file system is still in view:
    in the namespace modes it takes a mount namespace of its own (so the root it builds, and the
    pivot, are its alone), builds its root and starts like the main code, at its own uid where runs
    get uids. PID 1 goes on only once the child is out of its mount namespace: pivot_root moves
    every process of a namespace that shares the old root. Returns the child's pid and the read
    end of its report (its layers, "!why" if it could not start), which ends when it execs. A
    companion that fails writes why to the run's stderr and ends alone: the main code runs all
    the same."""
    apart_r, apart_w = os.pipe()  # closed by the child once it has its own mount namespace
    ready_r, ready_w = os.pipe()  # close-on-exec, like the main code's
    pid = os.fork()
    if pid:
        os.close(apart_w)
        os.close(ready_w)
        os.read(apart_r, 1)  # EOF: the child has left our mount namespace, or ended
        os.close(apart_r)
        return pid, ready_r
    try:
        os.close(apart_r)
        os.close(ready_r)
        layers = []
        if cfg["mode"] != "process":
            # its own network and IPC namespaces too: no abstract unix socket, SysV IPC object or
            # message queue of the main code's is within its reach (a path socket in the channel is)
            _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC), "unshare the companion's namespaces")
            mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing it mounts reaches PID 1's namespace
            os.close(apart_w)
            own = ["own-mount-namespace", "own-net-namespace", "own-ipc-namespace"]
            layers = [*own, *set_up_root(cfg, companion_side(cfg))]
        else:
            os.close(apart_w)
        os.write(ready_w, "".join(f"+{layer}\n" for layer in layers).encode())
        start_code(cfg, cfg["companion"], ready_w)
    except BaseException as err:  # noqa: BLE001 - the companion never started; the main code still runs
        why = f"{type(err).__name__}: {err}"
        os.write(2, f"companion could not start: {why}\n".encode())
        os.write(ready_w, f"!{why}".encode())
    finally:
        os._exit(127)


def end_companion(pid: int, in_namespaces: bool) -> None:
    """In process mode the companion outlives the main code unless killed: its process group (it
    called setsid) goes, and it is reaped. The namespace modes kill it with everything else."""
    if in_namespaces:
        return
    for send in (os.killpg, os.kill):
        try:
            send(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.waitpid(pid, 0)


def companion_layers(cfg: dict, report: tuple[list[str], str]) -> str:
    """One isolation entry for the companion: what was in force for it, and what was not."""
    closed, failed = report
    if failed:
        return f"companion: could not start: {failed}"
    uid, mode = cfg["companion"]["uid"], cfg["mode"]
    layers = closed + ([f"uid {uid}"] if uid is not None else [])
    if mode != "process" or uid is not None:
        layers.append("no-capabilities")
    layers += ["no-new-privs", "rlimits"]
    if uid is None:
        layers.append("missing: own uid (the main code's uid)")
    if mode == "process":
        layers.append("missing: own root (process mode: each program sees the host's files, the other's too)")
    return "companion: " + ", ".join(layers)


def loopback_up() -> str:
    """Bring `lo` up in the run's own network namespace (RunSpec.loopback): the run's programs reach
    one another on 127.0.0.1. The namespace holds no other interface, so nothing outside it, the
    host's own loopback services included, becomes reachable."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack(IFREQ, fcntl.ioctl(sock, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))
    return "own-loopback"


def isolation_layers(cfg: dict, layers: list[str], closed: list[str], apart: tuple[list[str], str] | None) -> list[str]:
    """What was in force around the code: the root's layers, its process's own, the companion's."""
    found = list(layers)
    if cfg["uid"] is not None:
        found.append(f"uid {cfg['uid']}")
    if cfg["mode"] != "process" or cfg["uid"] is not None:
        found.append("no-capabilities")
    entry = [companion_layers(cfg, apart)] if apart is not None else []
    return found + ["no-new-privs", "rlimits"] + closed + entry


def main() -> None:
    cfg = read_config()
    run_fd = os.open(cfg["run_dir"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # outlives the pivot
    in_namespaces = cfg["mode"] != "process"
    companion = start_companion(cfg) if cfg.get("companion") else None
    try:
        layers = set_up_root(cfg, main_side(cfg)) if in_namespaces else []
        if cfg.get("loopback") and in_namespaces:
            layers.append(loopback_up())
    except Exception as err:  # noqa: BLE001 - a system error; the host may be read-only to us by now
        os.write(2, f"sandbox set-up failed: {type(err).__name__}: {err}\n".encode())
        sys.exit(SETUP_FAILED)
    # The main code starts once the companion runs (or said why it cannot): both roots were built
    # at the same time, and a companion's failure is on the run's stderr whenever the main code ends.
    apart = read_report(companion[1]) if companion is not None else None
    ready_r, ready_w = os.pipe()  # close-on-exec: EOF without a message means the exec worked
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            start_code(cfg, main_program(cfg), ready_w)
        except BaseException as err:  # noqa: BLE001 - the code never started
            os.write(ready_w, f"!{type(err).__name__}: {err}".encode())
        finally:
            os._exit(127)
    os.close(ready_w)
    closed, failed = read_report(ready_r)
    if not failed:  # written now too: a run stopped from outside (a timeout, a cap) ends with us unheard
        isolation = isolation_layers(cfg, layers, closed, apart)
        write_status(run_fd, {"isolation": isolation})
    status = wait_for(pid, reap_all=in_namespaces)
    try:
        if in_namespaces:
            os.kill(-1, signal.SIGKILL)  # every other process of the namespace, daemons included
        else:
            os.killpg(pid, signal.SIGKILL)  # its process group; a child that called setsid escapes
    except ProcessLookupError:
        pass
    if companion is not None:
        end_companion(companion[0], in_namespaces)
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
    write_status(run_fd, {**record, "isolation": isolation})


if __name__ == "__main__":
    main()
