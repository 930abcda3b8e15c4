"""Evaluations when something goes wrong, seen as a user sees it from `station run` and `station status`:
Ctrl-C while the tick waits on a long run stops at once and the run starts again on resume; a sandbox
that cannot be set up pauses the station with the reason instead of failing the agent's evaluation.

The station runs as a real `station run` subprocess with real sandboxed runs (and a real local Ray
instance for the Ray executor). Times asserted are generous bounds on what must take seconds where
it used to take the length of the run (10 minutes here), not measurements.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import read, sandboxes_alive, slow_once_config

ROOT = Path(__file__).resolve().parents[1]


def station(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "station.apps.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def wait_for(what: str, check, proc: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the station exited before {what}: {proc.stderr.read()}")
        time.sleep(0.1)
    raise AssertionError(f"never saw {what}")


@pytest.mark.parametrize("executor", [{"kind": "local"}, {"kind": "ray", "ray_num_cpus": 1}], ids=["local", "ray"])
def test_ctrl_c_while_the_tick_waits_stops_at_once_and_the_run_starts_again_on_resume(
        tmp_path: Path, executor: dict) -> None:
    config, directory = slow_once_config(tmp_path, executor), tmp_path / "st"
    run = subprocess.Popen([sys.executable, "-m", "station.apps.cli", "run", str(config), "--dir", str(directory),
                            "--until-tick", "5"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("the run start", lambda: (directory / "files/research/storage/shared/started-once").exists(), run)
        # the turn of tick 1 is committed, so the tick end is what waits on the evaluation
        wait_for("the tick wait", lambda: read(directory, "SELECT COUNT(*) FROM turns WHERE tick=1")[0][0] == 1, run)
        time.sleep(1.0)
        began = time.monotonic()
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
        took = time.monotonic() - began
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert took < 30, f"stopping took {took:.1f} s"
    assert "evaluation #1 is running" in out or "1 evaluation(s) not delivered yet" in out, out
    assert "again" in out
    assert sandboxes_alive("slow-once") == []
    shown = json.loads(station("status", str(directory), "--json").stdout)
    assert shown["state"] == "stopped"
    assert shown["counts"]["submissions"]["running"] == 0 and shown["counts"]["submissions"]["queued"] == 1

    resumed = station("run", "--dir", str(directory), "--until-tick", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert read(directory, "SELECT id, status, score FROM evaluations") == [(1, "finished", 0.5)]
    messages = [m[0] for m in read(directory, "SELECT text FROM messages WHERE kind='evaluation'")]
    assert len(messages) == 1 and "Evaluation #1 has a result" in messages[0]


def test_a_sandbox_that_cannot_be_set_up_pauses_the_station_and_charges_nobody(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    config, directory = slow_once_config(tmp_path, {"kind": "local", "scratch_dir": str(scratch)}), tmp_path / "st"
    created = station("init", str(config), "--dir", str(directory))
    assert created.returncode == 0, created.stderr
    storage = directory / "files/research/storage/shared"
    storage.mkdir(parents=True, exist_ok=True)
    (storage / "started-once").touch()  # the run is quick here

    paused = station("run", "--dir", str(directory), "--until-tick", "4")  # its scratch_dir does not exist
    assert paused.returncode == 3, paused.stdout + paused.stderr
    assert "station paused" in paused.stderr and "Sandbox error" in paused.stderr
    assert "not of the agent's code" in paused.stderr
    shown = json.loads(station("status", str(directory), "--json").stdout)
    assert shown["state"] == "paused" and "evaluation #1 could not be run" in shown["pause_reason"]
    submissions = shown["counts"]["submissions"]
    assert (submissions["failed"], submissions["queued"], submissions["finished"]) == (0, 1, 0)
    assert read(directory, "SELECT COUNT(*) FROM messages WHERE kind='evaluation'") == [(0,)]

    scratch.mkdir()  # the operator fixes the machine and runs the station again
    resumed = station("run", "--dir", str(directory), "--until-tick", "4")
    assert resumed.returncode == 0, resumed.stderr
    assert read(directory, "SELECT id, status, score FROM evaluations") == [(1, "finished", 0.5)]
    assert "paused" not in station("status", str(directory)).stdout.split("\n")[1]


def test_the_status_line_names_the_evaluation_actually_running(tmp_path: Path) -> None:
    """The wait line names what runs now and what is queued behind it (it once named the wrong one)."""
    from rooms.research import states
    from station.core.store import Store

    config, directory = slow_once_config(tmp_path, {"kind": "local"}), tmp_path / "st"
    run = subprocess.Popen([sys.executable, "-m", "station.apps.cli", "run", str(config), "--dir", str(directory),
                            "--until-tick", "3"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("the run start", lambda: (directory / "files/research/storage/shared/started-once").exists(), run)
        wait_for("a running state", lambda: read(directory, "SELECT COUNT(*) FROM evaluation_runs "
                                                          "WHERE state='running'")[0][0] == 1, run)
        store = Store(directory)
        try:
            found = states.open_evaluations(store, live=True)
            line = states.summary(store, live=True)
            stopped = states.open_evaluations(store, live=False)
        finally:
            store.close()
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=60)
    assert [(e.id, e.state) for e in found] == [(1, "running")]
    assert re.fullmatch(r"evals: #1 running \d+s", line), line
    assert [(e.id, e.state) for e in stopped] == [(1, "queued")]  # no process: nothing runs
