"""The Executor protocol: where and how a piece of untrusted code runs.

A `RunSpec` says what to run (a submission's source and its entry point), what it may see
(storage mounts) and its limits; an executor runs it in a sandbox and returns a `RunResult`
with the entry point's value as plain data (numbers, strings, lists, dicts and numeric numpy
arrays), never an object the submission built. Scoring happens in the trusted parent from
that value (evaluators/), never from anything the code printed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from station.core.run_types import RunResult, RunSpec


class Executor(Protocol):
    name: str
    on_progress: Callable[[str, str], None] | None  # (run label, what its harness reported)

    def run(self, spec: RunSpec) -> RunResult:
        """Run one submission to its end (blocking; safe to call from several threads)."""

    def describe(self) -> str:
        """One line for the operator: where runs go and which isolation is in force."""

    def close(self) -> None:
        """Release what the executor holds (a Ray connection, ...)."""
