"""Executors: where and how submitted code runs (spec research §2.5-2.6, docs/sandbox.md).

`create_executor(config)` builds the one the station's `research.executor` section names.
Ray is imported only by ray_executor.py, and only when a RayExecutor is used.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..run_types import Mount, RunResult, RunSpec, RunStatus
from .base import Executor
from .local import LocalExecutor

__all__ = ["Executor", "LocalExecutor", "Mount", "RunResult", "RunSpec", "RunStatus", "create_executor"]


def create_executor(config: Any, hide: list[Path] | tuple = (), scratch_base: str | Path | None = None) -> Executor:
    """`config`: a station.config.ExecutorConfig. `hide`: host dirs the code must not see (the
    station dir); `scratch_base`: where run dirs go (default: the system temp dir)."""
    if config.kind == "local":
        return LocalExecutor(scratch_base=scratch_base, hide=hide)
    if config.kind == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(config, hide=hide, scratch_base=scratch_base,
                           queue_timeout_s=config.ray_queue_timeout_s)
    raise ValueError(f"unknown executor kind {config.kind!r}")
