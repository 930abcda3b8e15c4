"""RayExecutor with real Ray: the same sandbox on a Ray worker, timeouts, cancellation, and
joining an existing cluster.

The module starts a Ray head (`ray start --head`) and kills that head's processes by PID
(test_ray_faults.Head): `ray stop --force` would wait 7 s in stages, and stop every Ray process on
this host. While that cluster is up, the module's executor (no ray_address) starts the local
instance the other tests use, from a thread that ends at once: one Ray start serves both the test
that it is a new instance and the tests that run on it. Needs root and unshare like
tests/test_sandbox.py.
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from helpers import sandbox_processes
from test_ray_faults import Head, free_port

from station.core.config import ExecutorConfig
from station.executors import LocalExecutor, RunSpec, create_executor, ray_executor
from station.executors.local import RUN_SCRATCH

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]

if LocalExecutor().mode != "namespaces":
    pytest.skip("the sandbox needs root and unshare here", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster():
    """A Ray head of two CPUs on this host (Ray 2.5x+ clusters want a token; a driver given an explicit
    address needs the mode said out loud): its environment for drivers, and the head."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    head = Head(free_port(), env)
    try:
        head.start()
        yield env, head
    finally:
        head.remove()


@pytest.fixture(scope="module")
def started(cluster):
    """The module's executor, given no address, and what its first run saw: (executor, that run's
    result, the GCS address and CPUs of the instance it started). It starts Ray while `cluster` is up
    (Ray alone would join that), in the cluster's environment (its token too), from a thread that ends
    at once, as an evaluation's thread does."""
    import ray

    env, _ = cluster
    with pytest.MonkeyPatch.context() as patch:  # undone after close(), which puts back what it found
        for key in ("RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
            patch.setenv(key, env[key])
        ex = create_executor(ExecutorConfig(kind="ray", ray_num_cpus=2))
        try:
            first: list = []
            spec = RunSpec(code="def main():\n    return 7\n", timeout_s=30)
            starter = threading.Thread(target=lambda: first.append(
                (ex.run(spec), ray.get_runtime_context().gcs_address, ray.cluster_resources().get("CPU"))))
            starter.start()
            starter.join()
            assert first, "the first run raised"
            yield (ex, *first[0])
        finally:
            ex.close()


@pytest.fixture(scope="module")
def ray_ex(started):
    return started[0]


def test_ray_address_joins_an_existing_cluster(cluster, started):
    """The driver runs in a subprocess: one process can be connected to one Ray cluster only."""
    env, head = cluster
    port = head.port
    script = f"""
import json, ray
from station.core.config import ExecutorConfig
from station.executors import RunSpec, create_executor
ex = create_executor(ExecutorConfig(kind="ray", ray_address="127.0.0.1:{port}"))
r = ex.run(RunSpec(code="def main():\\n    return 42\\n", timeout_s=20))
context = ray.get_runtime_context()
print(json.dumps({{"status": r.status, "value": r.value, "gcs": context.gcs_address,
                   "cpus": ray.cluster_resources().get("CPU")}}))
ex.close()
"""
    joined = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert joined.returncode == 0, joined.stderr
    seen = json.loads(joined.stdout.strip().splitlines()[-1])
    assert seen["status"] == "ok" and seen["value"] == 42
    assert seen["gcs"].endswith(f":{port}") and seen["cpus"] == 2.0
    # close() disconnected the driver; the cluster it joined is still up
    status = subprocess.run([BIN / "ray", "status", f"--address=127.0.0.1:{port}"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert status.returncode == 0, status.stderr
    # with that cluster up, the module's executor, given no address, started its own instance (Ray alone
    # would have joined it): another GCS, on loopback, with the two CPUs it asked for
    _, first, gcs, cpus = started
    assert first.status == "ok" and first.value == 7, first
    assert gcs.startswith("127.0.0.1:") and not gcs.endswith(f":{port}") and cpus == 2.0, (gcs, cpus)
    head.remove()  # not needed any more: the other tests use the module's own instance


def test_station_code_does_not_import_ray():
    check = ("import sys\nfrom station.core.config import ExecutorConfig\nfrom station.executors import create_executor\n"
             "create_executor(ExecutorConfig(kind='ray'))\nassert 'ray' not in sys.modules, 'ray was imported'\n")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_ray_outlives_the_thread_that_started_it(started):
    """Ray's processes die with the *thread* that called ray.init: evaluation threads end. The
    module's executor started Ray from a thread that ended at once (`started`)."""
    ray_ex, first = started[:2]
    results = [first]
    spec = RunSpec(code="def main():\n    return 7\n", timeout_s=30)
    time.sleep(1)  # a killed GCS would be noticed by now
    second = threading.Thread(target=lambda: results.append(ray_ex.run(spec)), daemon=True)
    second.start()
    second.join(30)
    assert [r.value for r in results] == [7, 7], results


def test_the_local_instance_runs_without_the_helpers_a_station_never_uses(ray_ex):
    """No autoscaler monitor (a local node keeps the CPUs it was given), no log monitor (no driver
    reads the workers' output) and no API server (no job submission, no state API): 2.3 CPU-seconds of
    every start. Its GCS and raylet run."""
    commands = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # not a process, or gone meanwhile
        if str(ray_ex._private) in command:  # the instance's session folder: its processes only
            commands.append(command)
    assert any("gcs_server" in c for c in commands) and any("raylet" in c for c in commands), commands
    unused = ("log_monitor.py", "autoscaler/_private/monitor.py", "dashboard/dashboard.py")
    assert [c for c in commands if any(name in c for name in unused)] == []


def test_eight_concurrent_runs_match_local(ray_ex):
    code = """
import numpy as np
def main():
    rng = np.random.default_rng({seed})
    return {{"seed": {seed}, "x": rng.random(5), "pid": __import__("os").getpid(), "top": sorted(__import__("os").listdir("/")),
            "cwd": __import__("os").getcwd()}}
"""
    specs = [RunSpec(code=code.format(seed=seed), timeout_s=60, label=f"ray-{seed}") for seed in range(8)]
    with ThreadPoolExecutor(8) as pool:
        remote = list(pool.map(ray_ex.run, specs))
    local = [LocalExecutor().run(spec) for spec in specs]
    for r, l in zip(remote, local):
        assert r.status == "ok" and l.status == "ok", (r, l)
        assert r.value["seed"] == l.value["seed"] and np.array_equal(r.value["x"], l.value["x"])
        assert r.value["pid"] == 2  # in its own PID namespace on the worker too
        assert "net-namespace" in r.isolation and any(x.startswith("uid ") for x in r.isolation)
        assert "allow-list-root" in r.isolation and r.value["top"] == l.value["top"]  # the same root as a local run
        assert "home" not in r.value["top"] and "srv" not in r.value["top"]
        assert r.value["cwd"] == l.value["cwd"] == RUN_SCRATCH and "neutral-paths" in r.isolation  # no host path
    assert ray_ex.init_seconds is not None


def ours(label: str) -> list[str]:
    """This test's sandbox processes (their command line names the run's label), whatever else
    runs sandboxes on this machine."""
    return [p for p in sandbox_processes(every_checkout=True) if f"station-{label}-" in p]


def test_timeout_through_ray(ray_ex):
    began = time.monotonic()
    r = ray_ex.run(RunSpec(code="import time\ndef main():\n    time.sleep(60)\n", timeout_s=2, label="ray-timeout"))
    assert r.status == "timeout" and r.error == "Execution timed out after 2 seconds"
    assert time.monotonic() - began < 45 and ours("ray-timeout") == []  # well before the 60 s sleep ends


def test_stuck_ray_task_is_cancelled_with_its_sandbox(ray_ex, monkeypatch):
    """The Ray-level deadline (the sandbox's own one never came): the worker is killed, and the
    sandbox with it."""
    monkeypatch.setattr(ray_executor, "MARGIN_S", -4.0)  # Ray gives up 4 s before the sandbox would
    r = ray_ex.run(RunSpec(code="import time\ndef main():\n    time.sleep(60)\n", timeout_s=6, label="ray-stuck"))
    assert r.status == "timeout" and "cancelled" in r.error
    deadline = time.monotonic() + 10
    while ours("ray-stuck") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ours("ray-stuck") == []
    assert ray_ex.run(RunSpec(code="def main():\n    return 1\n", timeout_s=30)).value == 1  # Ray still serves


def test_runs_queued_behind_others_do_not_time_out(ray_ex, monkeypatch):
    """Six 4 s runs on 2 CPUs with a 9 s timeout: the second and third pairs wait in Ray's
    queue, and the Ray deadline (here 9.5 s) counts from the start of each run, not from its
    submission (from there the third pair would need 12 s or more). 5 s are left for starting a
    sandbox on a busy machine (a shared CI machine under two test workers)."""
    monkeypatch.setattr(ray_executor, "MARGIN_S", 0.5)
    spec = RunSpec(code="import time\ndef main():\n    time.sleep(4)\n    return 1\n", timeout_s=9)
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(ray_ex.run, [spec] * 6))
    assert [r.status for r in results] == ["ok"] * 6, results


def test_a_run_no_worker_can_take_is_given_up(ray_ex):
    """A GPU run on a cluster without GPUs would wait forever: queue_timeout_s bounds that."""
    from station.executors.ray_executor import RayExecutor

    bounded = RayExecutor(ExecutorConfig(kind="ray"), queue_timeout_s=2)  # shares the module's Ray
    began = time.monotonic()
    r = bounded.run(RunSpec(code="def main():\n    return 1\n", timeout_s=5, num_gpus=1))
    assert r.status == "system_error" and "no worker took the run within 2 seconds" in r.error
    assert time.monotonic() - began < 10
    bounded.close()  # it did not start Ray, so the module's instance keeps running
    assert ray_ex.run(RunSpec(code="def main():\n    return 1\n", timeout_s=30)).value == 1


def test_eight_circle_packing_submissions_score_the_same_on_ray_and_locally(ray_ex):
    """The acceptance check: real submissions, scored by the real evaluator, Ray versus local."""
    from evaluators import create_task
    from evaluators.programs import program

    task = create_task("circle_packing", {"n": 26})
    codes = [program("grid", 26), program("hex", 26)] + \
        [program("optimized", 26, STARTS=1, HOPS=0, SEED=seed) for seed in range(6)]
    specs = [RunSpec(code=code, entry=task.entry, timeout_s=120, label=f"cp-{i}") for i, code in enumerate(codes)]
    with ThreadPoolExecutor(8) as pool:
        remote = list(pool.map(ray_ex.run, specs))
    local = [LocalExecutor().run(spec) for spec in specs]
    remote_scores = [task.score(r).score for r in remote]
    local_scores = [task.score(r).score for r in local]
    assert remote_scores == local_scores and all(s and s > 2.0 for s in remote_scores)
