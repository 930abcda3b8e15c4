"""Red team: one run fills the shared storage for everyone (issue 51, item 4).

The attack: a run writes far past the storage limit before the watcher stops it (it polls every
few seconds). On the old code the data stayed, and every later run of every agent that wrote to
`shared/` failed with "Storage quota exceeded", charged to that agent: sequential runs share one
uid, so ownership did not tell who had filled it. Now the run that pushes the storage over its
limit (the total, or its owner's share) is the one charged, and what it wrote there is undone.

Also: hard links to another agent's file (entries that cost no bytes) are the linking run's;
a lineage's share holds across its runs and a file counts against its last writer; the ledger is
out of every run's reach; the research station names the lineage (rs.Charged), also for runs
through a two-stage trial's place. Sizes are a few megabytes (limits configured small) and every
wait is a budget of the run, never a measured duration. The sandbox tests need root and unshare
(the namespaces mode) and skip elsewhere; the accounts' own tests (at the end) run everywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest
import yaml
from helpers import act, read, reply, station_cli, yaml_block

from rooms.research import storage as rs
from rooms.research.worker import storage_mounts
from station.executors import Mount, RunSpec, shares

MB = 1 << 20

FILL = """
import time
def main():
    with open("storage/shared/ada.bin", "ab") as f:   # grows another agent's file in place...
        f.write(b"M" * (1 << 20))
    for i in range(8):                                # ...and adds far more than the limit
        with open(f"storage/shared/fill{i}.bin", "wb") as f:
            f.write(b"F" * (1 << 20))
    time.sleep(100)                                   # only the watcher ends this before the wall clock
"""

WRITE = """
def main():
    with open("storage/shared/{name}", "wb") as f:
        f.write(b"x" * {size})
    return "{name}"
"""

HONEST = """
import time
def main():
    with open("storage/shared/honest.txt", "w") as f:
        f.write("a small honest note")
    time.sleep(1.5)   # still running while the filler breaks its limit
    return sum(range(1000))
"""


@pytest.fixture(scope="module")
def executor(sandbox_executor):
    return sandbox_executor


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    """A station's storage root: shared/ and, beside it, the station's ledger folder."""
    (tmp_path / "shared").mkdir(mode=0o775)
    (tmp_path / ".shares").mkdir(mode=0o700)
    return tmp_path


def run(executor, storage: Path, code: str, owner: str | None, share_mb: int | None = None, **kw):
    share = (owner, share_mb) if share_mb is not None else None
    spec = RunSpec(code=textwrap.dedent(code), mounts=[Mount(storage / "shared", "storage/shared", True)],
                   timeout_s=120, label=owner or "run", storage_share=share, **kw)
    return executor.run(spec)


def write(executor, storage, owner, name, size, share_mb=None, **kw):
    return run(executor, storage, WRITE.format(name=name, size=size), owner, share_mb, **kw)


def listing(storage: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted((storage / "shared").iterdir())}


def test_a_run_that_fills_shared_storage_is_charged_and_what_it_wrote_is_undone(executor, storage):
    first = write(executor, storage, "ada", "ada.bin", MB // 2, max_storage_mb=4)
    assert (first.status, first.value) == ("ok", "ada.bin"), first
    honest: dict = {}
    beside = threading.Thread(target=lambda: honest.update(r=run(executor, storage, HONEST, "hal", max_storage_mb=4)))
    beside.start()
    try:
        filler = run(executor, storage, FILL, "mallory", max_storage_mb=4)
    finally:
        beside.join()
    assert filler.status == "error", filler
    assert re.match(r"Storage quota exceeded: storage/shared holds (at least )?[\d.]+ MB, the limit is 4 MB", filler.error)
    # the honest run beside it scored as before, and kept its note
    assert (honest["r"].status, honest["r"].value) == ("ok", 499500), honest["r"]
    assert (storage / "shared" / "honest.txt").read_text() == "a small honest note"
    # the filler's files are gone, ada's file is cut back to what it held before, unchanged
    assert listing(storage) == {"ada.bin": MB // 2, "honest.txt": 19}
    assert (storage / "shared" / "ada.bin").read_bytes() == b"x" * (MB // 2)
    # the next agent's run writes to shared/ and is not charged
    after = write(executor, storage, "bob", "bob.bin", MB, max_storage_mb=4)
    assert (after.status, after.value) == ("ok", "bob.bin"), after


def test_each_owner_has_a_share_and_a_file_counts_against_its_last_writer(executor, storage):
    """Shares of 2 MB in an 8 MB storage: a run within its owner's share is unaffected; one that
    pushes its owner past the share fails and what it wrote is removed; another owner is not charged."""
    kw = {"share_mb": 2, "max_storage_mb": 8}
    assert write(executor, storage, "ada", "a.bin", 3 * MB // 2, **kw).status == "ok"
    over = write(executor, storage, "ada", "a2.bin", MB, **kw)
    assert over.status == "error", over
    assert over.error == (
        "Storage quota exceeded: your share of storage/shared is 2 MB and ada's files there come to 2.5 MB "
        "with this run's writes; what this run wrote there is removed"
    )
    assert listing(storage) == {"a.bin": 3 * MB // 2}
    bob = write(executor, storage, "bob", "b.bin", 3 * MB // 2, **kw)
    assert (bob.status, bob.value) == ("ok", "b.bin"), bob
    assert shares.held(storage / "shared") == {"ada": 3 * MB // 2, "bob": 3 * MB // 2}
    # bob rewrites ada's file: its bytes are bob's now, and ada's share is free again
    assert write(executor, storage, "bob", "a.bin", MB // 4, **kw).status == "ok"
    assert shares.held(storage / "shared") == {"bob": 3 * MB // 2 + MB // 4}
    again = write(executor, storage, "ada", "a3.bin", 3 * MB // 2, **kw)
    assert (again.status, again.value) == ("ok", "a3.bin"), again
    # the ledger is the station's: outside the storage dir, out of every run's reach
    assert json.loads((storage / ".shares" / "shared.json").read_text())["held"]["ada"] == 3 * MB // 2


def test_a_filler_past_its_share_is_stopped_while_it_runs(executor, storage):
    """The share is watched during the run, not only at its end: the filler sleeps for 100 s and
    is stopped by the watcher long before its 120 s wall clock."""
    honest: dict = {}
    beside = threading.Thread(
        target=lambda: honest.update(r=run(executor, storage, HONEST, "hal", share_mb=2, max_storage_mb=64)))
    beside.start()
    try:
        r = run(executor, storage, FILL.replace("ada.bin", "own.bin"), "mallory", share_mb=2, max_storage_mb=64)
    finally:
        beside.join()
    assert (honest["r"].status, honest["r"].value) == ("ok", 499500), honest["r"]
    assert r.status == "error", r
    assert re.fullmatch(
        r"Storage quota exceeded: your share of storage/shared is 2 MB and mallory's files there come to "
        r"(at least )?[\d.]+ MB with this run's writes; what this run wrote there is removed",
        r.error,
    ), r.error
    assert listing(storage) == {"honest.txt": 19}
    assert shares.held(storage / "shared") == {"hal": 19}


def test_a_ledger_a_run_could_reach_is_refused(executor, storage):
    """A run given the storage root would see (and could forge) the ledger: the station refuses to run it."""
    spec = RunSpec(code="def main():\n    return 1\n", storage_share=("ada", 2),
                   mounts=[Mount(storage / "shared", "storage/shared", True), Mount(storage, "everything")])
    r = executor.run(spec)
    assert r.status == "system_error", r
    assert re.fullmatch(r"Sandbox error: the shares ledger \S+/\.shares would be visible to the run through \S+",
                        r.error), r.error


def test_a_ledger_others_could_write_is_refused(executor, storage):
    (storage / ".shares").chmod(0o777)
    r = write(executor, storage, "ada", "a.bin", 10, share_mb=2)
    assert r.status == "system_error", r
    assert r.error.endswith("/.shares is not a folder of the station's own (mode 0700)"), r.error
    assert listing(storage) == {}  # refused before anything ran


def test_the_research_station_charges_each_lineage_through_its_own_layout(executor, tmp_path):
    """The worker's path: the room's layout keeps the ledger beside shared/, its mounts, and
    rs.Charged naming the lineage with the configured share of the task's storage limit."""
    mounts = storage_mounts(tmp_path, "Spiro", cross_lineage=False)
    spiro = rs.Charged(executor, rs.share_owner("Spiro", "Spiro I"), 0.5)
    assert spiro.name == "local" and spiro.mode == "namespaces"  # the rest is the executor's

    def put(who, name, size):
        return who.run(RunSpec(code=textwrap.dedent(WRITE.format(name=name, size=size)), mounts=mounts,
                               max_storage_mb=4, timeout_s=120))

    assert put(spiro, "s.bin", 3 * MB // 2).status == "ok"
    over = put(spiro, "s2.bin", MB)
    assert over.status == "error" and over.error.startswith(
        "Storage quota exceeded: your share of storage/shared is 2 MB and spiro's files there come to 2.5 MB"), over
    praxis = put(rs.Charged(executor, rs.share_owner("Praxis", "Praxis II"), 0.5), "p.bin", 3 * MB // 2)
    assert praxis.status == "ok", praxis
    shared = rs.storage_root(tmp_path) / rs.SHARED
    assert sorted(p.name for p in shared.iterdir()) == ["p.bin", "s.bin"]
    assert shares.held(shared) == {"spiro": 3 * MB // 2, "praxis": 3 * MB // 2}



class PlacedExecutor:
    """The local executor with a two-stage trial place, as Ray's executor has one (trial_place):
    a trial's runs go through the place's own run, not the executor's."""

    def __init__(self, executor):
        self.executor = executor

    @contextlib.contextmanager
    def trial_place(self, label, num_cpus, num_gpus):
        yield types.SimpleNamespace(run=self.executor.run, folders=f"folders of {label}")


def test_runs_through_a_trial_place_are_charged_too(executor, tmp_path):
    mounts = storage_mounts(tmp_path, "Spiro", cross_lineage=False)
    spiro = rs.Charged(PlacedExecutor(executor), "spiro", 0.5)
    with spiro.trial_place("eval-1-trial0", 1.0, 0.0) as place:
        assert place.folders == "folders of eval-1-trial0"
        r = place.run(RunSpec(code=textwrap.dedent(WRITE.format(name="t.bin", size=3 * MB)), mounts=mounts,
                              max_storage_mb=4, timeout_s=120))
    assert r.status == "error" and r.error.startswith("Storage quota exceeded: your share of storage/shared is 2 MB"), r
    assert list((rs.storage_root(tmp_path) / rs.SHARED).iterdir()) == []
    assert not hasattr(rs.Charged(executor, "spiro", 0.5), "trial_place")  # the local executor has none


FILLING_PACKING = """
def construct_packing():
    with open("storage/shared/big.bin", "wb") as f:
        f.write(b"B" * (2 << 20))
    return [[0.25, 0.5], [0.75, 0.5]], [0.25, 0.25]
"""


def test_a_station_charges_the_filling_evaluation_to_its_lineage(executor, tmp_path):
    """End to end: `station run` with research.storage_share 0.001 (1 MB of circle packing's 1,024):
    the agent's evaluation that writes 2 MB to shared/ fails with its share named, and the file is gone."""
    body = "\n".join(f"{k}: {json.dumps(v)}" for k, v in {
        "title": "Fills", "tags": "storage", "abstract": "Writes 2 MB to shared storage.",
        "content": FILLING_PACKING}.items())
    replay = tmp_path / "agent.jsonl"
    replies = [reply(act("goto research"), act("submit 1"), yaml_block(body))] + ["Waiting."] * 20
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in replies))
    settings = {"name": "shares", "seed": 5, "engine": {"backup_every_ticks": 0},
                "agents": [{"count": 1, "kind": "recursive", "lineage": "Spiro",
                            "model": {"provider": "replay", "name": "replay-shares", "replay_file": str(replay)}}],
                "lifecycle": {"maturity_ticks": 0}, "notifications": {"tips_every_ticks": 0},
                "research": {"tasks": [{"evaluator": "circle_packing", "params": {"n": 2}, "baselines": False}],
                             "executor": {"max_parallel": 1}, "wait_ticks": 1, "storage_share": 0.001}}
    config, directory = tmp_path / "shares.yaml", tmp_path / "st"
    config.write_text(yaml.safe_dump(settings))
    made = station_cli("init", str(config), "--dir", str(directory), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    ran = station_cli("run", "--dir", str(directory), "--until-tick", "3", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    [(status, error)] = read(directory, "SELECT status, error FROM evaluations")
    assert status == "failed" and error.startswith(
        "Storage quota exceeded: your share of storage/shared is 1 MB and spiro's files there come to 2 MB"), error
    storage = directory / "files" / "research" / "storage"
    assert list((storage / "shared").iterdir()) == []
    assert json.loads((storage / ".shares" / "shared.json").read_text()) == {"held": {}, "files": {}}


# -- the accounts themselves, without a sandbox (these run everywhere) --------------------------------
def begin(storage: Path, uid: int | None, owner: str | None = None) -> shares.Account:
    """An account made as the executor makes one before a run; then the run's clock starts."""
    ledger = shares.Ledger.beside(storage / "shared", []) if owner else None
    account = shares.Account(storage / "shared", "storage/shared", ledger, uid, None)
    account.since = time.time()
    time.sleep(0.05)  # past the file system's timestamp granularity: what the "run" writes next is later
    return account


def test_undo_removes_only_what_the_run_made_and_cuts_back_what_it_grew(storage):
    shared = storage / "shared"
    (shared / "old.txt").write_bytes(b"o" * 100)  # made by an earlier run of the same uid
    (shared / "keep").mkdir()
    account = begin(storage, uid=os.getuid())
    with open(shared / "old.txt", "ab") as f:
        f.write(b"+" * 500)
    (shared / "new").mkdir()
    (shared / "new" / "big.bin").write_bytes(b"n" * 2000)
    (shared / "keep" / "link").symlink_to("/etc/passwd")
    why = account.settle(shares.Limits(1000, 100, 1))
    assert why == "Storage quota exceeded: storage/shared holds 0.1 MB, the limit is 1 MB; what this run wrote there is removed"
    assert sorted(str(p.relative_to(shared)) for p in shared.rglob("*")) == ["keep", "old.txt"]
    assert (shared / "old.txt").read_bytes() == b"o" * 100


def test_a_run_within_its_limits_keeps_what_it_wrote_and_the_ledger_names_its_owner(storage):
    shared = storage / "shared"
    account = begin(storage, uid=os.getuid(), owner="ada")
    (shared / "a.bin").write_bytes(b"a" * 300)
    os.link(shared / "a.bin", shared / "a-again.bin")  # one file, two names: its bytes count once
    assert account.settle(shares.Limits(1000, 100, 1, ("ada", 400))) is None
    assert shares.held(shared) == {"ada": 300}
    bob = begin(storage, uid=os.getuid(), owner="bob")
    (shared / "b.bin").write_bytes(b"b" * 200)
    with open(shared / "a.bin", "ab") as f:  # bob grows ada's file: all of it is bob's now (its last writer)
        f.write(b"+" * 100)
    assert bob.settle(shares.Limits(1000, 100, 1, ("bob", 400))) == (
        "Storage quota exceeded: your share of storage/shared is 0.1 MB and bob's files there come to 0.1 MB "
        "with this run's writes; what this run wrote there is removed")
    assert sorted(p.name for p in shared.iterdir()) == ["a-again.bin", "a.bin"]
    assert (shared / "a.bin").stat().st_size == 300  # cut back; still ada's
    assert shares.held(shared) == {"ada": 300}


def test_another_runs_new_files_are_not_this_runs(storage):
    """With a uid per run, a file another live run made is neither charged to this run nor
    removed with its writes; counted as that run's until its end records it."""
    shared = storage / "shared"
    account = begin(storage, uid=os.getuid() + 1)  # this run's uid; the test's own files are another run's
    (shared / "theirs.bin").write_bytes(b"t" * 5000)
    assert account.settle(shares.Limits(1000, 100, 1)) is None
    assert (shared / "theirs.bin").stat().st_size == 5000


def test_names_given_to_another_agents_file_are_the_runs_entries(storage):
    """Hard links to a file that was there cost no bytes but fill the entry limit: they are the
    linking run's entries, removed with its writes; the file keeps its own name and content."""
    shared = storage / "shared"
    (shared / "ada.txt").write_text("ada's notes")
    account = begin(storage, uid=os.getuid() + 1)  # the file is not this run's uid's
    for i in range(50):
        os.link(shared / "ada.txt", shared / f"link{i}")
    assert account.settle(shares.Limits(1 << 20, 20, 1)) == (
        "Storage quota exceeded: storage/shared holds 51 files, the limit is 20 files; what this run wrote there is removed")
    assert [p.name for p in shared.iterdir()] == ["ada.txt"]
    assert (shared / "ada.txt").read_text() == "ada's notes" and (shared / "ada.txt").stat().st_nlink == 1


def test_a_run_that_floods_shared_storage_with_names_is_charged_in_the_sandbox(executor, storage):
    """The same through the sandbox: 300 hard links to another agent's file, against 100 entries.
    On the old code the linking run was not charged (the file was not its uid's), the names stayed
    and the next agent's run was charged for 302 files."""
    (storage / "shared" / "ada.txt").write_text("ada's notes")
    linker = run(executor, storage, """
        import os
        def main():
            for i in range(300):
                os.link("storage/shared/ada.txt", f"storage/shared/link{i}")
            return "linked"
    """, "mallory", max_files=100)
    assert linker.status == "error" and linker.error.startswith(
        "Storage quota exceeded: storage/shared holds 301 files, the limit is 100 files"), linker
    assert listing(storage) == {"ada.txt": 11}
    after = write(executor, storage, "bob", "bob.bin", 10, max_files=100)
    assert (after.status, after.value) == ("ok", "bob.bin"), after
