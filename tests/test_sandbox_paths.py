"""A run sees no host path: not in its mount table, its command lines, its working dir, HOME,
environment, file names or tracebacks, nor in what a child process it starts can read.

The host paths hunted for are the ones that say where the station keeps things: the scratch base
(and with it every run dir), the test run's temporary folder, the station dir, a data folder
whose name gives away its generator and seed, a writable storage folder and the harness's
folder. Real sandboxes, real namespaces; needs root and unshare (skipped elsewhere, saying why).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from station.executors import LocalExecutor, Mount, RunSpec, local

DATA_NAME = "sim-v1-small-seed0"  # a name that tells the generator, the size and the seed

# What a curious submission reads, in its own process and again in a child it starts.
PROBE = r'''
import ctypes, json, os, struct, sys

PLACES = ["/proc/self/mountinfo", "/proc/mounts", "/proc/1/mountinfo", "/proc/1/mounts", "/proc/1/cmdline",
          "/proc/1/environ", "/proc/self/cmdline", "/proc/self/environ", "/proc/self/mountstats",
          "/proc/self/maps", "/proc/thread-self/mountinfo", "/proc/self/root/proc/self/mountinfo",
          f"/proc/{os.getpid()}/task/{os.getpid()}/mountinfo", "/proc/2/cmdline", "/etc/passwd"]


def mount_syscalls():
    """The mount table without /proc: listmount, then statmount of each mount (its root and mount point)."""
    libc = ctypes.CDLL(None, use_errno=True)
    ids = (ctypes.c_uint64 * 512)()
    n = libc.syscall(458, struct.pack("=IIQQ", 24, 0, 2**64 - 1, 0), ids, 512, 0)
    if n < 0:
        return [f"listmount errno {ctypes.get_errno()}"]
    found = []
    for i in range(n):
        buf = ctypes.create_string_buffer(1 << 16)
        if libc.syscall(457, struct.pack("=IIQQ", 24, 0, ids[i], 0x8 | 0x10), buf, 1 << 16, 0) == 0:
            found += [part.decode(errors="replace") for part in buf.raw.split(b"\0") if part.startswith(b"/")]
    return found


def look():
    seen = {}
    for path in PLACES + [f"/proc/{p}/mountinfo" for p in os.listdir("/proc") if p.isdigit()]:
        try:
            with open(path, "rb") as f:
                seen[path] = f.read().decode(errors="replace")
        except OSError as err:
            seen[path] = type(err).__name__
    links = ["/proc/self/cwd", "/proc/self/root", "/proc/1/cwd", "/proc/1/root", "/proc/1/exe"]
    try:
        links += [f"/proc/1/fd/{fd}" for fd in os.listdir("/proc/1/fd")]  # PID 1 holds the host run dir
    except OSError as err:
        seen["/proc/1/fd"] = type(err).__name__
    for link in links:
        try:
            seen[link] = os.readlink(link)
        except OSError as err:
            seen[link] = type(err).__name__
    seen["statmount"] = mount_syscalls()
    seen["fds"] = {}  # what it inherited: nothing beyond the standard streams (no sandbox.json, no init script)
    for fd in os.listdir("/proc/self/fd"):
        try:
            seen["fds"][fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # the listing's own descriptor, closed by now
    main = sys.modules["__main__"]
    seen.update(cwd=os.getcwd(), environ=dict(os.environ), argv=sys.argv, path=sys.path,
                main=getattr(main, "__file__", None), data=os.path.realpath("task_data/forecasting"),
                listing=sorted(os.listdir("task_data/forecasting")), home=os.path.expanduser("~"))
    return seen
'''

SUBMISSION = f"PROBE = {PROBE!r}\n" + PROBE + r'''
import subprocess


def main():
    mine = look()
    mine["file"] = __file__
    child = subprocess.run([sys.executable, "-c", PROBE + "\nprint(json.dumps(look()))"],
                           capture_output=True, text=True)
    print(json.dumps({"run": mine, "child": json.loads(child.stdout)}))
    raise RuntimeError(f"failing on purpose in {os.getcwd()}, data at {os.path.realpath('task_data/forecasting')}")
'''


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """The station's host folders: a station dir (under /srv where we may write there, away from the
    temporary folders), a data cache with a telling name, a writable storage, a scratch base."""
    top = "/srv" if os.access("/srv", os.W_OK) else None
    station = Path(tempfile.mkdtemp(prefix="station-paths-test-", dir=top))
    data = station / "cache" / "forecasting" / DATA_NAME
    data.mkdir(parents=True)
    np.save(data / "train.npy", np.arange(6.0))
    storage = station / "files" / "research" / "storage" / "shared"
    storage.mkdir(parents=True)
    scratch = tmp_path_factory.mktemp("scratch-paths")
    yield {"station": station, "data": data, "storage": storage, "scratch": scratch,
           "tmp": tmp_path_factory.getbasetemp(), "harness": local.HARNESS.parent}
    shutil.rmtree(station)


def executor_for(places, isolation: str) -> LocalExecutor:
    try:
        ex = LocalExecutor(hide=[places["station"]], scratch_base=places["scratch"], isolation=isolation)  # type: ignore[arg-type]
    except local.SandboxError as err:
        pytest.skip(str(err))
    if isolation == "auto" and ex.mode != "namespaces":
        pytest.skip(f"the sandbox runs in {ex.mode!r} mode here (needs root and unshare)")
    return ex


def spec(places, code: str, **kw) -> RunSpec:
    mounts = [Mount(places["data"], "task_data/forecasting"), Mount(places["storage"], "storage/shared", True)]
    return RunSpec(code=textwrap.dedent(code), mounts=mounts, timeout_s=kw.pop("timeout_s", 60), **kw)


def host_paths(places) -> list[str]:
    return [str(places[k]) for k in ("station", "data", "storage", "scratch", "tmp", "harness")] + [DATA_NAME]


@pytest.mark.parametrize("isolation", ["auto", "userns"])
def test_no_host_path_reaches_the_run_or_its_children(places, isolation):
    ex = executor_for(places, isolation)
    r = ex.run(spec(places, SUBMISSION, label="paths-probe"))
    assert r.status == "error" and r.error.startswith("RuntimeError: failing on purpose in"), r
    seen = json.loads(r.stdout)
    assert seen["run"]["listing"] == ["train.npy"] and seen["child"]["listing"] == ["train.npy"]  # both really looked
    assert 'submission.py", line' in r.traceback
    everything = "\n".join([r.stdout, r.stderr, r.error, r.traceback or ""])
    leaks = [p for p in host_paths(places) if p in everything]
    assert leaks == [], [line for line in everything.splitlines() if any(p in line for p in leaks)][:20]
    for who in ("run", "child"):  # every mount table is empty, the system calls that read one refuse
        tables = {path: text for path, text in seen[who].items() if path.startswith("/proc") and "mount" in path}
        assert len(tables) >= 9 and set(tables.values()) == {""}, tables
        assert seen[who]["statmount"] == ["listmount errno 38"]  # ENOSYS, as on a kernel without it
        assert set(seen[who]["fds"]) == {"0", "1", "2"}, seen[who]["fds"]
        assert re.fullmatch(r"[^\0]+\0-I\0-S\0/dev/fd/\d+\0\d+\0", seen[who]["/proc/1/cmdline"])  # descriptors only
    assert {"hidden-mounts", "no-statmount", "neutral-paths"} <= set(r.isolation)


def test_a_command_run_sees_neutral_paths(places):
    ex = executor_for(places, "auto")
    r = ex.run(spec(places, "", mode="command",
                    entry="pwd; echo $HOME; ls task_data/forecasting; cat /proc/self/mountinfo /proc/1/mountinfo"))
    assert r.status == "ok", r
    assert r.stdout.splitlines() == [local.RUN_SCRATCH, local.RUN_SCRATCH, "train.npy"], r.stdout  # tables empty
    assert not [p for p in host_paths(places) if p in r.stdout + r.stderr]


def test_an_honest_run_still_works(places):
    """Reads a mount, writes and renames in the storage, in /tmp and in the scratch dir, starts a pool
    of processes, runs scikit-learn's kNN (threadpoolctl reads /proc/self/maps), and returns
    arrays: all as before."""
    ex = executor_for(places, "auto")
    r = ex.run(spec(places, """
        import multiprocessing, os, shutil
        import numpy as np

        def square(x):
            return x * x

        def main():
            data = np.load("task_data/forecasting/train.npy")
            os.makedirs("storage/shared/a/b", exist_ok=True)
            np.save("storage/shared/a/x.npy", data * 2)
            os.replace("storage/shared/a/x.npy", "storage/shared/a/b/x.npy")   # across folders
            os.makedirs("/tmp/p/q")
            open("/tmp/p/f", "w").write("t")
            os.rename("/tmp/p/f", "/tmp/p/q/f")
            shutil.copy("storage/shared/a/b/x.npy", "mine.npy")
            with multiprocessing.get_context("spawn").Pool(2) as pool:
                squares = pool.map(square, range(4))
            from sklearn.neighbors import NearestNeighbors   # here: the pool's workers need not import it

            points = np.random.default_rng(0).normal(size=(50, 3))
            _, nearest = NearestNeighbors(n_neighbors=2).fit(points).kneighbors(points)
            return {"x": np.load("mine.npy"), "squares": squares, "cwd": os.getcwd(), "home": os.environ["HOME"],
                    "nearest": nearest[:, 0],
                    "cpus": open("/proc/cpuinfo").read().count("processor") > 0}
    """, timeout_s=120, max_processes=32))
    assert r.status == "ok", r
    assert np.array_equal(r.value["x"], np.arange(6.0) * 2) and r.value["squares"] == [0, 1, 4, 9]
    assert r.value["cwd"] == r.value["home"] == local.RUN_SCRATCH and r.value["cpus"]
    assert np.array_equal(r.value["nearest"], np.arange(50))  # each point is its own nearest neighbour
    assert (places["storage"] / "a" / "b" / "x.npy").exists()


def test_jax_jit_runs_under_the_lockdown(places):
    ex = executor_for(places, "auto")
    r = ex.run(spec(places, """
        import jax, jax.numpy as jnp
        def main():
            f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
            return float(f(jnp.ones((8, 8))))
    """, timeout_s=300, memory_mb=None))
    assert r.status == "ok", r
    assert abs(r.value - 64 * np.tanh(8.0)) < 1e-3


def test_process_mode_says_what_holds(places):
    """No mount namespace: the run sees host paths (the scratch dir is its own, the mount table the
    host's) and says so; only the mount-table system calls are closed."""
    ex = LocalExecutor(isolation="process")  # the system's temporary dir: a run's uid must reach its scratch dir
    r = ex.run(RunSpec(code="", mode="command", entry="pwd; cat /proc/self/mountinfo", timeout_s=30))
    assert r.status == "ok", r
    assert "missing: neutral-paths" in r.isolation and "missing: hidden-mounts" in r.isolation
    assert "no-statmount" in r.isolation
    assert r.stdout.splitlines()[0].startswith(str(Path(tempfile.gettempdir()).resolve()))


@pytest.mark.parametrize("isolation", ["auto", "userns"])
def test_a_run_cannot_make_namespaces_of_its_own(places, isolation):
    """The code runs in a detached copy of its root, which the kernel treats as a chroot: no user
    namespace (so no capabilities in one, and less kernel reached), and without one no other kind."""
    ex = executor_for(places, isolation)
    r = ex.run(spec(places, """
        import ctypes, os
        def main():
            libc = ctypes.CDLL(None, use_errno=True)
            out = {}
            for name, flag in [("user", 0x10000000), ("mount", 0x20000), ("user+mount", 0x10020000), ("pid", 0x20000000)]:
                out[name] = "made" if libc.unshare(flag) == 0 else os.strerror(ctypes.get_errno())
            return out
    """))
    assert r.status == "ok", r
    assert set(r.value.values()) == {"Operation not permitted"}, r.value
