"""Executors: where and how submitted code runs (spec research §2.5-2.6, docs/sandbox.md).

`create_executor(config)` builds the one the station's `research.executor` section names.
Ray is imported only by ray_executor.py, and only when a RayExecutor is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from station.core.plugins import EXECUTORS
from station.core.run_types import Mount, RunResult, RunSpec, RunStatus
from station.executors.base import Executor
from station.executors.local import LocalExecutor

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "Mount", "RunResult", "RunSpec", "RunStatus", "create_executor"]


# Ray is imported only when a station runs on it.


@EXECUTORS.register("local")
def _local(config: Any, hide: list[Path] | tuple, scratch_base: str | Path | None) -> Executor:
    return LocalExecutor(scratch_base=scratch_base, hide=hide)


EXECUTORS.lazy("ray", "station.executors.ray_executor:create")


def create_executor(config: Any, hide: list[Path] | tuple = (), scratch_base: str | Path | None = None) -> Executor:
    """`config`: a station.config.ExecutorConfig. `hide`: host dirs the code must not see (the
    station dir); `scratch_base`: where run dirs go (default: the system temp dir)."""
    return EXECUTORS.get(config.kind)(config, hide, scratch_base)
