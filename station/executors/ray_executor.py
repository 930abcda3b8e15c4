"""RayExecutor: the same sandboxed run, placed by Ray (spec research §2.8; docs/sandbox.md).

Each run is one Ray task with the run's `num_cpus` / `num_gpus` that calls LocalExecutor().run on
whichever worker Ray picks, so the isolation is exactly the local one, on that host. Mount
sources are host paths and must exist on the worker's host: a multi-node cluster needs the
storage on a shared file system at the same path (and this package installed there). Two-stage
trials are the exception for what the station exchanges with them: `trial_place` puts a trial's
runs on one node with an actor that keeps its exchange folders there (ray_exchange.py).

The task is a streaming generator that first yields "started": the wall clock (`timeout_s` plus
a margin for the sandbox's own kill) counts from then, so a run queued behind others is not
reported as a timeout. On expiry the task is cancelled with force=True, which kills the worker
process; the sandbox's launcher dies with it (parent-death signal), and with it the sandbox.

Ray failing is never the code's fault: a run whose worker or node died (or whose result was lost)
is run again, up to RETRIES times, and only then is it a `system_error` (the station pauses).
A cluster that stops answering is a `system_error` naming its address: its address is checked
before ray.init (which retries a dead address for minutes), ray.init is bounded, and waiting runs
check it every few seconds. Ray's GCS client would end the whole process once the head has been
gone for a minute (gcs_rpc_server_reconnect_timeout_s, 60 s); the driver here sets that to a week
(a cluster's own --system-config value still wins), so the station itself reports the loss, pauses
and exits cleanly.

Ray is imported here only, and only on the first run: the station never needs it otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import ipaddress
import logging
import os
import queue
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from station.core.run_types import RunResult, RunSpec
from station.executors.local import LocalExecutor
from station.executors.ray_exchange import RayTrial, SiteLost, placed_trial

MARGIN_S = 30.0  # beyond the run's own timeout, which the sandbox on the worker enforces itself
log = logging.getLogger(__name__)
WAIT_SLICE_S = 0.5  # how often a wait looks whether the station is stopping
CLOSE_WAIT_S = 2.0  # at most this long for the runs' threads to leave Ray before it shuts down
_worker_executors: dict[tuple, LocalExecutor] = {}  # per worker process: probing the modes once
RETRIES = 3  # runs again after its worker or node died; bounded, since something may keep killing it
INIT_TIMEOUT_S = 120.0  # ray.init retries an address that answers but is no Ray head (or refuses us) forever
PROBE_EVERY_S = 5.0  # a waiting run checks that the cluster's address still answers this often
PROBE_TIMEOUT_S, PROBE_TRIES = 3.0, 3  # one refused connection in a blip is not a lost cluster
# Ray's GCS client ends the process (not just Ray) when the head is gone this long (Ray's default: 60 s)
RECONNECT_ENV, RECONNECT_S = "RAY_gcs_rpc_server_reconnect_timeout_s", str(7 * 24 * 3600)
# A local instance's session files and token go in a new 0700 folder, not /tmp/ray (0777) and ~/.ray
# Ray's Unix sockets go to <base>/ray-station-XXXXXXXX/r/session_<time>_<pid>/sockets/plasma_store: the
# base gets what is left of a socket path's ~107 bytes (/tmp does; a longer TMPDIR is not used)
PRIVATE_PREFIX, PRIVATE_BASE_MAX = "ray-station-", 16  # not "station-*": run dirs are named so (local.py)
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")  # Ray's token settings (Ray 2.5x+)


class ClusterUnreachable(Exception):
    """The Ray cluster does not answer: a system failure, never the code's."""


def _run_on_worker(spec: RunSpec, options: tuple):
    """Ray task body (streaming): "started", then {"progress": text} whenever the run's harness
    reports some, then {"result": the RunResult as a plain dict}."""
    yield "started"
    import ray

    executor = _worker_executors.get(options)
    if executor is None:
        executor = _worker_executors[options] = LocalExecutor(scratch_base=options[0], hide=list(options[1]))
    if spec.num_gpus > 0:  # Ray chose the GPUs; the sandbox's environment is built from nothing
        ids = ",".join(str(i) for i in ray.get_gpu_ids())
        spec = dataclasses.replace(spec, env={"CUDA_VISIBLE_DEVICES": ids, **spec.env})
    reports: queue.Queue = queue.Queue()
    executor.on_progress = lambda label, text: reports.put(text)
    outcome: dict[str, RunResult] = {}
    running = threading.Thread(target=lambda: outcome.update(result=executor.run(spec)), daemon=True)
    running.start()
    while running.is_alive() or not reports.empty():
        try:
            yield {"progress": reports.get(timeout=1.0)}
        except queue.Empty:
            pass
    result = outcome["result"]
    yield {"result": {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}}


def _route_ray_logging() -> None:
    """Ray's logger writes to the terminal by itself; hand its records to the station's logging
    instead (station/core/runlog.py sends them to the station's log file)."""
    ray_log = logging.getLogger("ray")
    for handler in list(ray_log.handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            ray_log.removeHandler(handler)
    ray_log.propagate = True


def _private_folder() -> Path:
    """A new folder only the station's user can enter (mkdtemp makes it 0700) for a local Ray's session
    files (in its subfolder "r": Ray makes its temp dir 0777) and token."""
    base = tempfile.gettempdir()
    return Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX, dir=base if len(base) <= PRIVATE_BASE_MAX else "/tmp"))


def _write_token(folder: Path) -> Path:
    """A fresh token for a local instance, in a file only its owner may read (Ray's own goes to
    ~/.ray/auth_token, mode 0644: readable by every local account where the home folder is)."""
    path = folder / "auth_token"
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
        file.write(secrets.token_hex(32))
    return path


def _use_auth(settings: dict[str, str | None]) -> dict[str, str | None]:
    """Set Ray's token settings (None: unset) for this process and the Ray processes it starts; returns
    the ones before. Ray caches the mode and the token: both are read again, as Ray's own tests do."""
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]  # not in its stub

    before = {key: os.environ.get(key) for key in AUTH_ENV}
    for key, value in settings.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
    return before


@contextlib.contextmanager
def _node_on_loopback():
    """Ray binds its servers (GCS, raylet, workers, agents) to loopback only when the node's address
    is 127.0.0.1, and ray.init turns a given 127.0.0.1 into the host's outward address unless Ray
    believes clusters are off (its switch for Windows and macOS). The switch is read while the node is
    set up; afterwards Ray asks the node for its address, so it is put back at once."""
    from ray._private import ray_constants

    saved, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


@contextlib.contextmanager
def _without_unused_helpers():
    """A local instance without two of Ray's helper processes that a station never uses, as `ray start
    --head --no-monitor --include-log-monitor=false` would start it, and without its API server: the
    autoscaler's monitor (a local node has the CPUs it was given, never more), the log monitor (it sends
    the workers' output to drivers; log_to_driver is off) and the API server (dashboard.py, started even
    with include_dashboard=False: job submission and the state API, which a station never calls; Ray
    carries on without it when it fails to start, and it is one listening port fewer). Together 2.3
    CPU-seconds of a start's ~6. ray.init has no options for them: its node's parameters get these
    defaults while it builds them, and its node skips the API server."""
    from ray._private import node, parameter

    plain, api_server = parameter.RayParams, getattr(node.Node, "start_api_server", None)
    if api_server is None or not {"no_monitor", "include_log_monitor"} <= inspect.signature(plain).parameters.keys():
        yield  # a Ray without these settings: its node as it comes
        return

    class Lean(plain):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("no_monitor", True)
            kwargs.setdefault("include_log_monitor", False)
            super().__init__(*args, **kwargs)

    parameter.RayParams, node.Node.start_api_server = Lean, _no_api_server
    try:
        yield
    finally:
        parameter.RayParams, node.Node.start_api_server = plain, api_server


def _no_api_server(self: Any, **_: Any) -> None:
    """Node.start_api_server for a local instance: none (the head keeps no dashboard address)."""


def _check_loopback(ray) -> None:
    """Fail closed: a local instance that came up on an outward address is not used."""
    host = ray.get_runtime_context().gcs_address.rpartition(":")[0].strip("[]")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        loopback = host == "localhost"
    if not loopback:
        raise RuntimeError(f"the local Ray instance listens on {host}, not on loopback only (a Ray change?)")


class RayExecutor:
    name = "ray"

    def __init__(
        self,
        config: Any,
        hide: list[Path] | tuple = (),
        scratch_base: str | Path | None = None,
        queue_timeout_s: float | None = None,
    ) -> None:
        """`config`: station.config.ExecutorConfig (ray_address, ray_num_cpus). `queue_timeout_s`:
        how long a run may wait for a worker (None: as long as it takes)."""
        self.address, self.num_cpus = config.ray_address, config.ray_num_cpus
        self.options = (str(scratch_base) if scratch_base else None, tuple(str(p) for p in hide))
        self.queue_timeout_s = queue_timeout_s
        self.init_seconds: float | None = None  # how long connecting or starting Ray took
        self._lock = threading.Lock()
        self._init_lock = threading.Lock()
        self._users_changed = threading.Condition(self._lock)
        self._users = 0  # threads inside run()
        self._task = None
        self._initialized_here = False
        self._release = threading.Event()  # lets the thread that called ray.init end
        self._owner: threading.Thread | None = None
        self.on_progress: Callable[[str, str], None] | None = None  # (run label, what its harness reported)
        self._closing = threading.Event()  # close() was called: waits end, runs in flight are cancelled
        self._inflight: set = set()  # the streaming refs of runs in flight
        self.where = self.address or "the local Ray instance"  # named in errors
        self._endpoint = _endpoint(self.address)  # (host, port) checked for an answer; None: not known yet
        self._unusable: str | None = None  # ray.init never returned: the executor stays failed
        self._private: Path | None = None  # a local instance's 0700 folder (session files, token)
        self._auth_before: dict[str, str | None] | None = None  # Ray's token settings before it started

    def _ray(self):
        """Ray, initialised once per process (thread-safe), and the remote task."""
        import ray

        with self._init_lock:  # not self._lock: close() must not wait for a slow ray.init
            if self._closing.is_set():  # never start Ray again once closed
                raise RuntimeError("the executor was closed (the station is stopping)")
            if self._unusable:
                raise ClusterUnreachable(self._unusable)
            if self._task is None:
                began = time.monotonic()
                if not ray.is_initialized():
                    self._check_reachable()  # a dead address would keep ray.init retrying for minutes
                    self._init_in_owner_thread(ray)
                    self._initialized_here = True
                if self._endpoint is None:  # a local instance or "auto": the head is known now
                    gcs = ray.get_runtime_context().gcs_address
                    self._endpoint, self.where = _endpoint(gcs), self.address or f"{gcs} (a local Ray instance)"
                self._task = ray.remote(num_returns="streaming", max_retries=0)(_run_on_worker)
                self.init_seconds = time.monotonic() - began
        return ray, self._task

    def _init_in_owner_thread(self, ray) -> None:
        """ray.init starts Ray's processes with a parent-death signal bound to the calling
        *thread*; runs are called from evaluation threads that end, which would take the local
        Ray instance down with them. A thread that lives until close() calls it instead."""
        outcome: queue.Queue = queue.Queue()

        def own() -> None:
            _route_ray_logging()
            os.environ[RECONNECT_ENV] = RECONNECT_S  # read when ray.init starts Ray's core; overrides any set
            try:
                common = {"log_to_driver": False, "logging_level": logging.WARNING}
                if self.address:
                    ray.init(address=self.address, **common)
                else:
                    self._start_local(ray, common)
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                outcome.put(err)
                return
            outcome.put(None)
            self._release.wait()

        self._release.clear()
        self._owner = threading.Thread(target=own, name="ray-owner", daemon=True)
        self._owner.start()
        try:  # joining a cluster is bounded; starting a local instance is not
            err = outcome.get(timeout=INIT_TIMEOUT_S if self.address else None)
        except queue.Empty:  # still inside ray.init: it may never return, so this executor stays failed
            self._unusable = (
                f"Ray cluster at {self.where} unreachable: ray.init did not connect within "
                f"{INIT_TIMEOUT_S:g} seconds (not a Ray head, or it refused this station?)"
            )
            raise ClusterUnreachable(self._unusable) from None
        if err is not None:
            raise err

    def _start_local(self, ray, common: dict[str, Any]) -> None:
        """A new local instance ("local": never a cluster Ray finds running, RAY_ADDRESS, `ray start`),
        reachable from this host only, its session files and token in a folder only this user can enter.
        Another local account can still connect to loopback: the token keeps it out."""
        self._private = _private_folder()
        token = _write_token(self._private)
        self._auth_before = _use_auth(
            {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": None, "RAY_AUTH_TOKEN_PATH": str(token)}
        )
        try:
            with _node_on_loopback(), _without_unused_helpers():
                ray.init(
                    address="local",
                    num_cpus=self.num_cpus,
                    include_dashboard=False,
                    _temp_dir=str(self._private / "r"),
                    _node_ip_address="127.0.0.1",
                    **common,
                )
            _check_loopback(ray)
        except BaseException:
            ray.shutdown()
            self._forget_local()
            raise

    def _forget_local(self) -> None:
        """After a local instance stopped: Ray's token settings as they were, its folder (token too) gone."""
        if self._auth_before is not None:
            _use_auth(self._auth_before)
            self._auth_before = None
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None

    def _check_reachable(self) -> None:
        """Raise ClusterUnreachable unless the head's address accepts a TCP connection (a few tries)."""
        if self._endpoint is None:
            return
        for attempt in range(PROBE_TRIES):
            try:
                socket.create_connection(self._endpoint, timeout=PROBE_TIMEOUT_S).close()
                return
            except OSError as err:
                error = err
            if attempt + 1 < PROBE_TRIES:
                self._closing.wait(1.0)
        raise ClusterUnreachable(f"Ray cluster at {self.where} unreachable: {type(error).__name__}: {error}")

    def connect(self) -> Any:
        """Ray, joined or started as for a run, for other work on the same cluster (`station multistart
        --on ray` runs its branches there); close() leaves it as for runs."""
        ray, _ = self._ray()
        return ray

    def gpu_count(self) -> int:
        """GPUs in the Ray cluster (trials then ask Ray for one each)."""
        ray, _ = self._ray()
        return int(ray.cluster_resources().get("GPU", 0))

    def describe(self) -> str:
        where = f"cluster at {self.address}" if self.address else "a local Ray instance"
        return f"ray: sandboxed runs (the local sandbox on each worker) on {where}"

    @contextmanager
    def trial_place(self, label: str, num_cpus: float, num_gpus: float) -> Iterator[RayTrial]:
        """A two-stage trial's place on one node: its exchange folders there, its runs placed
        there (ray_exchange.py); SiteLost when Ray fails under it."""
        try:
            ray, _ = self._ray()
        except Exception as err:  # noqa: BLE001 - unreachable, closed: a system error like a run's
            raise SiteLost(f"Ray error: {type(err).__name__}: {err}") from None
        with placed_trial(ray, self, label, num_cpus, num_gpus) as trial:
            yield trial

    @contextmanager
    def using_ray(self) -> Iterator[None]:
        """A Ray call outside run() (a trial's placement, its actor): close() waits for it to leave
        before shutting Ray down, and none starts once the station is stopping."""
        with self._users_changed:
            if self._closing.is_set():
                raise SiteLost("Ray error: the executor was closed (the station is stopping)")
            self._users += 1
        try:
            yield
        finally:
            with self._users_changed:
                self._users -= 1
                self._users_changed.notify_all()

    def wait_ready(self, ref: Any, timeout: float | None) -> bool:
        """Wait for `ref` as a run's start is waited for (close-aware, the cluster probed)."""
        ray, _ = self._ray()
        return self._wait(ray, ref, timeout)

    def run(self, spec: RunSpec, placement: Any = None) -> RunResult:
        """The run on any worker, or in bundle 0 of the placement group `placement` (a trial's)."""
        began = time.monotonic()
        with self._users_changed:
            if self._closing.is_set():
                return RunResult(
                    status="system_error", error="Ray error: the executor was closed (the station is stopping)"
                )
            self._users += 1  # close() shuts Ray down only when no thread is inside a Ray call
        try:
            result = self._run_retrying(spec, placement)
        except ClusterUnreachable as err:
            result = RunResult(status="system_error", error=str(err))
        except Exception as err:  # noqa: BLE001 - Ray itself failed in a way a retry would not mend
            result = RunResult(status="system_error", error=f"Ray error: {type(err).__name__}: {err}")
        finally:
            with self._users_changed:
                self._users -= 1
                self._users_changed.notify_all()
        result.duration_s = time.monotonic() - began
        return result

    def _run_retrying(self, spec: RunSpec, placement: Any = None) -> RunResult:
        """The run, again after each infrastructure failure (while the cluster answers), RETRIES times."""
        ray, task = self._ray()
        errors = ray.exceptions
        infrastructure = (
            errors.WorkerCrashedError,
            errors.NodeDiedError,
            errors.LocalRayletDiedError,
            errors.ObjectLostError,
            errors.OutOfMemoryError,
            errors.RaySystemError,
        )
        # a trial's run is not run again: its node's exchange (an actor, not restarted) went with it,
        # and a run submitted to a placement group removed meanwhile would wait forever
        attempts = 1 + (RETRIES if placement is None else 0)
        for attempt in range(attempts):
            if self._closing.is_set():  # a run that close() cancelled is not run again
                raise RuntimeError("the executor was closed: the station is stopping")
            runs = task.options(
                num_cpus=spec.num_cpus, num_gpus=spec.num_gpus, name=spec.label, **_placed(placement)
            ).remote(spec, self.options)
            with self._lock:
                self._inflight.add(runs)
            try:
                return self._follow(ray, runs, spec)
            except infrastructure as err:
                failure = f"{type(err).__name__}: {err}"
                log.warning("run %s, attempt %d: Ray failed: %s", spec.label, attempt + 1, failure)
                self._check_reachable()  # a dead head is why, often: say so rather than retry
            finally:
                with self._lock:
                    self._inflight.discard(runs)
        return RunResult(
            status="system_error",
            error=f"Ray error: the run failed on Ray's side {attempts} times; the last: {failure}",
        )

    def _wait(self, ray, runs, timeout: float | None) -> bool:
        """ray.wait in short slices, so that close() ends it within a second; True when ready. Checks
        now and then that the cluster still answers: Ray itself may wait a minute or more to notice."""
        deadline = None if timeout is None else time.monotonic() + timeout
        probed = time.monotonic()
        while not self._closing.is_set():
            left = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - time.monotonic())
            if left <= 0:
                return False
            if ray.wait([runs], timeout=left)[0]:
                return True
            if time.monotonic() - probed >= PROBE_EVERY_S:
                self._check_reachable()  # not cancelled then: the cluster is gone, and its runs with it
                probed = time.monotonic()
        raise RuntimeError("the executor was closed: the station is stopping")

    def _follow(self, ray, runs, spec: RunSpec) -> RunResult:
        if not self._wait(ray, runs, self.queue_timeout_s):
            ray.cancel(runs, force=True)
            return RunResult(
                status="system_error",
                error=f"Ray error: no worker took the run within {self.queue_timeout_s:g} seconds",
            )
        ray.get(next(runs))  # "started"
        deadline = time.monotonic() + spec.timeout_s + MARGIN_S
        while True:
            if not self._wait(ray, runs, deadline - time.monotonic()):
                ray.cancel(runs, force=True)
                return RunResult(
                    status="timeout",
                    error=f"Execution timed out after {spec.timeout_s:g} seconds "
                    "(the Ray task did not finish and was cancelled)",
                )
            item = ray.get(next(runs))
            if "result" in item:
                return RunResult(**item["result"])
            if self.on_progress is not None:
                self.on_progress(spec.label, item["progress"])

    def close(self) -> None:
        """Cancel the runs in flight (they run again when the station resumes), then disconnect from
        (or stop) Ray if this executor initialised it; leave it alone otherwise."""
        with self._users_changed:
            self._closing.set()
            if self._task is not None:
                import ray

                for runs in self._inflight:
                    try:
                        ray.cancel(runs, force=True)
                    except Exception:  # noqa: BLE001 - already finished, or the cluster is gone
                        pass
            # Ray ends the whole process when a thread calls into it after shutdown: wait (a wait
            # slice or so) for the runs' threads to leave their Ray calls. A thread still inside
            # (Ray still starting) keeps Ray up; a local instance then ends with this process.
            if not self._users_changed.wait_for(lambda: self._users == 0, timeout=CLOSE_WAIT_S):
                log.warning("Ray was still starting or busy when the station stopped; not shut down")
                return
            if self._initialized_here:
                import ray

                ray.shutdown()
                self._release.set()
                cast(threading.Thread, self._owner).join()  # started whenever _initialized_here
                self._forget_local()
            self._task, self._initialized_here, self._owner = None, False, None


def _placed(placement: Any) -> dict[str, Any]:
    """Ray's options that put a run into bundle 0 of a trial's placement group (none: anywhere)."""
    if placement is None:
        return {}
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(placement, placement_group_bundle_index=0)}


def _endpoint(address: str | None) -> tuple[str, int] | None:
    """(host, port) of "host:port" or "ray://host:port"; None for "auto" or no address."""
    host, _, port = (address or "").removeprefix("ray://").rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else None


def create(config: Any, hide: list[Path] | tuple, scratch_base: str | Path | None) -> RayExecutor:
    """The registry's factory (station/executors/__init__.py)."""
    return RayExecutor(config, hide=hide, scratch_base=scratch_base, queue_timeout_s=config.ray_queue_timeout_s)
