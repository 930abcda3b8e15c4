"""The Evaluator protocol: what a research task declares, and how its results are scored.

A task says what agents read (its spec), how a submission is run (entry point, resources,
timeout) and how the returned data is scored. Scoring runs in the trusted parent, from the
plain data the sandbox returned; evaluators never see the engine or the store.
"""

from __future__ import annotations

import importlib
import io
import math
import numbers
import pkgutil
import random
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from station.core.registry import PLUGINS, Registry
from station.core.run_types import Mount, RunResult, RunSpec


@dataclass
class Verdict:
    """The evaluator's judgement of one run. Higher score (or sort key) is always better."""

    success: bool
    score: float | None = None  # None when success is false (shown as n.a.)
    details: str = ""  # one paragraph for the author
    metrics: dict[str, float | None] = field(default_factory=dict)  # secondary metrics, raw values
    sort_key: tuple[float, ...] | None = None  # compared only within one task; default (score,)
    # what the viewer draws for this run (circles, learning curves, ...): plain JSON data only
    figure: dict[str, Any] | None = None
    # the score of each seed, when the score is their mean (an external evaluation's trials)
    samples: list[float] | None = None
    # the verified construction and its SHA-256 (evaluators/certificate.py), when the scorer gives one
    certificate: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.success:
            self.score, self.sort_key = None, None  # a failed verdict never keeps a number (spec §9.10)
            self.certificate = None  # nor a certificate: nothing was verified
        elif self.score is None or not math.isfinite(self.score):
            raise ValueError("a successful verdict needs a finite score")

    def to_payload(self) -> dict[str, Any]:
        payload = {
            "success": self.success,
            "score": self.score,
            "details": self.details,
            "metrics": dict(self.metrics),
            "sort_key": list(self.sort_key) if self.sort_key else None,
        }
        if self.figure is not None:  # absent otherwise, so that payloads without one stay as recorded
            payload["figure"] = self.figure
        if self.samples is not None:
            payload["samples"] = list(self.samples)
        if self.certificate is not None:
            payload["certificate"] = self.certificate
        return payload


def figure_number(value: Any, digits: int = 6) -> float | None:
    """A finite float rounded to `digits` significant digits for a figure (small payloads), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # never strings or None
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond floats
        return None
    return float(f"{number:.{digits}g}") if math.isfinite(number) else None


def numbers_within(value: Any, limit: int) -> bool:
    """Whether `value` (a number, an array, or lists and tuples of them) holds at most `limit` numbers
    in all: counted without building anything, and given up as soon as the count passes `limit`. A
    scorer asks it before np.asarray, which would build whatever size a result's nesting spells
    (one array referred to a thousand times is a thousand arrays)."""
    left = limit
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            if len(item) > left:
                return False
            stack.extend(item)
        else:
            left -= int(getattr(item, "size", 1))
            if left < 0:
                return False
    return True


class ScorerFailure(Exception):
    """The task's own scorer broke (it crashed, hung, or gave no finite score): a fault of the task,
    never of the submission. The station records it as such, alerts the operator, charges nobody.
    `result`: the submission's own run, whose logs are kept."""

    def __init__(self, message: str, result: RunResult | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class Baseline:
    """A submission the station evaluates at start-up, authored by `System` and visible to all."""

    title: str
    tags: tuple[str, ...]
    abstract: str
    code: str


@dataclass(frozen=True)
class ExternalPlan:
    """How a task evaluates a submission externally, as the paper's tables were made: one run of
    the submission per task in `runs` (the same task again, or one per held-out dataset; a single
    run when one evaluation runs every seed itself), on data the station's internal evaluation
    never scored where the task has such data. `protocol`: one line for the user on what differs
    from the internal evaluation."""

    runs: tuple[Task, ...]
    protocol: str


class Task:
    """A research task. Subclasses fill in the class attributes and `score`."""

    kind: str = "task"  # the registry name, e.g. "circle_packing"
    title: str = ""
    description: str = ""  # one line
    mode: Literal["function", "command"] = "function"
    entry: str = "main"  # function name (function mode) or shell command (command mode)
    filename: str = "submission.py"
    timeout_s: float = 600.0
    memory_mb: int | None = 4096
    max_processes: int = 64
    # disk caps of each run (docs/sandbox.md, "Resource caps"): a task with big data raises them
    max_scratch_mb: int = RunSpec.max_scratch_mb
    max_storage_mb: int = RunSpec.max_storage_mb
    max_files: int = RunSpec.max_files
    max_result_mb: int = RunSpec.max_result_mb
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    # the scoring process's limits (scoring_process.py): what a submission's result may cost the scorer
    scorer_memory_mb: int = 4096  # its address space (RLIMIT_AS)
    scorer_timeout_s: float = 300.0  # per result, its first scoring (imports, compilation) included
    display_precision: int = 4
    metric_formats: dict[str, str] = {}  # secondary metric name -> format spec (".3f")

    def spec(self) -> str:
        """The markdown agents read with `read <task id>`."""
        raise NotImplementedError

    def baselines(self) -> list[Baseline]:
        return []

    @classmethod
    def scripted_submission(cls, shown_title: str, seen: Any, rng: random.Random) -> dict[str, str] | None:
        """The offline scripted researcher's play for this task (rooms/research/plays.py): what it
        submits when the task table shows this task as `shown_title`, from what it sees (`seen.prompt`,
        `seen.tick`, and `seen.notes`, its own notes kept across turns). Keys: title, tags, abstract,
        content. None: it has no play here and reads the task statement instead."""
        return None

    @classmethod
    def new_station_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The parameters a new station records: `params`, with the new default of any parameter whose
        default changed (a station made before stored no such key, and keeps the old default's meaning)."""
        return params

    def prepare(self, say: Callable[[str], None]) -> None:
        """Build what scoring needs (data, normalization bounds) before a station's first tick, so
        that no agent's evaluation pays for it; `say(step)` reports progress. Quick once done."""

    def external(self, seeds: int | None = None) -> ExternalPlan:
        """The external evaluation (`station external`). Here: the internal evaluation again, `seeds`
        times (default once: a task whose score is deterministic, like circle packing in the paper).
        A task with a test split or seeds of its own overrides it."""
        runs = seeds or 1
        if runs < 1:
            raise ValueError("seeds must be at least 1")
        return ExternalPlan(
            (self,) * runs, "the internal evaluation, run again" + (f" {runs} times" if runs > 1 else "")
        )

    def warm_up(self, say: Callable[[str], None]) -> None:
        """Pay the scorer's first-call costs (imports, JIT compilation) in the process that will
        score, before the station's first tick, so that the first evaluation takes no longer than
        later ones. After `prepare`; `say(step)` reports progress."""

    def validate_code(self, code: str) -> str | None:
        """A reason to refuse the code before it runs, or None."""
        return None

    def score(self, result: RunResult) -> Verdict:
        """Judge a run that ended with status "ok" (the parent handles crashes and timeouts). It runs
        in a scoring process of its own (scoring_process.py), so the task must pickle. Check every
        type and shape of `result.value` before building anything from it: a malformed or oversized
        result is an invalid Verdict, the submission's fault; any exception raised here counts as a
        ScorerFailure, the task's."""
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        """Trusted environment variables the run needs (never secrets)."""
        return {}

    def data_mounts(self) -> list[Mount]:
        """Read-only task data shown to every run (e.g. a dataset under storage/system/)."""
        return []

    def private_paths(self) -> list[Path]:
        """Host paths submitted code must never see (held-out labels, test data)."""
        return []

    def program(self, code: str) -> str:
        """The program actually run: the submission, plus whatever driver the task appends."""
        return code

    def run_spec(self, code: str, *, mounts: list[Mount], label: str, cpu_only: bool = False) -> RunSpec:
        """How one submission runs: the task's entry, limits and data, with the caller's storage mounts."""
        # CPU time adds up over threads and processes: a run may use all its cores for the whole wall clock.
        cpu_seconds = math.ceil(self.timeout_s * max(1.0, self.num_cpus))
        return RunSpec(
            code=self.program(code),
            mode=self.mode,
            entry=self.entry,
            filename=self.filename,
            mounts=[*mounts, *self.data_mounts()],
            timeout_s=self.timeout_s,
            cpu_seconds=cpu_seconds,
            memory_mb=self.memory_mb,
            max_processes=self.max_processes,
            max_scratch_mb=self.max_scratch_mb,
            max_storage_mb=self.max_storage_mb,
            max_files=self.max_files,
            max_result_mb=self.max_result_mb,
            num_cpus=self.num_cpus,
            num_gpus=0.0 if cpu_only else self.num_gpus,
            env=self.env(),
            label=label,
        )

    def execute(
        self, executor: Any, code: str, *, mounts: list[Mount], label: str, cpu_only: bool = False
    ) -> RunResult:
        """Run one submission to its end: one sandboxed run here; training tasks run several, folder
        tasks a second one for their scorer. May raise ScorerFailure."""
        return executor.run(self.run_spec(code, mounts=mounts, label=label, cpu_only=cpu_only))


# Tasks by name: those in evaluators/, and any of a package listed under the `station.plugins` entry points.
TASKS: Registry[type[Task]] = Registry("research task", plugins=PLUGINS)
SCRIPTED_TYPO_RATE = 0.12  # how often a scripted submission holds a slip the debugger can mend


def register(kind: str) -> Callable[[type[Task]], type[Task]]:
    """Register a task class under `kind`, the name configs give as `research.tasks[].evaluator`."""

    def mark(cls: type[Task]) -> type[Task]:
        cls.kind = kind
        return TASKS.register(kind)(cls)

    return mark


def _import_task_modules() -> None:
    """Import every task module, so that its `@register` runs: `evaluators/<name>.py`, or
    `evaluators/<name>/task.py` in a package. A new task is a new module, and nothing else lists it."""
    here = Path(__file__).parent
    for info in pkgutil.iter_modules([str(here)]):
        if not info.ispkg:
            importlib.import_module(f"{__package__}.{info.name}")
        elif (here / info.name / "task.py").exists():
            importlib.import_module(f"{__package__}.{info.name}.task")


def task_classes() -> list[type[Task]]:
    """Every registered task class, in registration order."""
    _import_task_modules()
    return [TASKS.get(name) for name in TASKS.names()]


def create_task(kind: str, params: dict[str, Any] | None = None) -> Task:
    """A task from its registry name and parameters; a clear error for unknown names or bad params."""
    _import_task_modules()
    if kind not in TASKS:
        raise ValueError(f"unknown research task {kind!r}; known: {', '.join(sorted(TASKS.names()))}")
    try:
        return TASKS.get(kind)(**(params or {}))
    except TypeError as err:
        raise ValueError(f"research task {kind!r}: bad parameters {params!r} ({err})") from None


def new_station_params(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """What a new station records as the parameters of task `kind` (`Task.new_station_params`); an
    unknown kind's are left as given (creating the task names the problem)."""
    _import_task_modules()
    return TASKS.get(kind).new_station_params(params) if kind in TASKS else params


def has_real_code(code: str) -> bool:
    """False when nothing but comments, docstrings and blank lines is left (spec research §1.4.8)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return bool(code.strip())  # let the run report the syntax error
    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENDMARKER,
        tokenize.ENCODING,
    }
    meaningful = [t for t in tokens if t.type not in skip]
    return any(t.type != tokenize.STRING for t in meaningful)
