"""What a run is and what it returns: the plain types executors and evaluators share.

A leaf module (it imports nothing of the project), so research tasks can describe runs and
read results without depending on the engine or on any executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

RunStatus = Literal["ok", "error", "timeout", "system_error"]


@dataclass(frozen=True)
class Mount:
    """A host directory shown to the code at `target` (relative to its working directory)."""

    source: Path
    target: str  # e.g. "storage/shared"
    writable: bool = False


CHANNEL_ENV = "STATION_CHANNEL"  # names, in a run with a companion, the folder both programs share


@dataclass(frozen=True)
class Companion:
    """A second program in a run's sandbox, kept apart from the main code (docs/sandbox.md,
    "A program apart from its evaluator"): a root of its own (the OS, the interpreter, its own
    scratch dir holding `code` and its own `mounts`, none of the main code's), a uid of its own
    where runs get uids, and one channel folder both programs see, named by the environment
    variable CHANNEL_ENV in each (the companion may write there, the main code may only read and
    connect). It starts before the main code, shares its limits and is killed when the main code
    ends. It runs an OpenEvolve or ShinkaEvolve program apart from the evaluator that scores it."""

    code: str  # a Python script, run as `python -s <filename>` in the companion's scratch dir
    filename: str = "companion.py"
    mounts: tuple[Mount, ...] = ()  # relative to the companion's scratch dir


@dataclass
class RunSpec:
    code: str
    mode: Literal["function", "command"] = "function"
    entry: str = "main"  # function mode: a zero-argument function; command mode: a shell command
    filename: str = "submission.py"
    mounts: list[Mount] = field(default_factory=list)
    # Limits (docs/sandbox.md, "Resource caps"). Passing one kills the run: status "error", with
    # a message naming the cap and its value.
    timeout_s: float = 600.0  # wall clock; the whole process tree is killed when it passes
    cpu_seconds: int | None = None  # all processes together (default: timeout_s x num_cpus, rounded up)
    memory_mb: int | None = 4096  # RLIMIT_AS, per process
    max_processes: int = 64  # processes and threads at once
    max_file_mb: int = 256  # RLIMIT_FSIZE, per file
    max_scratch_mb: int = 1024  # the scratch and results dirs together
    max_storage_mb: int = 1024  # each writable storage dir
    max_files: int = 50_000  # entries in the scratch dir, and in each writable storage dir
    max_result_mb: int = 256  # what the run returns (function mode), checked before it is loaded
    max_output_bytes: int = 2_000_000  # captured per stream (head and tail kept)
    num_cpus: float = 1.0  # Ray scheduling; local runs get as many BLAS threads
    num_gpus: float = 0.0  # 0: GPUs are hidden (CUDA_VISIBLE_DEVICES="")
    env: dict[str, str] = field(default_factory=dict)  # trusted extras from the task
    label: str = "run"  # e.g. "eval-17-v1", for logs and scratch names
    companion: Companion | None = None  # a second program kept apart from this one (see Companion)
    # (who this run's writes to shared storage are charged to, their share in MB): in a writable
    # storage dir whose station keeps a ledger beside it (docs/sandbox.md, "Shares of storage")
    storage_share: tuple[str, int] | None = None
    # bring up the loopback of the run's own network namespace (a program that serves its own
    # programs on 127.0.0.1); nothing outside the namespace becomes reachable (docs/sandbox.md)
    loopback: bool = False


@dataclass
class RunResult:
    status: RunStatus  # ok: the entry point returned (function) or exited 0 (command)
    value: Any = None  # function mode: the returned value as plain data
    stdout: str = ""  # head and tail, with a note of what was cut
    stderr: str = ""
    exit_code: int | None = None
    error: str | None = None  # one line: "ZeroDivisionError: division by zero", "Execution timed out after 60 s"
    traceback: str | None = None  # the submission's traceback (function mode), for authors and the debugger
    duration_s: float = 0.0
    isolation: list[str] = field(default_factory=list)  # what was in force, e.g. ["net-namespace", "uid 60001"]

    @property
    def crashed(self) -> bool:
        """The code itself failed (an exception, a non-zero exit): what the debugger may fix."""
        return self.status == "error"
