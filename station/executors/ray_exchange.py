"""Two-stage trials on Ray: checkpoints, stop signals and the scorer's inputs cross through Ray, not
through a file system shared by the nodes (docs/sandbox.md, "Training tasks").

Each trial gets a placement group of one bundle (its trainer's CPUs and GPUs, STRICT_PACK), so
that its trainer, its scorer (no CPU of its own: it runs within the trial's bundle) and a small
actor of the station's own share one node. The actor (NodeFolders) makes the trial's exchange
folders in that node's scratch base (a work folder: locked while in use, swept on the node when a
later trial starts there after a kill) and performs there, through runfiles, exactly what the
station performs on its own host in the local path (trial_folders.LocalFolders): no link followed,
regular files of one link, bounded reads. The bytes come back through Ray's object store; the
station checks their size again and everything else as before (format, the export check by the
scorer, one checkpoint in flight). The station's process never opens a path on the node.

The scorer's inputs (the scored split, the station's) are sent the same way once per trial and
written into the node's `scoring_data/`. The training data and the harness are not: like task
storage and the package itself, they must be at the same path on every node (ray_executor.py).

Ray failing under a trial (its node or actor gone, the placement never made within the queue
timeout, the station stopping) raises SiteLost, an OSError: a system error, never the code's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from station.core.run_types import RunResult, RunSpec
from station.executors import runfiles
from station.executors.disk import DIR_FLAGS, FILE_FLAGS
from station.executors.trial_folders import SCORING, LocalFolders

CALL_TIMEOUT_S = 300.0  # one call to the trial's actor (the largest: a 400 MB checkpoint, a scored file)
MAX_SCORING_BYTES = 2 << 30  # the scorer's inputs sent to a node (forecasting's full val split: ~0.3 GB)
MAX_SCORING_FILES = 10_000


class SiteLost(OSError):
    """Ray failed under a trial (its node, its actor, its placement): a system error, one line."""


class NodeFolders:
    """The actor on the trial's node (the station's code): LocalFolders there, in a work folder of
    the node's scratch base (the executor's, else the node's temp folder, as its runs use)."""

    def __init__(self, scratch_base: str | None, label: str) -> None:
        base = Path(scratch_base or tempfile.gettempdir())
        runfiles.sweep(base)  # what a trial killed with its node or station left here
        self._stack = ExitStack()
        work = self._stack.enter_context(runfiles.work_folder(base, label))
        self.folders = LocalFolders(work / "trial")
        scoring = self.folders.path(SCORING)
        scoring.mkdir()
        scoring.chmod(0o755)  # the scorer reads it; the trainer's sandbox never sees the scratch base

    def path(self, where: str) -> str:
        return str(self.folders.path(where))

    def present(self, where: str, name: str) -> bool:
        return self.folders.present(where, name)

    def take(self, where: str, name: str, limit: int, what: str) -> tuple[str, bytes | str | None]:
        """("ok", bytes or None) or ("refused", the one-line reason): a refusal crosses as data."""
        try:
            return "ok", self.folders.take(where, name, limit, what)
        except runfiles.Refused as err:
            return "refused", str(err)

    def write(self, where: str, name: str, data: bytes) -> None:
        self.folders.write(where, name, data)

    def remove(self, where: str, name: str) -> None:
        self.folders.remove(where, name)

    def receive(self, rel: str, data: bytes) -> None:
        """Write one of the scorer's inputs (its path relative to scoring_data/) there."""
        folder = self.folders.path(SCORING)
        for part in Path(rel).parts[:-1]:
            folder = folder / part
            folder.mkdir(mode=0o755, exist_ok=True)
        runfiles.write(folder, Path(rel).name, data)

    def close(self) -> None:
        self._stack.close()


def scorer_inputs(source: Path) -> Iterator[tuple[str, bytes]]:
    """The regular files below `source` (the station's own folder), one at a time, bounded: what
    a node is sent for the scorer."""
    fd = os.open(source, DIR_FLAGS)
    try:
        found, complete = runfiles.regular_files(fd, MAX_SCORING_FILES)
        if not complete or sum(size for _, size in found) > MAX_SCORING_BYTES:
            raise ValueError(f"the scorer's inputs in {source} exceed what is sent to a Ray node")
        for rel, _ in found:
            with os.fdopen(os.open(rel, FILE_FLAGS, dir_fd=fd), "rb") as f:
                yield rel, f.read(MAX_SCORING_BYTES + 1)
    finally:
        os.close(fd)


class RemoteFolders:
    """The station's proxy for NodeFolders: LocalFolders' methods, each one call to the actor."""

    def __init__(self, ray: Any, executor: Any, actor: Any, label: str) -> None:
        self._ray, self._executor, self._actor, self._label = ray, executor, actor, label
        self._paths: dict[str, Path] = {}

    def _call(self, method: str, *args: Any) -> Any:
        with self._executor.using_ray():  # close() does not shut Ray down under this call
            try:
                ref = getattr(self._actor, method).remote(*args)
                return self._ray.get(ref, timeout=CALL_TIMEOUT_S)
            except self._ray.exceptions.RayError as err:
                raise SiteLost(f"Ray error in trial {self._label}'s exchange: {type(err).__name__}: {err}") from None

    def path(self, where: str) -> Path:
        """The folder's path on the trial's node: a mount source for its runs, never opened here."""
        if where not in self._paths:
            self._paths[where] = Path(self._call("path", where))
        return self._paths[where]

    def present(self, where: str, name: str) -> bool:
        return bool(self._call("present", where, name))

    def take(self, where: str, name: str, limit: int, what: str) -> bytes | None:
        status, value = self._call("take", where, name, limit, what)
        if status == "refused":
            raise runfiles.Refused(str(value))
        if value is not None and len(value) > limit:  # the station's own check of what crossed
            raise runfiles.Refused(f"{what} holds {len(value):,} bytes, more than the {limit:,} allowed")
        return value

    def write(self, where: str, name: str, data: bytes) -> None:
        self._call("write", where, name, data)

    def remove(self, where: str, name: str) -> None:
        self._call("remove", where, name)

    def provide(self, source: Path) -> Path:
        """Send the scorer's inputs to the trial's node, a file per call; where the scorer finds them there."""
        for rel, data in scorer_inputs(source):
            self._call("receive", rel, data)
        return self.path(SCORING)


class RayTrial:
    """One trial's place on Ray: its folders on the node, and its runs placed there."""

    def __init__(self, executor: Any, folders: RemoteFolders, placement: Any) -> None:
        self.folders, self._executor, self._placement = folders, executor, placement

    def run(self, spec: RunSpec) -> RunResult:
        return self._executor.run(spec, placement=self._placement)


_actor_class: Any = None


@contextmanager
def placed_trial(ray: Any, executor: Any, label: str, num_cpus: float, num_gpus: float) -> Iterator[RayTrial]:
    """A placement group for one trial (its trainer's resources, on one node), the exchange actor in
    it, and the trial's runs placed there; all removed (with the node's folders) at the end."""
    global _actor_class
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundle = {name: amount for name, amount in (("CPU", num_cpus), ("GPU", num_gpus)) if amount > 0}
    if not bundle:
        raise ValueError(f"trial {label} asks Ray for no CPU or GPU: nothing to place it by")
    with executor.using_ray():
        group = placement_group([bundle], strategy="STRICT_PACK", name=f"station-{label}")
    try:
        _wait_placed(ray, executor, group, label)
        if _actor_class is None:
            _actor_class = ray.remote(NodeFolders)
        place = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0)
        with executor.using_ray():
            actor = _actor_class.options(num_cpus=0, max_restarts=0, scheduling_strategy=place).remote(
                executor.options[0], label
            )
        folders = RemoteFolders(ray, executor, actor, label)
        try:
            yield RayTrial(executor, folders, group)
        finally:
            _close_actor(ray, executor, folders, actor)
    finally:
        _quietly(executor, lambda: remove_placement_group(group))


def _wait_placed(ray: Any, executor: Any, group: Any, label: str) -> None:
    """Until the trial's bundle is reserved on a node (the executor's queue timeout at most)."""
    try:
        with executor.using_ray():
            placed = executor.wait_ready(group.ready(), executor.queue_timeout_s)
    except Exception as err:  # noqa: BLE001 - the cluster lost, or the station stopping
        raise SiteLost(f"Ray error placing trial {label}: {type(err).__name__}: {err}") from None
    if not placed:
        raise SiteLost(f"Ray error: no node took trial {label} within {executor.queue_timeout_s:g} seconds")


def _close_actor(ray: Any, executor: Any, folders: RemoteFolders, actor: Any) -> None:
    """Remove the node's folders, then end the actor (a dead node took both with it)."""
    try:
        folders._call("close")
    except SiteLost:
        pass  # its node's next trial sweeps what is left (NodeFolders)
    _quietly(executor, lambda: ray.kill(actor))


def _quietly(executor: Any, step: Any) -> None:
    try:
        with executor.using_ray():
            step()
    except Exception:  # noqa: BLE001 - Ray is gone or the station is stopping: nothing more to free
        pass
