"""Ray failing under the station, with a real Ray head started here and killed by PID (issue 17 §4).

- a Ray worker killed mid-run: the run goes again and is scored; killed every time: after
  1 + RETRIES attempts it is a system error, never the code's result;
- the head killed mid-run: a system error naming the address, and the process survives Ray's own
  "GCS gone for a while: end the process";
- an address nothing answers on: a system error at once, not a hang;
- a station on that cluster: pauses with the reason (exit 3), keeps the evaluation queued, pauses
  again at once while the head is down, and scores the evaluation once a head is back on the port.

Each head runs with a marker in its environment, which every process it starts inherits: those
are the processes killed, and none may be left behind. One head serves the tests that need a live
one (module_head), in an order where each kill is followed by a restart or is its last use (a
Ray start costs seconds of CPU). The executor runs in a subprocess (one
process joins one cluster only, and a Ray bug there must not take pytest down). Needs root and
unshare like tests/test_sandbox.py. Timeouts here are safety nets, not measurements.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import read, slow_once_config

from station.executors import LocalExecutor
from station.executors.ray_executor import RETRIES

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
MARK = "STATION_RAY_FAULTS_HEAD"
# Ray's GCS client ends a driver whose head is gone for gcs_rpc_server_reconnect_timeout_s (60 s by
# default). The killed-head driver starts with it set to SHORT_RECONNECT_S, which the executor must
# override as it overrides Ray's default, and stays alive past it: the same proof, a minute sooner.
# Without the override that driver ends 5 s after the kill, 2 s after its result (measured): it
# lingers LINGER_S after the result, four times that.
SHORT_RECONNECT_S, LINGER_S = 4, 8

if LocalExecutor().mode != "namespaces":
    pytest.skip("the sandbox needs root and unshare here", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check: Callable[[], object], seconds: float = 120, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process exited before {what}: {proc.communicate()}")
        time.sleep(0.1)
    raise AssertionError(f"never saw {what}")


class Head:
    """A Ray head on a fixed port; its processes are those whose environment holds its marker."""

    def __init__(self, port: int, env: dict[str, str]) -> None:
        self.port, self.address = port, f"127.0.0.1:{port}"
        self.tag = secrets.token_hex(8)
        self.driver_env = env  # for its drivers: without the marker, so that kill() spares them
        self.env = {**env, MARK: self.tag}
        self.temp = tempfile.mkdtemp(prefix="rf", dir="/tmp")  # short: Ray's socket paths have a limit

    def start(self) -> None:
        ports = [f"--{name}={free_port()}" for name in
                 ("dashboard-port", "dashboard-agent-listen-port")]
        # no autoscaler monitor (a fixed one-node cluster; the station never talks to it): 1.2 CPU-s a start
        started = subprocess.run([BIN / "ray", "start", "--head", f"--port={self.port}", "--num-cpus=2",
                                  "--disable-usage-stats", "--include-dashboard=false", "--include-log-monitor=false",
                                  "--no-monitor", f"--temp-dir={self.temp}",
                                  *ports], capture_output=True, text=True, env=self.env, timeout=180)
        assert started.returncode == 0, started.stdout + started.stderr

    def processes(self) -> dict[int, str]:
        """pid -> command line of every live process this head started (workers included)."""
        found = {}
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and f"{MARK}={self.tag}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                pass  # gone meanwhile
        return found

    def worker_running(self, label: str) -> int | None:
        """The pid of the Ray worker running the run labelled `label` (Ray titles it "ray::<label>")."""
        return next((pid for pid, cmd in self.processes().items() if cmd.strip() == f"ray::{label}"), None)

    def kill(self) -> None:
        for _ in range(50):  # a raylet may still be starting a worker: until none is left
            alive = self.processes()
            if not alive:
                return
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"Ray processes left behind: {self.processes()}")

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.temp, ignore_errors=True)


def token_env() -> dict[str, str]:
    """Ray >= 2.5x clusters want a token; a driver given an explicit address needs the mode said."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32)}


@pytest.fixture
def ray_env() -> dict[str, str]:
    return token_env()


@pytest.fixture(scope="module")
def module_head():
    """One head for the tests that need a live head (a killed worker, a station that loses its cluster and
    gets it back, a killed head), which end it themselves if at all: two Ray starts less. Started when
    first asked for; see live_head."""
    h = Head(free_port(), token_env())
    yield h
    h.remove()
    assert h.processes() == {}


@pytest.fixture
def live_head(module_head: Head) -> Head:
    """The module's head, (re)started if it is not running: a test before may have killed it."""
    if not module_head.processes():
        module_head.start()
    return module_head


# The submission counts its attempts in a writable mount; the first `sleepy` attempts sleep (to be killed).
CODE = """import os, time
def main():
    n = len(os.listdir("storage/shared")) + 1
    open(f"storage/shared/attempt-{n}", "w").close()
    if n <= SLEEPY:
        time.sleep(600)
    return n
"""
# One executor in one process runs each (label, folder, sleepy) given at once, each from its own
# thread as the station's evaluations do, and prints "RESULT <label> <json>" for each.
DRIVER = """
import json, sys, threading, time
from pathlib import Path
from station.core.config import ExecutorConfig
from station.executors import Mount, RunSpec
from station.executors.ray_executor import RayExecutor
address, runs, linger = json.loads(sys.argv[1])
ex = RayExecutor(ExecutorConfig(kind="ray", ray_address=address))

def run(label, folder, sleepy):
    spec = RunSpec(code=%r.replace("SLEEPY", str(sleepy)), timeout_s=300, label=label,
                   mounts=[Mount(Path(folder), "storage/shared", writable=True)])
    r = ex.run(spec)
    print("RESULT", label, json.dumps({"status": r.status, "value": r.value, "error": r.error}), flush=True)

threads = [threading.Thread(target=run, args=tuple(each)) for each in runs]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
time.sleep(linger)  # Ray still initialised here
ex.close()
print("closed", flush=True)
""" % CODE


def driver(env: dict[str, str], address: str, runs: list[tuple[str, Path, int]], linger: float = 0):
    """A driver process running `runs` (label, folder it counts its attempts in, attempts that sleep) at once."""
    for _, folder, _ in runs:
        folder.mkdir(mode=0o777)
        folder.chmod(0o777)  # the sandbox's uid writes there
    plain = [[label, str(folder), sleepy] for label, folder, sleepy in runs]
    return subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps([address, plain, linger])],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def outcomes(proc: subprocess.Popen, seconds: float = 300) -> tuple[dict[str, dict], bool]:
    """({label: its result}, whether the driver closed its executor and ended cleanly)."""
    out, err = proc.communicate(timeout=seconds)
    assert proc.returncode == 0, f"the driver died ({proc.returncode}): {err[-3000:]}"
    lines = out.strip().splitlines()  # Ray prints notes of its own there too
    found = dict(line[7:].split(" ", 1) for line in lines if line.startswith("RESULT "))
    return {label: json.loads(text) for label, text in found.items()}, "closed" in lines


def outcome(proc: subprocess.Popen, seconds: float = 300) -> tuple[dict, bool]:
    """The result of a driver's one run, and whether it closed cleanly."""
    results, closed = outcomes(proc, seconds)
    (result,) = results.values()
    return result, closed


def kill_worker(h: Head, label: str, folder: Path, attempt: int, proc: subprocess.Popen) -> None:
    wait_for(f"attempt {attempt}", lambda: (folder / f"attempt-{attempt}").exists(), proc=proc)
    os.kill(wait_for(f"the worker of attempt {attempt}", lambda: h.worker_running(label), proc=proc), signal.SIGKILL)


def test_a_killed_ray_worker_is_retried_and_the_run_scored(tmp_path, live_head):
    """Two runs side by side in one driver (the head has two CPUs): one whose worker is killed once,
    one whose worker is killed at every attempt."""
    h = live_head
    both = driver(h.driver_env, h.address, [("faults-once", tmp_path / "once", 1),
                                            ("faults-always", tmp_path / "always", 99)])
    kill_worker(h, "faults-once", tmp_path / "once", 1, both)
    for attempt in range(1, RETRIES + 2):
        kill_worker(h, "faults-always", tmp_path / "always", attempt, both)
    results, closed = outcomes(both)
    assert results["faults-once"] == {"status": "ok", "value": 2, "error": None} and closed

    result = results["faults-always"]
    assert result["status"] == "system_error" and f"failed on Ray's side {RETRIES + 1} times" in result["error"]
    assert "WorkerCrashedError" in result["error"]
    assert sorted(p.name for p in (tmp_path / "always").iterdir()) == [f"attempt-{n}" for n in range(1, RETRIES + 2)]
    assert sorted(p.name for p in (tmp_path / "once").iterdir()) == ["attempt-1", "attempt-2"]


def test_an_address_nothing_answers_on_is_a_system_error_not_a_hang(tmp_path, ray_env):
    address = f"127.0.0.1:{free_port()}"
    run = driver(ray_env, address, [("faults-nothing", tmp_path / "nothing", 0)])
    result, closed = outcome(run, seconds=120)
    assert result["status"] == "system_error" and result["error"].startswith(f"Ray cluster at {address} unreachable")
    assert closed


def test_a_trained_task_on_a_ray_cluster_out_of_reach_is_a_system_error(tmp_path_factory) -> None:
    """A JAX task asks the executor for its GPUs before its check run (to know whether the trials can
    share the check's compilations): a cluster out of reach still ends as the check's system error."""
    from conftest import shared_task_data

    from evaluators.base import create_task
    from station.core.config import ExecutorConfig
    from station.executors import create_executor

    address = f"127.0.0.1:{free_port()}"
    with shared_task_data(tmp_path_factory, "forecast"):
        task = create_task("forecasting", {"size": "small", "trials": 2, "max_epochs": 1})
        executor = create_executor(ExecutorConfig(kind="ray", ray_address=address), hide=task.private_paths())
        try:
            result = task.execute(executor, task.baselines()[0].code, mounts=[], label="faults-jax")
        finally:
            executor.close()
    assert result.status == "system_error" and result.error.startswith(f"Ray cluster at {address} unreachable")


# -- the station --------------------------------------------------------------------------------------
def test_a_station_pauses_when_its_cluster_is_lost_and_scores_the_evaluation_when_it_is_back(
        tmp_path, live_head):
    h = live_head  # killed here and started again on its port: the killed-head test after it takes it
    directory, ray_env = tmp_path / "st", live_head.driver_env

    def station(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "station.apps.cli", *args], cwd=ROOT, env=ray_env,
                              capture_output=True, text=True, timeout=300)

    def paused_with_the_reason(done: subprocess.CompletedProcess) -> None:
        assert done.returncode == 3, done.stdout + done.stderr
        assert "station paused" in done.stderr and f"Ray cluster at {h.address} unreachable" in done.stderr
        shown = json.loads(station("status", str(directory), "--json").stdout)
        assert shown["state"] == "paused" and f"Ray cluster at {h.address} unreachable" in shown["pause_reason"]
        submissions = shown["counts"]["submissions"]
        assert (submissions["queued"], submissions["failed"], submissions["finished"]) == (1, 0, 0)
        assert read(directory, "SELECT COUNT(*) FROM messages WHERE kind='evaluation'") == [(0,)]

    run = subprocess.Popen([sys.executable, "-m", "station.apps.cli", "run", str(slow_once_config(tmp_path, {"kind": "ray", "ray_address": h.address})),
                            "--dir", str(directory), "--until-tick", "4"], cwd=ROOT, env=ray_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("the run start", lambda: (directory / "files/research/storage/shared/started-once").exists(),
                 seconds=240, proc=run)
        h.kill()
        out, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    paused_with_the_reason(subprocess.CompletedProcess(run.args, run.returncode, out, err))

    paused_with_the_reason(station("run", "--dir", str(directory), "--until-tick", "4"))  # the head is still down

    h.start()  # the operator brings the head back, on the same port
    resumed = station("run", "--dir", str(directory), "--until-tick", "4")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert read(directory, "SELECT id, status, score FROM evaluations") == [(1, "finished", 0.5)]
    messages = [m[0] for m in read(directory, "SELECT text FROM messages WHERE kind='evaluation'")]
    assert len(messages) == 1 and "Evaluation #1 has a result" in messages[0]


# After the station's test: it ends the module's head for good (a test after it would start it again).
def test_a_killed_head_is_a_system_error_naming_it_and_the_process_survives(tmp_path, live_head):
    h = live_head  # killed here: a later test that wants it starts it again
    short = {**h.driver_env, "RAY_gcs_rpc_server_reconnect_timeout_s": str(SHORT_RECONNECT_S)}
    run = driver(short, h.address, [("faults-head", tmp_path / "head", 1)], linger=LINGER_S)
    wait_for("the run start", lambda: (tmp_path / "head" / "attempt-1").exists(), proc=run)
    h.kill()
    result, closed = outcome(run)
    assert result["status"] == "system_error", result
    assert result["error"].startswith(f"Ray cluster at {h.address} unreachable: "), result
    assert closed  # alive LINGER_S later with Ray still initialised, and it closed cleanly
