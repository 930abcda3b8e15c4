"""`station multistart --on ray`: the branches as Ray tasks on the cluster the config names, stopped
cleanly by a Ctrl-C of the multistart, and resumed to the results a local multistart gives (each
branch at its last tick with its own branch seed, no turn run twice). One Ray head (`ray start`,
test_ray_faults.Head) serves the interrupted multistart and the resumed one, each a driver of it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import yaml
from test_ray_faults import Head, free_port, token_env

from station.apps.multistart import LEDGER
from station.core.run_lock import is_running

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo.yaml"


def read(directory: Path, query: str) -> list[tuple]:
    try:
        with sqlite3.connect(f"file:{directory / 'station.db'}?mode=ro", uri=True) as conn:
            return conn.execute(query).fetchall()
    except sqlite3.Error:  # not forked yet
        return []


def test_multistart_on_ray_stops_on_ctrl_c_and_resumes(tmp_path: Path) -> None:
    env = token_env()
    head = Head(free_port(), env)
    head.start()
    try:
        config = yaml.safe_load(DEMO.read_text())
        config["research"]["executor"]["ray_address"] = head.address  # its evaluations stay local
        (tmp_path / "ray.yaml").write_text(yaml.safe_dump(config))
        for attempt in range(3):
            # Ctrl-C (to the terminal's process group: the multistart alone; the cluster's workers are not in
            # it) once a branch has committed a turn on its node. Its two ticks take under a second: on a
            # machine so loaded that this test did not look before both ended, it tries again in a new folder.
            out = tmp_path / f"ms{attempt}"
            branches = [out / "branches" / n for n in ("1", "2")]
            command = [sys.executable, "-m", "station.apps.cli", "multistart", str(tmp_path / "ray.yaml")]
            command += ["--branches", "2", "--ticks", "2", "--parallel", "2", "--on", "ray", "--out", str(out)]
            first = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            while first.poll() is None and not any(read(b, "SELECT 1 FROM turns LIMIT 1") for b in branches):
                time.sleep(0.02)
            with contextlib.suppress(ProcessLookupError):  # ended already: the next attempt
                os.killpg(first.pid, signal.SIGINT)
            _, stderr = first.communicate(timeout=120)
            if first.returncode != 0:
                break
        assert first.returncode == 1 and "interrupted; `station multistart` with the same arguments resumes" in stderr
        for branch in branches:  # each run stopped before its last tick, and the multistart waited for it
            assert not is_running(branch)
            assert read(branch, "SELECT value FROM meta WHERE key='tick'")[0][0] in ("1", "2")
        # one, at least, after it committed its turn in flight (another may not have begun, or been starting)
        # ("stopped; ..." after a turn, or "stopped while the tick waited for evaluation(s) [1]; ...")
        clean_stop = re.compile(r"^stopped[^;\n]*; the station is at tick", re.M)
        assert any(clean_stop.search((b.parent / f"{b.name}.log").read_text()) for b in branches)
        ledger = json.loads((out / LEDGER).read_text())
        assert ledger["on"] == "ray" and ledger["choice"] is None
        assert {b["state"] for b in ledger["branch"].values()} == {"running"}

        resumed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr
        replies = []
        for number, branch in enumerate(branches, 1):
            assert read(branch, "SELECT value FROM meta WHERE key='tick'") == [("3",)]
            assert read(branch, "SELECT value FROM meta WHERE key='branch_seed'") == [(str(number),)]
            assert read(branch, "SELECT tick, session FROM turns GROUP BY tick, session HAVING COUNT(*) > 1") == []
            replies.append(read(branch, "SELECT payload FROM inputs WHERE kind='reply' ORDER BY seq"))
        assert replies[0] and replies[0] != replies[1]
        ledger = json.loads((out / LEDGER).read_text())
        assert {b["state"] for b in ledger["branch"].values()} == {"done"} and ledger["choice"]["branch"] in (1, 2)
        assert not [cmd for cmd in head.processes().values() if "station.apps.cli" in cmd]  # no run left there
    finally:
        head.remove()


def test_a_node_that_does_not_see_the_branch_says_so_in_one_line(tmp_path: Path) -> None:
    """What a task answers on a node without the multistart's folder (no shared file system there):
    the multistart stops with it as its one-line error. No run is started, so no Ray is needed."""
    from station.apps.multistart_ray import _run_on_node

    missing = tmp_path / "ms" / "branches" / "1"
    said = _run_on_node(str(missing), str(tmp_path / "1.log"), str(tmp_path / "1.signal"), ["run"])
    assert isinstance(said, str) and "\n" not in said
    assert f"does not see the branch {missing}" in said and "shared file system" in said
    assert not (tmp_path / "1.log").exists()
