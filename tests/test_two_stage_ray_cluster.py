"""Two-stage scoring on a Ray cluster of two nodes (issue 51 item 7): checkpoints, stop signals and
the scorer's inputs cross through Ray (station/executors/ray_exchange.py), not through a folder the
nodes share.

The head has no CPU, so every run (the check, each trainer, each scorer) and each trial's exchange
actor go to the worker node. That node is started in a mount namespace of its own, with its scratch
base (TMPDIR) on a private tmpfs: in the station's namespace the same path is an empty folder, so
the station's process cannot read what the runs write there, even by mistake. The forecasting
baseline (two trials, three epochs) then scores there as it scores on one node with the local
executor (the same evaluation as tests/test_forecasting_task.py's, computed once per test run).
The driver runs in a subprocess (one process joins one cluster only) and records, with an audit
hook, every path it opens, lists or changes under the worker's scratch base: none. Needs root,
unshare and tmpfs, like tests/test_ray_faults.py; timeouts are safety nets, not measurements.
"""

from __future__ import annotations

import importlib.util
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
from pathlib import Path

import pytest
from conftest import shared_baseline, shared_task_data

from station.executors import LocalExecutor

if importlib.util.find_spec("ray") is None:  # not importorskip: importing Ray costs every test worker ~1 CPU-s
    pytest.skip("needs ray", allow_module_level=True)
if LocalExecutor().mode != "namespaces" or not shutil.which("unshare"):
    pytest.skip("the sandbox and the worker node's private tmpfs need root and unshare here", allow_module_level=True)

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
MARK = "STATION_TWO_NODE_CLUSTER"
TINY = {"size": "small", "trials": 2, "trial_budget_s": 600, "max_epochs": 3, "patience": 2, "grace_s": 90}

DRIVER = r"""
import json, os, sys, tempfile
address, base = sys.argv[1], sys.argv[2]
touched = []

def audit(event, args):  # every path the station's process opens, lists or changes under the node's base
    if event in ("open", "os.listdir", "os.scandir", "os.mkdir", "os.chmod", "os.remove", "os.rename",
                 "os.rmdir", "shutil.rmtree", "os.chown", "os.symlink", "os.truncate", "os.utime"):
        for arg in args:
            if isinstance(arg, (str, bytes, os.PathLike)) and os.fsdecode(arg).startswith(base):
                touched.append([event, os.fsdecode(arg)])

sys.addaudithook(audit)
from evaluators.base import create_task
from station.core.config import ExecutorConfig
from station.executors import create_executor
from station.executors.ray_executor import RayExecutor

runs = []
plain_run = RayExecutor.run

def run(self, spec, placement=None):
    result = plain_run(self, spec, placement)
    runs.append({"label": spec.label, "placed": placement is not None, "status": result.status,
                 "mounts": {m.target: str(m.source) for m in spec.mounts}})
    return result

RayExecutor.run = run
task = create_task("forecasting", json.loads(sys.argv[3]))
task.dataset.ensure()
executor = create_executor(ExecutorConfig(kind="ray", ray_address=address), hide=task.private_paths())
try:
    result = task.execute(executor, task.baselines()[0].code, mounts=[], label="two-node")
finally:
    executor.close()
verdict = task.score(result) if result.status == "ok" else None
print(json.dumps({
    "status": result.status, "error": result.error, "stderr": result.stderr[-3000:],
    "score": verdict.score if verdict else None, "details": verdict.details if verdict else None,
    "trials": result.value["trials"] if isinstance(result.value, dict) and "trials" in result.value else None,
    "runs": runs, "touched": touched, "station_temp": tempfile.gettempdir(),
}))
"""

PLANT = "ln -s /etc/passwd checkpoint.npz; head -c 5000 /dev/zero > big; echo x > one; ln one hard; printf ok > fine"
PROBE = r"""
import json, subprocess, sys, tempfile, threading
from pathlib import Path
import ray
from station.executors.ray_exchange import SiteLost
from station.core.config import ExecutorConfig
from station.core.run_types import Mount, RunSpec
from station.executors import create_executor, runfiles
from station.executors.trial_folders import TRAIN, LocalFolders

address, plant = sys.argv[1], sys.argv[2]
CASES = [("checkpoint.npz", 1 << 20), ("big", 1000), ("hard", 1000), ("fine", 1000), ("absent", 1000)]


def takes(folders):
    found = {}
    for name, limit in CASES:
        try:
            found[name] = repr(folders.take(TRAIN, name, limit, "the checkpoint"))
        except runfiles.Refused as err:
            found[name] = f"Refused: {err}"
    return found


executor = create_executor(ExecutorConfig(kind="ray", ray_address=address))
try:
    with executor.trial_place("probe", 1.0, 0.0) as trial:
        train = trial.folders.path(TRAIN)
        spec = RunSpec(code="", mode="command", entry="cd checkpoints && " + plant, mounts=[Mount(train, "checkpoints", writable=True)],
                       timeout_s=60, label="probe-plant")
        planted = trial.run(spec)
        remote = takes(trial.folders)
    # Ray loses a trial's actor while its run waits: the station's next call is a SiteLost, and the
    # run ends with the placement instead of being run again into a placement that is gone
    with executor.trial_place("lost", 1.0, 0.0) as trial:
        spec = RunSpec(code="", mode="command", entry="touch checkpoints/started && sleep 600", timeout_s=900,
                       mounts=[Mount(trial.folders.path(TRAIN), "checkpoints", writable=True)], label="probe-wait")
        ended = {}
        waiting = threading.Thread(target=lambda: ended.update(result=trial.run(spec)))
        waiting.start()
        while not trial.folders.present(TRAIN, "started") and waiting.is_alive():  # a run that failed: shown below
            waiting.join(0.1)
        ray.kill(trial.folders._actor)
        try:
            trial.folders.take(TRAIN, "started", 10, "a file")
            lost = "no error"
        except SiteLost as err:
            lost = str(err)
    waiting.join(600)
    waited = ended["result"]
finally:
    executor.close()
here = LocalFolders(Path(tempfile.mkdtemp()) / "trial")
subprocess.run(["sh", "-c", plant], cwd=here.path(TRAIN), check=True, capture_output=True)
print(json.dumps({"planted": [planted.status, planted.error, planted.stderr], "node": str(train),
                  "remote": remote, "local": takes(here), "lost": lost,
                  "waited": [waited.status, waited.error, waited.duration_s]}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def marked(tag: str) -> list[int]:
    """The live processes this module's cluster started (their environment holds its marker)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"{MARK}={tag}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            pass  # gone meanwhile
    return found


def kill_marked(tag: str) -> None:
    for _ in range(50):  # a raylet may still be starting a worker: until none is left
        alive = marked(tag)
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def start(command: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def cluster():
    """(head address, the worker node's scratch base, the drivers' environment (TMPDIR: the
    station's scratch base, which the node sees empty), the marker of the cluster's processes)."""
    tag = secrets.token_hex(8)
    env = {**os.environ, MARK: tag, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    temps = [tempfile.mkdtemp(prefix=p, dir="/tmp") for p in ("tnh", "tnw", "tnb", "tns")]  # short: socket paths
    head_temp, worker_temp, base, station_temp = temps
    port = free_port()
    common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", "--include-log-monitor=false"]  # no driver reads logs
    try:
        start([str(BIN / "ray"), "start", "--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false",
               "--no-monitor", f"--temp-dir={head_temp}", f"--dashboard-agent-listen-port={free_port()}", *common], env)
        node = (f"mount -t tmpfs -o size=4g,mode=0755 station-node {base} && "
                f"mount -t tmpfs -o size=1m,mode=0755 station-hidden {station_temp} && exec {BIN / 'ray'} start "
                f"--address=127.0.0.1:{port} --num-cpus=2 --dashboard-agent-listen-port={free_port()} "
                + " ".join(common))
        start(["unshare", "--mount", "--propagation", "private", "sh", "-c", node],
              {**env, "TMPDIR": base, "RAY_TMPDIR": worker_temp})
        yield f"127.0.0.1:{port}", base, {**env, "TMPDIR": station_temp}, tag
    finally:
        kill_marked(tag)
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)


def node_view(tag: str, base: str, folder: str) -> list[str]:
    """What the worker node (its scratch base `base`) sees in `folder`: through its raylet's root,
    which is looked up in the raylet's mount namespace."""
    raylet = next(pid for pid in marked(tag) if b"raylet" in Path(f"/proc/{pid}/cmdline").read_bytes()
                  and b"TMPDIR=" + base.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
    return sorted(os.listdir(f"/proc/{raylet}/root{folder}"))


def test_two_stage_scoring_on_two_ray_nodes_scores_as_on_one(cluster, tmp_path_factory) -> None:
    address, base, env, tag = cluster
    from evaluators.base import create_task
    from station.core.config import ExecutorConfig
    from station.executors import create_executor

    with shared_task_data(tmp_path_factory, "forecast"):
        task = create_task("forecasting", TINY)
        local = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())

        def evaluate(code: str):  # as tests/test_forecasting_task.py evaluates: the same shared result
            result = create_task("forecasting", TINY).execute(local, code, mounts=[], label="test-forecast")
            return task, result, (task.score(result) if result.status == "ok" else None)

        began = time.monotonic()
        try:
            one_result, one = shared_baseline(tmp_path_factory, "forecasting", TINY, evaluate)
        finally:
            local.close()
        local_s, began = time.monotonic() - began, time.monotonic()
        driver = subprocess.run([sys.executable, "-c", DRIVER, address, base, json.dumps(TINY)], cwd=ROOT,
                                env={**env, **{k: v for k, v in os.environ.items() if k.startswith("STATION_")}},
                                capture_output=True, text=True, timeout=1200)
    assert driver.returncode == 0, driver.stderr[-4000:]
    two = json.loads(driver.stdout.strip().splitlines()[-1])
    assert two["status"] == "ok" and two["score"] is not None, two
    print(f"two nodes: {two['score']!r} in {time.monotonic() - began:.0f} s; one node: {one.score!r} in {local_s:.0f} s")
    assert one.success and two["score"] == pytest.approx(one.score, rel=1e-4, abs=1e-6), (two["details"], one.details)
    for mine, theirs in zip(two["trials"], one_result.value["trials"], strict=True):
        assert mine["station"]["stop"] == theirs["station"]["stop"] == "max-epochs"
        assert mine["station"]["checkpoints"] == theirs["station"]["checkpoints"] == TINY["max_epochs"]
        assert mine["station"]["best"]["mae"] == pytest.approx(theirs["station"]["best"]["mae"], rel=1e-4)

    # each trial's trainer and scorer ran in its placement, their exchange folders on the worker node
    trials = [r for r in two["runs"] if r["placed"]]
    assert sorted(r["label"].rsplit("-", 1)[-1] for r in trials) == ["score0", "score1", "train0", "train1"]
    for r in trials:
        node_paths = [p for target, p in r["mounts"].items() if target in ("checkpoints", "control", "inbox",
                                                                           "outbox", "scoring_data")]
        assert len(node_paths) == (2 if "train" in r["label"] else 3), r
        assert all(p.startswith(base + "/station-") for p in node_paths), r
    assert two["station_temp"] == env["TMPDIR"] != base  # the station's scratch base, hidden from the node
    assert node_view(tag, base, env["TMPDIR"]) == []
    assert two["touched"] == []  # the station's process opened nothing there...
    assert os.listdir(base) == []  # ...and could not have: in its namespace the folder is empty
    assert not [name for name in node_view(tag, base, base) if name.startswith("station-")]  # the node's folders removed


def test_what_a_run_plants_on_its_node_is_refused_there_and_a_lost_actor_ends_the_trial(cluster) -> None:
    """A run on the worker node plants a link, an oversized file and a hard link where the station
    takes checkpoints: the actor refuses each with the one line the station gives on its own host
    (runfiles.take), and the honest file crosses as bytes. Then Ray loses a trial's actor while
    its run waits: the station's next call fails with one line (a system error, SiteLost), and
    the run ends with the trial's placement (not run again into a placement that is gone, where
    Ray would keep it waiting until its limit)."""
    address, base, env, tag = cluster
    driver = subprocess.run([sys.executable, "-c", PROBE, address, PLANT], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert driver.returncode == 0, driver.stderr[-4000:]
    found = json.loads(driver.stdout.strip().splitlines()[-1])
    assert found["planted"][0] == "ok", found["planted"]
    assert found["node"].startswith(base + "/station-probe-")
    remote = found["remote"]
    assert remote == found["local"], found
    assert remote["checkpoint.npz"].startswith("Refused: the checkpoint is not a regular file (")
    assert remote["big"] == "Refused: the checkpoint holds 5,000 bytes, more than the 1,000 allowed"
    assert remote["hard"] == "Refused: the checkpoint is not a regular file of its own"
    assert remote["fine"] == "b'ok'" and remote["absent"] == "None"
    assert found["lost"].startswith("Ray error in trial lost's exchange: "), found["lost"]
    status, error, seconds = found["waited"]
    assert status == "system_error" and error.startswith("Ray error"), error
    assert seconds < 600  # ended with its placement, long before its own sleep or limit

