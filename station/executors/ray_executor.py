"""RayExecutor: the same sandboxed run, placed by Ray (spec research §2.8; docs/sandbox.md).

Each run is one Ray task with the run's `num_cpus` / `num_gpus` that calls LocalExecutor().run on
whichever worker Ray picks, so the isolation is exactly the local one, on that host. Mount
sources are host paths and must exist on the worker's host: a multi-node cluster needs the
storage on a shared file system at the same path (and this package installed there).

The task is a streaming generator that first yields "started": the wall clock (`timeout_s` plus
a margin for the sandbox's own kill) counts from then, so a run queued behind others is not
reported as a timeout. On expiry the task is cancelled with force=True, which kills the worker
process; the sandbox's launcher dies with it (parent-death signal), and with it the sandbox.

Ray is imported here only, and only on the first run: the station never needs it otherwise.
"""
from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any

from .base import RunResult, RunSpec
from .local import LocalExecutor

MARGIN_S = 30.0  # beyond the run's own timeout, which the sandbox on the worker enforces itself
_worker_executors: dict[tuple, LocalExecutor] = {}  # per worker process: probing the modes once


def _run_on_worker(spec: RunSpec, options: tuple):
    """Ray task body (streaming): "started", then the RunResult as a plain dict."""
    yield "started"
    import ray

    executor = _worker_executors.get(options)
    if executor is None:
        executor = _worker_executors[options] = LocalExecutor(scratch_base=options[0], hide=list(options[1]))
    if spec.num_gpus > 0:  # Ray chose the GPUs; the sandbox's environment is built from nothing
        ids = ",".join(str(i) for i in ray.get_gpu_ids())
        spec = dataclasses.replace(spec, env={"CUDA_VISIBLE_DEVICES": ids, **spec.env})
    result = executor.run(spec)
    yield {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}


class RayExecutor:
    name = "ray"

    def __init__(self, config: Any, hide: list[Path] | tuple = (), scratch_base: str | Path | None = None,
                 queue_timeout_s: float | None = None) -> None:
        """`config`: station.config.ExecutorConfig (ray_address, ray_num_cpus). `queue_timeout_s`:
        how long a run may wait for a worker (None: as long as it takes)."""
        self.address, self.num_cpus = config.ray_address, config.ray_num_cpus
        self.options = (str(scratch_base) if scratch_base else None, tuple(str(p) for p in hide))
        self.queue_timeout_s = queue_timeout_s
        self.init_seconds: float | None = None  # how long connecting or starting Ray took
        self._lock = threading.Lock()
        self._task = None
        self._initialized_here = False
        self._release = threading.Event()  # lets the thread that called ray.init end
        self._owner: threading.Thread | None = None

    def _ray(self):
        """Ray, initialised once per process (thread-safe), and the remote task."""
        import ray

        with self._lock:
            if self._task is None:
                began = time.monotonic()
                if not ray.is_initialized():
                    self._init_in_owner_thread(ray)
                    self._initialized_here = True
                self._task = ray.remote(num_returns="streaming", max_retries=0)(_run_on_worker)
                self.init_seconds = time.monotonic() - began
        return ray, self._task

    def _init_in_owner_thread(self, ray) -> None:
        """ray.init starts Ray's processes with a parent-death signal bound to the calling
        *thread*; runs are called from evaluation threads that end, which would take the local
        Ray instance down with them. A thread that lives until close() calls it instead."""
        outcome: queue.Queue = queue.Queue()

        def own() -> None:
            try:
                common = {"log_to_driver": False, "logging_level": logging.WARNING}
                if self.address:
                    ray.init(address=self.address, **common)
                else:
                    ray.init(num_cpus=self.num_cpus, include_dashboard=False, **common)
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                outcome.put(err)
                return
            outcome.put(None)
            self._release.wait()

        self._release.clear()
        self._owner = threading.Thread(target=own, name="ray-owner", daemon=True)
        self._owner.start()
        err = outcome.get()
        if err is not None:
            raise err

    def gpu_count(self) -> int:
        """GPUs in the Ray cluster (trials then ask Ray for one each)."""
        ray, _ = self._ray()
        return int(ray.cluster_resources().get("GPU", 0))

    def describe(self) -> str:
        where = f"cluster at {self.address}" if self.address else "a local Ray instance"
        return f"ray: sandboxed runs (the local sandbox on each worker) on {where}"

    def run(self, spec: RunSpec) -> RunResult:
        began = time.monotonic()
        try:
            ray, task = self._ray()
            runs = task.options(num_cpus=spec.num_cpus, num_gpus=spec.num_gpus, name=spec.label).remote(
                spec, self.options)
            result = self._follow(ray, runs, spec)
        except Exception as err:  # noqa: BLE001 - Ray itself failed (worker died, cluster gone, ...)
            result = RunResult(status="system_error", error=f"Ray error: {type(err).__name__}: {err}")
        result.duration_s = time.monotonic() - began
        return result

    def _follow(self, ray, runs, spec: RunSpec) -> RunResult:
        ready, _ = ray.wait([runs], timeout=self.queue_timeout_s)
        if not ready:
            ray.cancel(runs, force=True)
            return RunResult(status="system_error",
                             error=f"Ray error: no worker took the run within {self.queue_timeout_s:g} seconds")
        ray.get(next(runs))  # "started"
        ready, _ = ray.wait([runs], timeout=spec.timeout_s + MARGIN_S)
        if not ready:
            ray.cancel(runs, force=True)
            return RunResult(status="timeout", error=f"Execution timed out after {spec.timeout_s:g} seconds "
                                                     "(the Ray task did not finish and was cancelled)")
        return RunResult(**ray.get(next(runs)))

    def close(self) -> None:
        """Disconnect from (or stop) Ray if this executor initialised it; leave it alone otherwise."""
        with self._lock:
            if self._initialized_here:
                import ray

                ray.shutdown()
                self._release.set()
                self._owner.join()
            self._task, self._initialized_here, self._owner = None, False, None
