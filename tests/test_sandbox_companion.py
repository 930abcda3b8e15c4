"""A run's Companion (run_types.Companion): a second program in the sandbox, kept apart from the
main code, with real namespaces and real processes (docs/sandbox.md, "A program apart from its
evaluator").

The two programs meet only in the channel: the companion binds a unix socket there, the main code
connects. What each tries against the other travels back through that socket. Needs root and
unshare (the namespaces mode); elsewhere the module is skipped, saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from helpers import sandbox_processes

from station.core.run_types import CHANNEL_ENV, Companion
from station.executors import LocalExecutor, Mount, RunSpec
from station.executors.local import RUN_CHANNEL, SandboxError

MAIN_SECRET = "main-code-mount-secret"
COMPANION_LIB = "companion-library-text"

# Both sides probe the same way: an action done, or the OSError it met.
PROBES = """
def attempt(action):
    try:
        action()
        return "done"
    except OSError as err:
        return type(err).__name__
def reads(path):
    def read():
        with open(path, "rb") as f:
            f.read(64)
    return attempt(read)
"""


# The companion's side: bind the channel's socket, opened to the main code's uid only once
# chmod'ed, and answer one JSON message with probe(message).
SERVE = (
    PROBES
    + """
import json, os, signal, socket
def serve(probe, mode=0o666):
    path = os.path.join(os.environ["STATION_CHANNEL"], "sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path + ".new")
    os.chmod(path + ".new", mode)
    os.rename(path + ".new", path)  # the main code sees it once it is connectable
    server.listen(1)
    conn, _ = server.accept()
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    conn.sendall(json.dumps(probe(json.loads(data))).encode())
    conn.close()
"""
)

# The main code's side: wait for the socket, send one message, return the answer.
ASK = (
    PROBES
    + """
import json, os, signal, socket, time
def ask(message, name="sock"):
    path = wait_for(name)
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(json.dumps(message).encode())
    s.shutdown(socket.SHUT_WR)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return json.loads(data)
def wait_for(name):
    path = os.path.join(os.environ["STATION_CHANNEL"], name)
    for _ in range(3000):
        if os.path.exists(path):
            break
        time.sleep(0.01)
    return path
"""
)


@pytest.fixture(scope="module")
def places():
    """The main code's data (a mount with a secret) and the companion's own library (its mount)."""
    root = Path(tempfile.mkdtemp(prefix="station-companion-test-", dir="/srv" if os.access("/srv", os.W_OK) else None))
    (root / "data").mkdir()
    (root / "data" / "secret.txt").write_text(MAIN_SECRET)
    (root / "lib").mkdir()
    (root / "lib" / "helper.txt").write_text(COMPANION_LIB)
    for path in (root, root / "data", root / "lib"):
        path.chmod(0o755)
    (root / "scratch").mkdir(mode=0o755)
    yield root
    shutil.rmtree(root)


def executor_for(places: Path, isolation: str = "auto") -> LocalExecutor:
    try:
        ex = LocalExecutor(hide=[places / "data"], scratch_base=places / "scratch", isolation=isolation)  # type: ignore[arg-type]
    except SandboxError as err:
        pytest.skip(str(err))
    if isolation == "auto" and ex.mode != "namespaces":
        pytest.skip(f"the sandbox runs in {ex.mode!r} mode here (needs root and unshare)")
    return ex


@pytest.fixture(scope="module")
def executor(places):
    return executor_for(places)


def run(ex: LocalExecutor, places: Path, main: str, companion: str | None, **kw) -> object:
    """`main` and `companion`: the bodies of the two programs, after ASK and SERVE."""
    comp = (
        None
        if companion is None
        else Companion(code=SERVE + textwrap.dedent(companion), mounts=(Mount(places / "lib", "lib"),))
    )
    spec = RunSpec(
        code=ASK + textwrap.dedent(main),
        companion=comp,
        mounts=[Mount(places / "data", "data")],
        timeout_s=kw.pop("timeout_s", 30),
        **kw,
    )
    return ex.run(spec)


def companion_entry(isolation: list[str]) -> str:
    entries = [x for x in isolation if x.startswith("companion: ")]
    assert len(entries) == 1, isolation
    return entries[0]


# -- the channel ----------------------------------------------------------------------------------
def test_the_main_code_talks_to_the_companion_through_a_socket_in_the_channel(executor, places):
    """Bytes both ways over a socket the companion binds in the channel; both see the channel at one
    neutral path, named by STATION_CHANNEL; the companion's prints reach the run's stdout."""
    r = run(
        executor,
        places,
        """
        def main():
            answer = ask({"numbers": [1, 2, 3.5], "text": "from main"})
            return {"answer": answer, "channel": os.environ["STATION_CHANNEL"], "uid": os.getuid()}
    """,
        """
        print("companion started", flush=True)
        serve(lambda m: {"sum": sum(m["numbers"]), "echo": m["text"][::-1], "uid": os.getuid(),
                         "channel": os.environ["STATION_CHANNEL"]})
    """,
    )
    assert r.status == "ok", r
    answer = r.value["answer"]
    assert answer["sum"] == 6.5 and answer["echo"] == "niam morf"
    assert r.value["channel"] == answer["channel"] == RUN_CHANNEL
    assert "companion started" in r.stdout
    main_uid, companion_uid = r.value["uid"], answer["uid"]
    assert main_uid != companion_uid and f"uid {main_uid}" in r.isolation
    entry = companion_entry(r.isolation)
    assert f"uid {companion_uid}" in entry and "allow-list-root" in entry and "no-statmount" in entry


def test_a_socket_the_companion_does_not_open_is_closed_to_the_main_code(executor, places):
    """The companion owns the channel and what it binds there: a socket left at its default mode
    (group and others may not write: the companion has a group of its own) refuses the main code."""
    r = run(
        executor,
        places,
        """
        def main():
            return attempt(lambda: ask({}, name="sock"))
    """,
        """
        serve(lambda m: "connected", mode=0o755)
    """,
        timeout_s=10,
    )
    assert r.status == "ok", r
    assert r.value == "PermissionError"


def test_the_main_code_cannot_write_into_the_channel(executor, places):
    """Nothing the main code does changes the channel: no new file or folder, no renamed socket, no
    removed, rewritten or appended file, no changed mode; the companion then finds its note intact."""
    r = run(
        executor,
        places,
        """
        def main():
            ch = os.environ["STATION_CHANNEL"]
            sock, note = os.path.join(ch, "sock"), os.path.join(ch, "note.txt")
            wait_for("sock")  # the note was written before
            tries = {
                "create": attempt(lambda: open(os.path.join(ch, "planted"), "w")),
                "mkdir": attempt(lambda: os.mkdir(os.path.join(ch, "d"))),
                "write": attempt(lambda: open(note, "r+").write("forged")),
                "append": attempt(lambda: open(note, "a")),
                "rename": attempt(lambda: os.rename(sock, sock + ".x")),
                "unlink": attempt(lambda: os.unlink(note)),
                "chmod": attempt(lambda: os.chmod(ch, 0o777)),
                "chmod note": attempt(lambda: os.chmod(note, 0o666)),
            }
            return {"tries": tries, "read": open(note).read(), "companion": ask({})}
    """,
        """
        ch = os.environ["STATION_CHANNEL"]
        with open(os.path.join(ch, "note.txt"), "w") as f:
            f.write("the companion's note")
        os.chmod(os.path.join(ch, "note.txt"), 0o666)  # even writable by all, the main code's view is read-only
        serve(lambda m: {"note": open(os.path.join(ch, "note.txt")).read(), "entries": sorted(os.listdir(ch))})
    """,
    )
    assert r.status == "ok", r
    assert "done" not in r.value["tries"].values(), r.value
    assert r.value["read"] == "the companion's note"  # the main code may read it
    assert r.value["companion"] == {"note": "the companion's note", "entries": ["note.txt", "sock"]}


# -- apart -----------------------------------------------------------------------------------------
PROBE_MAIN = """
def probe(m):
    pid = m["pid"]
    return {
        "main mount, inside": reads("/run/work/data/secret.txt"),
        "main mount, host path": reads(m["secret"]),
        "main scratch": reads("/run/work/mine.txt"),
        "main results dir": attempt(lambda: os.listdir("/run/out")),
        "main root via /proc": reads(f"/proc/{pid}/root/run/work/mine.txt"),
        "main cwd via /proc": reads(f"/proc/{pid}/cwd/mine.txt"),
        "main environ": reads(f"/proc/{pid}/environ"),
        "main memory": reads(f"/proc/{pid}/mem"),
        "signal main": attempt(lambda: os.kill(pid, 0)),
        "its own mount": open("lib/helper.txt").read(),
        "pid": os.getpid(),
    }
serve(probe)
"""


@pytest.mark.parametrize("isolation, undumpable", [("auto", False), ("userns", False), ("userns", True)])
def test_neither_program_reaches_the_other(places, isolation, undumpable):
    """Each program has a root of its own: the companion finds none of the main code's mounts, scratch
    files or results dir, the main code none of the companion's mount. In root mode their uids
    differ, so neither reads the other's /proc files (root, cwd, environ, memory) nor signals it.
    In user-namespace mode they share one uid, and the same probes get through (that is what the
    isolation's 'missing: own uid' says) unless a program makes itself non-dumpable, as the
    evaluator's side does there; signals still pass."""
    ex = executor_for(places, isolation)
    r = run(
        ex,
        places,
        f"""
        import ctypes
        def main():
            if {undumpable}:
                ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
            open("mine.txt", "w").write("the main code's scratch file")
            got = ask({{"pid": os.getpid(), "secret": {str(places / "data" / "secret.txt")!r}}})
            pid = got["pid"]
            got.update({{
                "companion mount": reads("/run/work/lib/helper.txt"),
                "companion mount, host path": reads({str(places / "lib" / "helper.txt")!r}),
                "companion script via /proc": reads(f"/proc/{{pid}}/cwd/companion.py"),
                "companion environ": reads(f"/proc/{{pid}}/environ"),
                "signal companion": attempt(lambda: os.kill(pid, 0)),
                "own mount": open("data/secret.txt").read(),
            }})
            return got
    """,
        PROBE_MAIN,
    )
    assert r.status == "ok", r
    v = r.value
    assert (v["its own mount"], v["own mount"]) == (COMPANION_LIB, MAIN_SECRET)  # each reads its own
    files = [
        "main mount, inside",
        "main mount, host path",
        "main scratch",
        "main results dir",
        "companion mount",
        "companion mount, host path",
    ]
    assert {k: v[k] for k in files} == dict.fromkeys(files, "FileNotFoundError")
    by_proc = [
        "main root via /proc",
        "main cwd via /proc",
        "main environ",
        "companion environ",
        "companion script via /proc",
    ]
    signals = ["signal main", "signal companion"]
    entry = companion_entry(r.isolation)
    if ex.mode == "namespaces":
        closed = [*by_proc, "main memory"]
        assert {k: v[k] for k in closed} == dict.fromkeys(closed, "PermissionError")
        assert {k: v[k] for k in signals} == dict.fromkeys(signals, "PermissionError")
        assert "missing" not in entry
    else:
        assert "missing: own uid" in entry
        assert {k: v[k] for k in signals} == dict.fromkeys(signals, "done")
        main_side = ["main root via /proc", "main cwd via /proc", "main environ"]
        assert {k: v[k] for k in main_side} == dict.fromkeys(main_side, "PermissionError" if undumpable else "done")


# -- limits and ends -------------------------------------------------------------------------------
def test_a_companion_that_sleeps_on_ends_with_the_main_code(executor, places):
    """The run ends when the main code does: a companion that never returns does not hold it to
    the wall clock, and none of its processes outlive the run."""
    r = run(
        executor,
        places,
        """
        def main():
            wait_for("up")
            return "main done"
    """,
        """
        import subprocess, time
        subprocess.Popen(["sleep", "100000"], start_new_session=True)  # a daemon of its own, too
        open(os.path.join(os.environ["STATION_CHANNEL"], "up"), "w").close()
        time.sleep(100000)
    """,
        timeout_s=60,
    )
    assert (r.status, r.value) == ("ok", "main done"), r
    assert sandbox_processes(within=executor.scratch_base) == []


def test_a_spinning_companion_runs_into_the_runs_cpu_cap(executor, places):
    """The companion is in the sandbox's process tree: its CPU time counts against the run's cap
    while the main code only sleeps. It ignores its own rlimit's soft signal: alive, or killed at
    the hard limit and reaped by PID 1, its time counts."""
    r = run(
        executor,
        places,
        """
        def main():
            time.sleep(50)
            return "slept"
    """,
        """
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        while True:
            pass
    """,
        timeout_s=60,
        cpu_seconds=2,
    )
    assert r.status == "error", r
    assert r.error.startswith("CPU time limit exceeded: the run's processes used "), r.error
    assert r.error.endswith("the limit is 2")


def test_the_companions_threads_count_against_the_runs_process_cap(executor, places):
    r = run(
        executor,
        places,
        """
        def main():
            time.sleep(50)
            return "slept"
    """,
        """
        import threading, time
        threads = []
        try:
            for _ in range(20):
                threads.append(threading.Thread(target=time.sleep, args=(100,), daemon=True))
                threads[-1].start()
        except RuntimeError:
            pass  # its own uid's process rlimit; the run's cap counts both programs together
        time.sleep(100)
    """,
        timeout_s=60,
        max_processes=8,
    )
    assert r.status == "error", r
    assert r.error.startswith("Process limit exceeded: the run had ") and r.error.endswith("the limit is 8"), r.error


def test_the_companions_scratch_dir_counts_against_the_scratch_quota(executor, places):
    r = run(
        executor,
        places,
        """
        def main():
            return ask({})
    """,
        """
        with open("big.bin", "wb") as f:
            f.write(b"x" * (3 << 20))
        serve(lambda m: os.path.getsize("big.bin"))
    """,
        max_scratch_mb=2,
    )
    assert r.status == "error", r
    assert r.error.startswith("Scratch disk quota exceeded: the scratch dir holds "), r.error


def test_a_crashing_companion_leaves_the_main_code_running(executor, places):
    """Its traceback reaches the run's stderr; the main code's result stands. (It fails while the
    main code waits on its socket, so that the main code does not end the run first.)"""
    r = run(
        executor,
        places,
        """
        def main():
            try:
                return ask({})
            except ValueError:  # json.loads(b""): EOF when the companion ended, without an answer
                return "no answer"
    """,
        """
        serve(lambda m: 1 / 0)
    """,
    )
    assert (r.status, r.value) == ("ok", "no answer"), r
    assert "ZeroDivisionError: division by zero" in r.stderr and "companion.py" in r.stderr


def test_a_companion_that_cannot_start_leaves_the_main_code_running(places):
    """Here its interpreter is named by a link outside the root it builds (PID 1, which starts on
    the host, uses it): why goes to the run's stderr and into its isolation entry, and the main
    code (a shell command, which needs no interpreter) runs all the same."""
    ex = executor_for(places)
    link = places / "bin" / "python3"
    link.parent.mkdir(exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(sys.executable)
    ex.python = str(link)
    spec = RunSpec(
        code="", mode="command", entry="echo main ran", timeout_s=30, companion=Companion(code="print('never')")
    )
    r = ex.run(spec)
    assert (r.status, r.stdout) == ("ok", "main ran\n"), r
    assert "companion could not start: FileNotFoundError" in r.stderr
    assert companion_entry(r.isolation).startswith("companion: could not start: FileNotFoundError")


def test_companion_specs_are_checked(executor, places):
    """A companion writes only its own dirs: a writable mount is refused, as are odd names."""
    for companion, why in [
        (
            Companion(code="", mounts=(Mount(places / "lib", "lib", writable=True),)),
            "companion mount 'lib' must be read-only: a companion writes only its dirs",
        ),
        (Companion(code="", filename="../x.py"), "bad companion file name '../x.py'"),
        (Companion(code="", mounts=(Mount(places / "lib", "../lib"),)), "bad companion mount target '../lib'"),
    ]:
        r = executor.run(RunSpec(code="", mode="command", entry="true", companion=companion))
        assert (r.status, r.error) == ("system_error", f"Sandbox error: {why}")


def test_a_run_without_a_companion_has_no_channel(executor, places):
    r = run(
        executor,
        places,
        """
        def main():
            return [os.environ.get("STATION_CHANNEL"), sorted(os.listdir("/run"))]
    """,
        None,
    )
    assert r.status == "ok", r
    assert r.value == [None, ["harness", "out", "work"]]
    assert not any(x.startswith("companion") for x in r.isolation)
    assert CHANNEL_ENV == "STATION_CHANNEL"


def others_can_run(python: str) -> bool:
    """Whether a sandbox uid can run this interpreter (a root-only home folder can hold it)."""
    if os.geteuid() != 0:
        return True
    try:
        done = subprocess.run(
            [python, "-c", "import json"], user=65534, group=65534, extra_groups=[], capture_output=True
        )
    except OSError:
        return False
    return done.returncode == 0


def test_process_mode_runs_the_companion_as_a_child_and_kills_it_at_the_end(places):
    """No namespaces: the companion is a plain child process in a session of its own (at a uid of
    its own as root), the channel is a host folder, and the isolation says what is missing. When
    the main code ends its process group is killed, the sleeping companion with it."""
    ex = LocalExecutor(scratch_base=places / "scratch", isolation="process")
    ex.python = os.environ.get("STATION_TEST_OTHER_PYTHON", ex.python)  # one a sandbox uid may run
    if not others_can_run(ex.python):
        pytest.skip(f"a sandbox uid cannot run {ex.python}")
    comp = Companion(
        code=SERVE
        + textwrap.dedent("""
        import time
        serve(lambda m: {"uid": os.getuid(), "channel": os.environ["STATION_CHANNEL"], "cwd": os.getcwd(),
                         "pid": os.getpid()})
        time.sleep(100000)
    """)
    )
    main = ASK + "print(json.dumps(ask({})))\n"
    r = ex.run(RunSpec(code=main, mode="command", entry=f"{ex.python} -s submission.py", companion=comp, timeout_s=60))
    assert r.status == "ok", r
    got = json.loads(r.stdout)
    assert got["channel"].startswith(str(places / "scratch")) and got["channel"].endswith("/channel")
    assert got["cwd"] == str(Path(got["channel"]).parent / "companion")
    entry = companion_entry(r.isolation)
    assert "missing: own root" in entry
    if os.geteuid() == 0:
        assert f"uid {got['uid']}" in entry and "missing: own uid" not in entry
    assert not Path(f"/proc/{got['pid']}").exists()  # killed and reaped before the run ended


def test_the_companion_imports_only_sources_from_its_storage_mounts(executor, places):
    """Like every Python process of a run, the companion imports the run's sitecustomize, told its
    own storage mounts (not the main code's) are source only (tests/test_redteam_bytecode.py)."""
    comp = Companion(
        code=SERVE
        + textwrap.dedent("""
        import sys
        serve(lambda m: [os.environ["STATION_SOURCE_ONLY"], "sitecustomize" in sys.modules])
    """),
        mounts=(Mount(places / "lib", "storage/lib"),),
    )
    r = executor.run(
        RunSpec(
            code=ASK + "def main():\n    return ask({})\n",
            companion=comp,
            timeout_s=30,
            mounts=[Mount(places / "data", "storage/data")],
        )
    )
    assert r.status == "ok", r
    assert r.value == ["/run/work/storage/lib", True]


def test_the_companion_reaches_no_abstract_socket_or_ipc_object_of_the_main_code(executor, places):
    """Abstract unix sockets belong to a network namespace, SysV IPC objects to an IPC namespace,
    and neither checks who connects or (at mode 0666) who opens: the companion has namespaces of
    its own, so it finds neither the main code's listening abstract socket nor its message queue."""
    r = run(
        executor,
        places,
        """
        import ctypes
        def main():
            listener = socket.socket(socket.AF_UNIX)
            listener.bind("\\0evaluator-private")
            listener.listen(1)
            queue = ctypes.CDLL(None, use_errno=True).msgget(0x5151, 0o1000 | 0o666)  # IPC_CREAT
            return [queue >= 0, ask({})]
    """,
        """
        import ctypes
        def probe(m):
            s = socket.socket(socket.AF_UNIX)
            libc = ctypes.CDLL(None, use_errno=True)
            queue = libc.msgget(0x5151, 0)
            return [attempt(lambda: s.connect("\\0evaluator-private")),
                    "found" if queue >= 0 else os.strerror(ctypes.get_errno())]
        serve(probe)
    """,
    )
    assert r.status == "ok", r
    assert r.value == [True, ["ConnectionRefusedError", os.strerror(2)]]
