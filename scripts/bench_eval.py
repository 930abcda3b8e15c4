"""Sandbox overhead and evaluation throughput: the local sandbox and the Ray executor.

    .venv/bin/python scripts/bench_eval.py [--runs 20]

A trivial submission (`return 1`) spends no time in its entry function, so its wall time is the
sandbox's overhead: unshare, mounts, two interpreter start-ups, the result round trip. Prints
one table; a live progress line goes to stderr.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from station.core.config import ExecutorConfig  # noqa: E402
from station.executors import LocalExecutor, RunSpec, create_executor  # noqa: E402

TRIVIAL = RunSpec(code="def main():\n    return 1\n", timeout_s=30, label="bench")
WITH_NUMPY = RunSpec(code="import numpy as np\ndef main():\n    return np.zeros(3)\n", timeout_s=30, label="bench")
COMMAND = RunSpec(code="", mode="command", entry="true", timeout_s=30, label="bench")


def progress(what: str, done: int, total: int) -> None:
    sys.stderr.write(f"\r{what:<34} {done:>3}/{total}")
    sys.stderr.flush()
    if done == total:
        sys.stderr.write("\n")


def sequential(executor, spec: RunSpec, runs: int, what: str) -> list[float]:
    times = []
    for i in range(runs):
        began = time.perf_counter()
        result = executor.run(spec)
        times.append(time.perf_counter() - began)
        if result.status != "ok":
            sys.exit(f"{what}: run failed: {result}")
        progress(what, i + 1, runs)
    return times


def throughput(executor, spec: RunSpec, runs: int, parallel: int, what: str) -> float:
    done, lock = 0, threading.Lock()

    def one(_):
        nonlocal done
        result = executor.run(spec)
        with lock:
            done += 1
            progress(what, done, runs)
        return result.status

    began = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        statuses = list(pool.map(one, range(runs)))
    elapsed = time.perf_counter() - began
    if set(statuses) != {"ok"}:
        sys.exit(f"{what}: some runs failed: {statuses}")
    return runs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    n = parser.parse_args().runs
    local = LocalExecutor()
    rows: list[tuple[str, str]] = [("local isolation mode", local.mode)]

    def latency(spec: RunSpec, what: str) -> None:
        times = sequential(local, spec, n, what)
        p90 = statistics.quantiles(times, n=10)[-1]
        rows.append((what, f"median {statistics.median(times) * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms"))

    latency(TRIVIAL, "local overhead, function `return 1`")
    latency(COMMAND, "local overhead, command `true`")
    latency(WITH_NUMPY, "local, function returning np.zeros")
    rate = throughput(local, TRIVIAL, n, 2, "local, 2 threads")
    rows.append(("local throughput, 2 threads", f"{rate:.1f} evaluations/s"))

    ray_ex = create_executor(ExecutorConfig(kind="ray", ray_num_cpus=2))
    try:
        began = time.perf_counter()
        first = ray_ex.run(TRIVIAL)
        first_s = time.perf_counter() - began
        if first.status != "ok":
            sys.exit(f"ray: first run failed: {first}")
        rows.append(("ray init (local instance, 2 CPUs)", f"{ray_ex.init_seconds:.2f} s"))
        rows.append(("ray first run (init + worker start)", f"{first_s:.2f} s"))
        warm = sequential(ray_ex, TRIVIAL, n, "ray sequential")
        rows.append(("ray latency, sequential", f"median {statistics.median(warm) * 1000:.0f} ms"))
        for parallel in (2, 4):
            rate = throughput(ray_ex, TRIVIAL, n, parallel, f"ray, {parallel} in flight")
            rows.append((f"ray throughput, {parallel} in flight (2 CPUs)", f"{rate:.1f} evaluations/s"))
    finally:
        ray_ex.close()

    width = max(len(k) for k, _ in rows)
    print(f"\n{n} runs each\n")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")


if __name__ == "__main__":
    main()
