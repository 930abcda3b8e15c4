"""The local sandbox against hostile submissions, with real subprocesses and real namespaces.

Each hostile test asserts a clear status or error *and* that nothing outside changed. The
"station dir" (with a fake database and the storage) lives under /srv, outside the dirs the
sandbox masks anyway, so that hiding it is really tested. Needs root and unshare (the
namespaces mode); elsewhere the module is skipped, saying why.
"""
from __future__ import annotations

import fcntl
import math
import os
import pickle
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import sandbox_processes

from station.executors import LocalExecutor, Mount, RunSpec, local
from station.executors.local import SANDBOX_GID, UID_BASE, UID_COUNT

SECRET_KEY = "sk-ant-test-0123456789-must-not-leak"
DB_TEXT = "STATION-DATABASE-CONTENT"


@pytest.fixture(scope="module")
def station():
    """A fake station dir: database, a private file, and the research storage."""
    root = Path(tempfile.mkdtemp(prefix="station-sandbox-test-", dir="/srv" if os.access("/srv", os.W_OK) else None))
    (root / "station.db").write_text(DB_TEXT)
    storage = root / "files" / "research" / "storage"
    for area in ("shared", "system", "lineages/alpha", "lineages/beta"):
        (storage / area).mkdir(parents=True)
    (storage / "system" / "task.txt").write_text("task data")
    (storage / "lineages" / "beta" / "notes.txt").write_text("beta notes")
    (storage / "shared" / "from_station.txt").write_text("written by the station")
    os.chmod(storage / "shared" / "from_station.txt", 0o644)  # not group-writable: the executor fixes that
    for area in ("system", "lineages/beta"):
        os.chmod(storage / area, 0o777)  # only the read-only mount stops writes there
    yield root
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def executor(station, tmp_path_factory):
    ex = LocalExecutor(hide=[station], scratch_base=tmp_path_factory.mktemp("scratch"))
    if ex.mode != "namespaces":
        pytest.skip(f"the sandbox runs in {ex.mode!r} mode here (needs root and unshare)")
    return ex


@pytest.fixture(scope="module", autouse=True)
def api_keys():
    """Keys in the station's environment, as a real station has them."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
        mp.setenv("OPENAI_API_KEY", SECRET_KEY)
        yield


def mounts(station: Path) -> list[Mount]:
    storage = station / "files" / "research" / "storage"
    return [Mount(storage / "shared", "storage/shared", True), Mount(storage / "system", "storage/system"),
            Mount(storage / "lineages" / "alpha", "storage/alpha", True),
            Mount(storage / "lineages" / "alpha", "storage/lineage", True),
            Mount(storage / "lineages" / "beta", "storage/beta")]


def run(executor, station, code: str, **kw):
    spec = RunSpec(code=textwrap.dedent(code), timeout_s=kw.pop("timeout_s", 5), mounts=mounts(station), **kw)
    return executor.run(spec)


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# -- normal cases ----------------------------------------------------------------------------------
def test_function_mode_returns_data_exactly(executor, station):
    r = run(executor, station, """
        import numpy as np
        def main():
            return {"a": np.arange(7.0) / 3, "m": np.eye(2, dtype=bool), "i": np.int64(7), "f": np.float32(0.5),
                    "l": [1, 2.5, "x", None, True], "t": (1, (2, 3)), "nested": {"k": [np.ones(2, np.int32)]}}
    """)
    assert r.status == "ok", r
    v = r.value
    assert v["a"].dtype == np.float64 and np.array_equal(v["a"], np.arange(7.0) / 3)  # bit-exact
    assert v["m"].dtype == bool and v["m"].tolist() == [[True, False], [False, True]]
    assert v["i"] == 7 and type(v["i"]) is int and v["f"] == 0.5
    assert v["l"] == [1, 2.5, "x", None, True] and v["t"] == (1, (2, 3)) and type(v["t"][1]) is tuple  # tuples stay
    assert v["nested"]["k"][0].dtype == np.int32
    assert r.exit_code == 0 and any(x.startswith("uid ") for x in r.isolation)


def test_command_mode(executor, station):
    r = run(executor, station, "print('from file')\n", mode="command",
            entry="python submission.py; echo err >&2; ls storage")
    assert r.status == "ok" and r.value is None, r
    assert r.stdout.split() == ["from", "file", "alpha", "beta", "lineage", "shared", "system"]
    assert r.stderr == "err\n"
    r = run(executor, station, "", mode="command", entry="exit 3")
    assert (r.status, r.error, r.exit_code) == ("error", "Execution failed with exit code 3", 3)


def test_import_error(executor, station):
    r = run(executor, station, "import no_such_module_xyz\ndef main():\n    return 1\n")
    assert r.status == "error"
    assert r.error == "Import failed: ModuleNotFoundError: No module named 'no_such_module_xyz'"
    assert 'submission.py", line 1' in r.traceback


def test_exception_traceback_with_hint(executor, station):
    r = run(executor, station, """
        def helper():
            return lenn([1, 2])
        def main():
            return helper()
    """)
    assert r.status == "error" and r.crashed
    assert r.error == "NameError: name 'lenn' is not defined"
    assert "Did you mean: 'len'?" in r.traceback
    assert 'submission.py", line 3, in helper' in r.traceback and "harness.py" not in r.traceback


def test_missing_entry_point(executor, station):
    r = run(executor, station, "def main():\n    return 1\n", entry="solve")
    assert r.status == "error" and "solve()" in r.error and "not found" in r.error


def test_concurrent_runs_from_four_threads(executor, station):
    results = {}

    def one(i):
        results[i] = run(executor, station, f"import os\ndef main():\n    return [{i}, os.getuid()]\n")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[i].status == "ok" and results[i].value[0] == i for i in range(4)), results
    assert len({results[i].value[1] for i in range(4)}) == 4  # one uid per run in flight


# -- secrets ---------------------------------------------------------------------------------------
def test_api_keys_are_not_visible(executor, station):
    r = run(executor, station, """
        import os
        def main():
            found = [k for k in os.environ if "KEY" in k]
            for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self"]:
                try:
                    found.append(open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
                except OSError as err:
                    found.append(type(err).__name__)
            return found
    """)
    assert r.status == "ok", r
    assert "ANTHROPIC_API_KEY" not in str(r.value) and SECRET_KEY not in str(r.value)
    assert "PermissionError" in r.value  # PID 1 (the root-owned sandbox init) stays closed


def test_station_database_is_hidden(executor, station):
    r = run(executor, station, f"""
        import os
        def main():
            tries = {{}}
            for path in ["{station}/station.db", "storage/shared/../../../../station.db",
                         "storage/shared/../../station.db"]:
                try:
                    tries[path] = open(path).read()
                except OSError as err:
                    tries[path] = type(err).__name__
            try:
                tries["listing"] = os.listdir("{station}")
            except OSError as err:
                tries["listing"] = type(err).__name__
            return tries
    """)
    assert r.status == "ok", r
    assert DB_TEXT not in str(r.value)
    assert r.value["listing"] == "FileNotFoundError" and r.value[f"{station}/station.db"] == "FileNotFoundError"


def expected_root() -> set[str]:
    """The top-level names of a run's root: the OS, /etc, /dev, /proc, /sys, private tmp, /run (the
    run's own folders and the harness), and the first component of each place the interpreter
    lives (here, e.g., /root for pyenv, /work for the checkout's .venv)."""
    system = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}
    names = {n for n in system if os.path.lexists(f"/{n}")} | {"etc", "dev", "proc", "sys", "tmp", "var", "run"}
    for place in (sys.prefix, sys.base_prefix):
        names.add(Path(os.path.abspath(place)).parts[1])
    return names


def test_the_run_sees_an_allow_list_of_the_host_and_nothing_else(executor, station):
    """Walk the run's whole root (not /proc, /sys, the OS's own /usr): the exact top-level names,
    and outside the OS only the interpreter, the harness file and the run's own folders, these
    three at neutral paths under /run."""
    project = Path(__file__).resolve().parents[1]
    r = run(executor, station, f"""
        import os, pwd
        SKIP = ("/proc", "/sys", "/usr", "/dev")
        def main():
            found = []
            for top, dirs, names in os.walk("/"):
                # the OS and the interpreter's libraries are on the list: listed, not walked
                dirs[:] = [d for d in dirs if os.path.join(top, d) not in SKIP
                           and d != "site-packages" and not d.startswith("python3")]
                found += [os.path.join(top, name) for name in dirs + names]
            return {{"top": sorted(os.listdir("/")), "paths": found, "etc": sorted(os.listdir("/etc")),
                     "dev": sorted(os.listdir("/dev")), "git": os.path.exists("{project}/.git"),
                     "project": sorted(os.listdir("{project}")),
                     "owners": [u.pw_uid for u in pwd.getpwall()]}}
    """, timeout_s=120)
    assert r.status == "ok", r
    v = r.value
    # every uid runs lease has a name (a file another run wrote has an owner JAX's cache eviction finds)
    assert set(range(UID_BASE, UID_BASE + UID_COUNT)) <= set(v["owners"]) or os.geteuid() != 0
    assert set(v["top"]) == expected_root(), v["top"]
    assert [x for x in r.isolation if not x.startswith("uid ")] == [
        *local.NAMESPACES, "allow-list-root", "read-only-root", "private-tmp", "nosuid-nodev", "neutral-paths",
        "hidden-mounts", "no-capabilities", "no-new-privs", "rlimits", "no-statmount", "scrubbed-env", "pdeathsig",
        *local.CAPS]
    assert v["git"] is False and set(v["project"]) <= {".venv"}  # the checkout: its venv only
    assert v["etc"] == sorted(n for n in ("alternatives", "group", "hosts", "ld.so.cache", "ld.so.conf",
                                          "ld.so.conf.d", "localtime", "os-release", "passwd")
                              if n in ("group", "hosts", "passwd") or os.path.lexists(f"/etc/{n}"))
    assert set(v["dev"]) <= {"fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"}
    assert not [p for p in v["paths"] if p.startswith(("/home", "/srv", "/opt", "/mnt", "/var/lib", "/root/."))
                and ".pyenv" not in p]
    assert not any(str(station) in p for p in v["paths"]) and not any("/.git" in p for p in v["paths"])
    checkout = [p for p in v["paths"] if p.startswith(str(project))]
    assert all(p == str(project) or p.startswith(sys.prefix) for p in checkout), checkout
    own = {p for p in v["paths"] if p.startswith(local.RUN_ROOT + "/")}
    assert {local.RUN_SCRATCH, local.RUN_OUT, local.RUN_HARNESS} <= own
    harness = {os.path.dirname(local.RUN_HARNESS), local.RUN_HARNESS, local.RUN_SITE, f"{local.RUN_SITE}/sitecustomize.py"}
    assert own - {*harness, local.RUN_OUT} == {
        p for p in own if p.startswith(local.RUN_SCRATCH)}  # nothing else there
    assert not any(p.endswith("local.py") for p in v["paths"])


# -- writes ----------------------------------------------------------------------------------------
def test_writes_outside_scratch_fail(executor, station, tmp_path):
    project = Path(__file__).resolve().parents[1]
    marker = f"sandbox-marker-{os.getpid()}"
    r = run(executor, station, f"""
        import os
        def main():
            out = {{}}
            for path in ["{project}/{marker}", "/etc/{marker}", "storage/system/{marker}", "storage/beta/{marker}",
                         "/tmp/{marker}", "storage/shared/{marker}", "storage/lineage/{marker}", "{marker}"]:
                try:
                    with open(path, "w") as f:
                        f.write("x")
                    out[path] = "written"
                except OSError as err:
                    out[path] = type(err).__name__
            try:
                open("storage/shared/from_station.txt", "a").write(" and by the code")
                out["append"] = "written"
            except OSError as err:
                out["append"] = type(err).__name__
            return out
    """)
    assert r.status == "ok", r
    v = r.value
    assert v[f"{project}/{marker}"] in ("PermissionError", "OSError") and v[f"/etc/{marker}"] in ("PermissionError", "OSError")
    assert v[f"storage/system/{marker}"] == v[f"storage/beta/{marker}"] == "OSError"  # EROFS, despite mode 777
    assert v[f"/tmp/{marker}"] == v["storage/shared/" + marker] == v["storage/lineage/" + marker] == "written"
    assert v[marker] == v["append"] == "written"
    storage = station / "files" / "research" / "storage"
    assert not (project / marker).exists() and not Path("/etc", marker).exists()
    assert not Path("/tmp", marker).exists()  # it went to the run's private /tmp
    assert not (storage / "system" / marker).exists() and not (storage / "lineages" / "beta" / marker).exists()
    shared = storage / "shared" / marker
    assert shared.exists() and shared.stat().st_gid == SANDBOX_GID and (storage / "lineages" / "alpha" / marker).exists()
    assert (storage / "shared" / "from_station.txt").read_text() == "written by the station and by the code"


def test_storage_traversal_and_links_stay_inside(executor, station):
    secret = station / "files" / "private.txt"
    secret.write_text("PRIVATE-OUTSIDE-STORAGE")
    r = run(executor, station, f"""
        import os
        def main():
            os.symlink("/", "storage/shared/root_link")
            os.symlink("../../../..", "storage/shared/up_link")
            out = []
            for path in ["storage/shared/../../private.txt", "storage/shared/root_link{secret}",
                         "storage/shared/up_link/files/private.txt", "storage/beta/../../../private.txt",
                         "storage/shared/../../../../files/private.txt"]:
                try:
                    out.append(open(path).read())
                except OSError as err:
                    out.append(type(err).__name__)
            out.append(sorted(os.listdir("storage/shared/..")))
            return out
    """)
    assert r.status == "ok", r
    assert "PRIVATE-OUTSIDE-STORAGE" not in str(r.value)
    assert r.value[-1] == ["alpha", "beta", "lineage", "shared", "system"]  # '..' is the sandbox's storage dir
    # the links do land in shared storage on the host: the station's storage code must refuse them
    assert (station / "files/research/storage/shared/root_link").is_symlink()


# -- resources -------------------------------------------------------------------------------------
def test_fork_bomb_is_contained(executor, station):
    began = time.monotonic()
    r = run(executor, station, """
        import os
        def main():
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
    """, timeout_s=3, max_processes=20)
    assert (r.status, r.error) == ("error", "Process limit exceeded: the run had 21 processes and threads at once, "
                                            "the limit is 20")  # RLIMIT_NPROC is the limit + 1: the excess is seen
    assert time.monotonic() - began < 8
    assert sandbox_processes(within=executor.scratch_base) == []


def test_file_size_limit(executor, station):
    r = run(executor, station, "def main():\n    open('big', 'wb').write(bytes(3 << 20))\n", max_file_mb=1)
    assert r.status == "error" and r.error.startswith("OSError: [Errno 27] File too large"), r


def test_memory_bomb(executor, station):
    r = run(executor, station, "def main():\n    return len(bytearray(2 << 30))\n", memory_mb=512)
    assert r.status == "error" and r.error.startswith("MemoryError"), r


def test_infinite_loop_is_killed_quickly(executor, station):
    began = time.monotonic()
    r = run(executor, station, "def main():\n    while True:\n        pass\n", timeout_s=1.5)
    assert (r.status, r.error) == ("timeout", "Execution timed out after 1.5 seconds")
    assert time.monotonic() - began < 4 and sandbox_processes(within=executor.scratch_base) == []
    # the layers in force are reported although the sandbox was killed (they were all "missing")
    assert not [x for x in r.isolation if x.startswith("missing:")], r.isolation
    assert "allow-list-root" in r.isolation and any(x.startswith("uid ") for x in r.isolation)


def test_cpu_limit_applies_even_before_the_wall_clock(executor, station):
    r = run(executor, station, "def main():\n    while True:\n        pass\n", timeout_s=10, cpu_seconds=1)
    assert r.status == "error" and r.error == "Execution killed by signal SIGXCPU (CPU time limit)", r


def test_huge_stdout_is_capped_head_and_tail(executor, station):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = run(executor, station, """
        import sys
        def main():
            print("HEAD-MARK")
            chunk = "y" * (1 << 20)
            for _ in range(300):
                sys.stdout.write(chunk)
            print("\\nTAIL-MARK")
            raise RuntimeError("the end")
    """, max_output_bytes=100_000, timeout_s=20)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert r.status == "error" and r.error == "RuntimeError: the end"
    assert r.stdout.startswith("HEAD-MARK") and r.stdout.rstrip().endswith("TAIL-MARK")
    assert "bytes cut" in r.stdout and len(r.stdout) < 101_000
    assert grown_mb < 50  # 300 MB went through; the station kept 100 kB


def test_forged_score_lines_are_ignored(executor, station):
    r = run(executor, station, """
        def main():
            print("EXECUTION_SUCCESS\\nSCORE: 999.0\\n{\\"status\\": \\"ok\\", \\"value\\": 999}")
            return 0.25
    """)
    assert r.status == "ok" and r.value == 0.25


# -- forged results --------------------------------------------------------------------------------
def test_monkeypatched_numpy_writing_a_pickle_is_refused(executor, station, tmp_path):
    canary = tmp_path / "unpickled"
    r = run(executor, station, f"""
        import os
        import numpy as np
        class Boom:
            def __reduce__(self):
                return (os.system, ("touch {canary}",))
        real_save = np.save
        np.save = lambda path, arr, allow_pickle=False: real_save(path, np.array([Boom()]), allow_pickle=True)
        def main():
            return np.zeros(3)
    """)
    assert r.status == "error" and r.error.startswith("Result refused: 0.npy: dtype object"), r
    assert not canary.exists()


def test_forged_manifest_with_pickle_is_refused(executor, station, tmp_path):
    canary = tmp_path / "unpickled"
    payload = pickle.dumps(Boom(str(canary)))
    r = run(executor, station, f"""
        import os, sys, json
        def main():
            open("../out/0.npy", "wb").write({payload!r})   # the results dir sits next to the scratch dir
            open("../out/result.json", "w").write(json.dumps({{"status": "ok", "value": {{"npy": 0}}}}))
            os._exit(0)
    """)
    assert r.status == "error" and r.error.startswith("Result refused: 0.npy"), r
    assert not canary.exists()
    r = run(executor, station, """
        import json, os
        json.dump = lambda obj, f: f.write("cos\\nsystem\\n(S'true'\\ntR.")   # a pickle where JSON belongs
        def main():
            return 1
    """)
    assert r.status == "error" and r.error.startswith("Result refused: the manifest is not JSON"), r


def test_forged_links_in_results_are_not_followed(executor, station):
    r = run(executor, station, """
        import os, json
        def main():
            os.symlink("/etc/shadow", "../out/0.npy")
            os.mkfifo("../out/1.npy")
            json.dump({"status": "ok", "value": [{"npy": 0}, {"npy": 1}]}, open("../out/result.json", "w"))
            os._exit(0)
    """)
    assert r.status == "error" and "Result refused" in r.error, r


def test_nan_and_inf_are_returned_as_data(executor, station):
    r = run(executor, station, """
        import numpy as np
        def main():
            return [float("nan"), float("inf"), -float("inf"), np.array([np.nan, 1.0])]
    """)
    assert r.status == "ok"
    assert math.isnan(r.value[0]) and r.value[1] == math.inf and r.value[2] == -math.inf
    assert np.isnan(r.value[3][0]) and r.value[3][1] == 1.0


def test_wrong_shapes_are_returned_as_they_are(executor, station):
    r = run(executor, station, "import numpy as np\ndef main():\n    return np.zeros((3, 2, 1))\n")
    assert r.status == "ok" and r.value.shape == (3, 2, 1)  # the evaluator judges shapes


@pytest.mark.parametrize("expr, words", [
    ("object()", "returned object, which is not plain data"),
    ("{1, 2}", "returned set"),
    ("np.array([object()], dtype=object)", "numpy.ndarray of dtype object"),
    ("np.array(['a'])", "of dtype <U1"),
    ("{1: 2}", "dict keys must be strings"),
    ("b'bytes'", "returned bytes"),
    ("1 + 2j", "returned complex"),
])
def test_non_plain_values_get_a_clear_error(executor, station, expr, words):
    r = run(executor, station, f"import numpy as np\ndef main():\n    return {expr}\n")
    assert r.status == "error" and words in r.error, r


# -- processes and the network ---------------------------------------------------------------------
def test_cannot_kill_the_station_or_other_processes(executor, station):
    sentinel = subprocess.Popen(["sleep", "30"])
    try:
        r = run(executor, station, f"""
            import os
            def main():
                out = []
                for pid in [os.getppid(), {os.getpid()}, {sentinel.pid}, 1, -1]:   # -1: all it may signal
                    try:
                        os.kill(pid, 9)
                        out.append("killed")
                    except OSError as err:
                        out.append(type(err).__name__)
                print(out, flush=True)
                os.kill(os.getpid(), 9)
        """)
        assert sentinel.poll() is None
        assert r.stdout.strip() == ("['PermissionError', 'ProcessLookupError', 'ProcessLookupError', "
                                    "'PermissionError', 'ProcessLookupError']")
        assert r.status == "error" and r.error == "Execution killed by signal SIGKILL (memory limit?)"
    finally:
        sentinel.kill()
        sentinel.wait()


def test_sleeping_past_the_timeout_keeps_the_output(executor, station):
    began = time.monotonic()
    r = run(executor, station, "import time\ndef main():\n    print('working')\n    time.sleep(100)\n", timeout_s=1)
    assert r.status == "timeout" and r.error.startswith("Execution timed out after 1 seconds")
    assert r.stdout == "working\n" and time.monotonic() - began < 3


def test_a_killed_station_leaves_no_sandbox_behind(tmp_path, monkeypatch):
    script = ("from station.executors import LocalExecutor, RunSpec\n"
              f"LocalExecutor(scratch_base={str(tmp_path)!r}).run("
              "RunSpec(code='import time\\ndef main():\\n    time.sleep(60)', timeout_s=60))\n")
    station_proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        assert wait_until(lambda: sandbox_processes(within=tmp_path) != [], 10), "the sandbox never started"
    finally:
        station_proc.kill()  # SIGKILL: no cleanup code runs in the station
        station_proc.wait()
    assert wait_until(lambda: sandbox_processes(within=tmp_path) == [], 5), sandbox_processes(within=tmp_path)
    # its run dir is left behind, until the next executor on that scratch base sweeps it
    (left,) = tmp_path.glob("station-*")
    live = tmp_path / "station-live-run"
    (live / "work").mkdir(parents=True)
    (live / "sandbox.json").write_text("{}")
    lock = os.open(live, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    monkeypatch.setattr(local, "STALE_AFTER_S", 0)
    LocalExecutor(scratch_base=tmp_path)
    assert not left.exists() and live.exists()  # a locked run dir is a run in flight
    os.close(lock)


def test_run_dirs_too_fresh_at_the_start_are_swept_by_a_later_run(tmp_path, monkeypatch):
    """A station restarted right after a kill finds its predecessor's run dirs too fresh to sweep;
    a later run sweeps them once they are stale."""
    executor = LocalExecutor(scratch_base=tmp_path)
    left = tmp_path / "station-eval-1-v1-train0-abcd1234"
    (left / "work").mkdir(parents=True)
    (left / "sandbox.json").write_text("{}")
    assert executor.run(RunSpec(code="def main():\n    return 1", timeout_s=30)).value == 1
    assert left.exists()  # fresh: it may be a run just being set up
    monkeypatch.setattr(local, "STALE_AFTER_S", 0)
    assert executor.run(RunSpec(code="def main():\n    return 2", timeout_s=30)).value == 2
    assert not left.exists()
    executor.close()


def test_daemonized_children_do_not_survive(executor, station):
    r = run(executor, station, """
        import os, subprocess
        def main():
            subprocess.Popen(["sleep", "987.654"], start_new_session=True)
            if os.fork() == 0:          # the classic double fork
                os.setsid()
                if os.fork() == 0:
                    os.execvp("sleep", ["sleep", "987.655"])
                os._exit(0)
            return "left them running"
    """)
    assert r.status == "ok"
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    assert "987.65" not in ps and sandbox_processes(within=executor.scratch_base) == []


def test_no_network(executor, station):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        r = run(executor, station, f"""
            import socket
            def main():
                out = []
                for target in [("127.0.0.1", {port}), ("8.8.8.8", 53)]:
                    try:
                        socket.create_connection(target, timeout=2).close()
                        out.append("connected")
                    except OSError as err:
                        out.append(type(err).__name__)
                try:
                    socket.getaddrinfo("example.com", 443)
                    out.append("resolved")
                except OSError as err:
                    out.append(type(err).__name__)
                return out
        """)
        assert r.status == "ok", r
        assert "connected" not in r.value and "resolved" not in r.value, r.value
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()


# -- other modes -----------------------------------------------------------------------------------
def test_user_namespace_mode(station):
    try:
        ex = LocalExecutor(hide=[station], isolation="userns")
    except local.SandboxError as err:
        pytest.skip(str(err))
    capabilities = textwrap.dedent("""
        import ctypes
        header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # version 3, this process
        assert ctypes.CDLL(None).capget(header, data) == 0
        print("CapEff", data[0] | data[3], "CapPrm", data[1] | data[4])
    """)  # capget(2): /proc/self/status is closed to the run
    r = ex.run(RunSpec(code=capabilities, mode="command", timeout_s=10,
                       entry=f"env; cat {station}/station.db; touch /etc/userns-marker; python submission.py"))
    assert r.status == "ok", r
    assert "user-namespace" in r.isolation and "net-namespace" in r.isolation
    assert SECRET_KEY not in r.stdout and DB_TEXT not in r.stdout and not Path("/etc/userns-marker").exists()
    assert "CapEff 0 CapPrm 0" in r.stdout


def test_process_mode_reports_what_is_missing(station):
    ex = LocalExecutor(hide=[station], isolation="process")
    r = ex.run(RunSpec(code="", mode="command", entry="env; id -u", timeout_s=5))
    assert r.status == "ok", r
    assert SECRET_KEY not in r.stdout and "HOME=" in r.stdout
    uid = int(r.stdout.split()[-1])  # as root, a sandbox uid (whichever is free: other tests run sandboxes too)
    assert (UID_BASE <= uid < UID_BASE + UID_COUNT) if os.geteuid() == 0 else uid == os.getuid()
    assert "missing: net-namespace" in r.isolation and "missing: read-only-root" in r.isolation


class Boom:
    """Unpickling this runs a command: proof that nothing was unpickled if the canary is absent."""

    def __init__(self, canary: str) -> None:
        self.canary = canary

    def __reduce__(self):
        return (os.system, (f"touch {self.canary}",))


def test_training_progress_is_reported_as_plain_short_text(executor, station, monkeypatch):
    """What a harness writes to STATION_PROGRESS reaches the status displays, cleaned and capped; a
    link planted in its place is not followed. The executor looks every 0.2 s here (POLL_S, 1 s in a
    station): each state lasts seven looks."""
    from station.executors import local

    monkeypatch.setattr(local, "POLL_S", 0.2)
    seen: list[tuple[str, str]] = []
    executor.on_progress = lambda label, text: seen.append((label, text))
    try:
        r = run(executor, station, """
            import os, time
            def main():
                path = os.environ["STATION_PROGRESS"]
                for text in ["epoch 1/3", "epoch 2/3\\x1b]52;c;evil\\x07" + "x" * 500]:
                    open(path + ".new", "w").write(text)
                    os.replace(path + ".new", path)
                    time.sleep(1.5)
                os.remove(path)
                os.symlink("/etc/passwd", path)
                time.sleep(1.5)
                return 1
        """, timeout_s=30, label="eval-7-v1-train0")
    finally:
        executor.on_progress = None
    assert r.status == "ok", r
    texts = [text for label, text in seen]
    assert all(label == "eval-7-v1-train0" for label, _ in seen)
    assert texts[0] == "epoch 1/3"
    assert texts[1].startswith("epoch 2/3]52;c;evil") and len(texts[1]) <= 120 and "\x1b" not in texts[1]
    assert not any("root:" in t for t in texts)


def test_the_host_root_is_not_reachable_through_the_sandbox_s_first_process(executor, station):
    """PID 1 (the trusted init) pivoted away from the host too, and the code may not look through it."""
    r = run(executor, station, """
        import os
        def main():
            out = {}
            for path in ["/proc/1/root", "/proc/1/root/etc/shadow", "/proc/1/cwd", "/proc/1/fd"]:
                try:
                    out[path] = sorted(os.listdir(path)) if os.path.isdir(path) else open(path).read()
                except OSError as err:
                    out[path] = type(err).__name__
            try:
                os.chroot("/tmp")
                out["chroot"] = "done"
            except OSError as err:
                out["chroot"] = type(err).__name__
            return out
    """, timeout_s=30)
    assert r.status == "ok", r
    assert set(r.value.values()) == {"PermissionError"}, r.value
