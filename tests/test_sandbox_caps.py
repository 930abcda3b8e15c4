"""The sandbox and the host: set-id bits and special files in persistent storage, nosuid/nodev
mounts, and the per-run caps (CPU time of the whole process tree, processes, scratch disk,
storage size and file count, returned bytes), with real subprocesses in the real sandbox.

Every cap is given in CPU seconds, bytes or files with a generous wall clock, so nothing here
depends on the machine's speed; each hostile run has an honest run started beside it, in
another thread and on the same shared storage, which must still return its value.
Needs root and unshare (the namespaces mode); elsewhere the module is skipped.
"""
from __future__ import annotations

import fcntl
import os
import re
import stat
import textwrap
import threading
from pathlib import Path

import pytest

from station.executors import LocalExecutor, Mount, RunSpec, local
from station.executors.disk import remove_tree, scan

HONEST = """
import os, time
def main():
    os.listdir("storage/shared")
    with open("storage/lineage/honest.txt", "w") as f:
        f.write("a small honest note")
    time.sleep(1.5)   # still running while the other run breaks its cap
    return sum(range(1000))
"""


@pytest.fixture(scope="module")
def executor(sandbox_executor):
    return sandbox_executor


@pytest.fixture
def storage(tmp_path):
    for area in ("shared", "hostile", "honest"):
        (tmp_path / area).mkdir()
    return tmp_path


def hostile(executor, storage: Path, code: str, **kw):
    """Run `code` (label "hostile") while an honest run shares its storage; check the honest one."""
    honest = {}
    mounts = [Mount(storage / "shared", "storage/shared", True), Mount(storage / "honest", "storage/lineage", True)]
    spec = RunSpec(code=HONEST, mounts=mounts, timeout_s=120, label="honest")
    thread = threading.Thread(target=lambda: honest.update(result=executor.run(spec)))
    thread.start()
    try:
        mounts = [Mount(storage / "shared", "storage/shared", True), Mount(storage / "hostile", "storage/lineage", True)]
        return executor.run(RunSpec(code=textwrap.dedent(code), mounts=mounts, label="hostile",
                                    timeout_s=kw.pop("timeout_s", 120), **kw))
    finally:
        thread.join()
        r = honest["result"]
        assert (r.status, r.value) == ("ok", 499500), r
        assert (storage / "honest" / "honest.txt").read_text() == "a small honest note"


# -- persistent storage and the host ----------------------------------------------------------------
def test_set_id_bits_are_cleared_and_special_files_removed(executor, storage):
    shared = storage / "shared"
    os.mkfifo(shared / "host_fifo")
    os.mknod(shared / "host_null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a device someone left there
    (shared / "host_suid").write_bytes(b"#!/bin/sh\n")
    os.chmod(shared / "host_suid", 0o4755)
    r = executor.run(RunSpec(code=textwrap.dedent("""
        import os, shutil, socket, stat
        def main():
            seen = {"before": sorted(os.listdir("storage/shared"))}
            shutil.copy("/bin/true", "storage/shared/suid_true")
            os.chmod("storage/shared/suid_true", 0o4755)
            os.makedirs("storage/shared/deep/er")
            open("storage/shared/deep/er/sgid", "w").close()
            os.chmod("storage/shared/deep/er/sgid", 0o2775)
            seen["modes"] = [oct(stat.S_IMODE(os.stat(p).st_mode))
                             for p in ("storage/shared/suid_true", "storage/shared/deep/er/sgid")]
            os.mkfifo("storage/shared/deep/fifo")
            socket.socket(socket.AF_UNIX).bind("storage/shared/sock")
            try:
                os.mknod("storage/shared/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                seen["mknod"] = "made"
            except OSError as err:
                seen["mknod"] = type(err).__name__
            seen["mounts"] = [[name for name, bit in (("nodev", os.ST_NODEV), ("nosuid", os.ST_NOSUID))
                               if os.statvfs(place).f_flag & bit] for place in ("storage/shared", ".")]
            return seen
    """), mounts=[Mount(shared, "storage/shared", True)], timeout_s=60))
    assert r.status == "ok", r
    assert r.value["before"] == ["host_suid"]  # the FIFO and the device were removed before the run
    assert r.value["modes"] == ["0o4755", "0o2775"]  # the code did set them...
    assert r.value["mknod"] == "PermissionError"  # no capabilities: no device nodes
    assert r.value["mounts"] == [["nodev", "nosuid"]] * 2  # the storage and the scratch dir (statvfs: /proc is closed)
    assert "nosuid-nodev" in r.isolation and "storage-tidy" in r.isolation
    # ...and none is left on the host; FIFOs and sockets are gone
    for name in ("suid_true", "deep/er/sgid", "host_suid"):
        assert (shared / name).stat().st_mode & (stat.S_ISUID | stat.S_ISGID) == 0, name
    assert os.access(shared / "suid_true", os.X_OK)  # only the set-id bits went
    assert sorted(p.name for p in shared.rglob("*")) == ["deep", "er", "host_suid", "sgid", "suid_true"]
    assert (shared / "deep").stat().st_mode & stat.S_ISGID  # directories keep their shared group


def test_deep_trees_are_tidied_counted_and_removed(executor, storage):
    """Thousands of nested directories (too deep for recursion) in the scratch dir and in the
    storage, with a set-id file, a FIFO and a link at the bottom."""
    r = executor.run(RunSpec(code=textwrap.dedent("""
        import os
        def main():
            for top in ["storage/lineage", "scratch"]:
                os.makedirs(top, exist_ok=True)
                fd = os.open(top, os.O_RDONLY)
                for _ in range(3000):
                    os.mkdir("d", dir_fd=fd)
                    fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
                    os.close(old)
                os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o755, dir_fd=fd))
                os.chmod("f", 0o6755, dir_fd=fd)
                os.mkfifo("p", dir_fd=fd)
                os.symlink("/etc/passwd", "link", dir_fd=fd)
    """), mounts=[Mount(storage / "hostile", "storage/lineage", True)], timeout_s=60, label="deep-tree"))
    assert r.status == "ok", r
    assert not list(executor.scratch_base.glob("station-deep-tree-*"))  # the run dir, deep scratch included, is gone
    bottom = os.open(storage / "hostile", os.O_RDONLY)
    for _ in range(3000):
        bottom, old = os.open("d", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=bottom), bottom
        os.close(old)
    assert sorted(os.listdir(bottom)) == ["f", "link"]  # the FIFO was removed
    assert stat.S_IMODE(os.stat("f", dir_fd=bottom).st_mode) == 0o775  # set-id cleared, group-writable
    os.close(bottom)
    assert scan(storage / "hostile").files == 3002  # 3000 dirs, the file and the link
    remove_tree(storage / "hostile")
    assert not (storage / "hostile").exists()


def test_sweep_removes_stale_run_dirs_whatever_is_left(tmp_path, monkeypatch):
    partly = tmp_path / "station-eval-3-v1-abcd1234"
    (partly / "work" / "storage").mkdir(parents=True)  # sandbox.json already deleted
    (partly / "work" / "junk").write_text("x")
    empty = tmp_path / "station-eval-4-v1-efgh5678"
    empty.mkdir()
    live = tmp_path / "station-eval-5-v1-ijkl9012"
    (live / "work").mkdir(parents=True)
    foreign = tmp_path / "station-sandbox-test-mnop3456"  # someone's station dir, not a run dir
    foreign.mkdir()
    (foreign / "station.db").write_text("data")
    lock = os.open(live, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    monkeypatch.setattr(local, "STALE_AFTER_S", 0)
    try:
        LocalExecutor(scratch_base=tmp_path)
    finally:
        os.close(lock)
    assert not partly.exists() and not empty.exists()
    assert live.exists() and (foreign / "station.db").exists()


# -- resource caps -----------------------------------------------------------------------------------
def test_cpu_cap_counts_the_whole_process_tree(executor, storage):
    """Five busy processes share a 2 CPU-second budget: each one alone stays far below its
    RLIMIT_CPU, the total does not."""
    r = hostile(executor, storage, """
        import os
        def main():
            for _ in range(4):
                if os.fork() == 0:
                    break
            while True:
                pass
    """, cpu_seconds=2)
    assert r.status == "error" and r.crashed, r
    assert re.fullmatch(r"CPU time limit exceeded: the run's processes used [\d.]+ CPU seconds together, "
                        r"the limit is 2", r.error), r.error


def test_process_cap(executor, storage):
    r = hostile(executor, storage, """
        import os, time
        def main():
            for _ in range(30):
                try:
                    if os.fork() == 0:
                        time.sleep(100)
                        os._exit(0)
                except OSError:
                    pass
            time.sleep(100)
    """, max_processes=8)
    assert (r.status, r.error) == ("error", "Process limit exceeded: the run had 9 processes and threads at once, "
                                            "the limit is 8"), r


@pytest.mark.parametrize("code, caps, message", [
    ("[open(f'big{i}', 'wb').write(bytes(1 << 20)) for i in range(12)]",
     {"max_scratch_mb": 4}, r"the scratch dir holds (at least )?[\d.]+ MB, the limit is 4 MB"),
    ("[open(f'f{i}', 'w').close() for i in range(500)]",
     {"max_files": 200}, r"the scratch dir holds (at least )?\d+ files, the limit is 200 files"),
], ids=["size", "files"])
def test_scratch_quota_is_watched_during_the_run(executor, storage, code, caps, message):
    r = hostile(executor, storage, f"""
        import time
        def main():
            {code}
            time.sleep(100)   # only the watch during the run can end this before the wall clock
    """, **caps)
    assert r.status == "error" and r.error.startswith("Scratch disk quota exceeded: "), r
    assert re.search(message, r.error), r.error


def test_storage_size_quota_is_watched_during_the_run(executor, storage):
    r = hostile(executor, storage, """
        import time
        def main():
            for i in range(8):
                open(f"storage/shared/big{i}", "wb").write(bytes(1 << 20))
            time.sleep(100)
    """, max_storage_mb=5)
    assert r.status == "error", r
    assert re.fullmatch(r"Storage quota exceeded: storage/shared holds (at least )?[\d.]+ MB, the limit is 5 MB; "
                        r"what this run wrote there is removed", r.error), r.error
    # what it wrote is gone (tests/test_redteam_storage_share.py); a later run that adds to the storage is not charged
    read = executor.run(RunSpec(code="import os\ndef main():\n    return len(os.listdir('storage/shared'))\n",
                                mounts=[Mount(storage / "shared", "storage/shared", True)], max_storage_mb=5))
    assert (read.status, read.value) == ("ok", 0), read
    add = executor.run(RunSpec(code="def main():\n    open('storage/shared/more', 'w').write('x')\n",
                               mounts=[Mount(storage / "shared", "storage/shared", True)], max_storage_mb=5))
    assert add.status == "ok", add


def test_storage_file_count_is_checked_at_the_end(executor, storage):
    r = hostile(executor, storage, """
        import os
        def main():
            os.mkdir("storage/shared/many")
            for i in range(300):
                open(f"storage/shared/many/{i}", "w").close()
            return "done"
    """, max_files=100)
    assert r.status == "error" and r.value is None, r
    assert re.fullmatch(r"Storage quota exceeded: storage/shared holds (at least )?\d+ files, the limit is 100 files; "
                        r"what this run wrote there is removed", r.error), r.error
    assert os.listdir(storage / "shared") == []  # the folder and its 300 files, all the run's, are gone


def test_returned_bytes_are_capped_before_loading(executor, storage, monkeypatch):
    loaded = []
    real = local.load_result
    monkeypatch.setattr(local, "load_result", lambda out, *a: loaded.append(out) or real(out, *a))
    r = hostile(executor, storage, """
        import numpy as np
        def main():
            return [np.ones(1 << 20), np.ones(1 << 20)]   # 16 MB of arrays
    """, max_result_mb=4)
    assert r.status == "error" and r.value is None, r
    assert re.fullmatch(r"Result too large: the run returned [\d.]+ MB, the limit is 4 MB", r.error), r.error
    assert loaded and not any("station-hostile-" in out for out in loaded)  # the honest one's was loaded
