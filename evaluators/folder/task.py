"""A research task from a folder (docs/tasks.md): the submission runs, then the task's scorer judges it.

Two sandboxed runs through the station's executor, never sharing a process or a writable file:

1. the submission, with the task's data/ read-only and an empty, writable outputs/;
2. the scorer (scorer_driver.py calling the folder's evaluate.py, or an OpenEvolve evaluator.py),
   with the task folder (private/ included), a copy of the submission's regular output files
   and what its function returned, all read-only.

The submission never sees the task folder: the executor hides it, and shows only data/. So it
cannot read private/ or import the scorer, and anything it leaves behind (a link, a process, a
later write) cannot reach the copy the scorer reads. Only the scorer's small answer comes back.

A scorer that crashes, hangs, or answers without a finite score raises ScorerFailure: the
station records a scorer failure, alerts the operator and charges the agent nothing.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import stat
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from station.run_types import Mount, RunResult, RunSpec

from ..base import Baseline, ScorerFailure, Task, Verdict, register
from .layout import TaskFolder, read_folder

DRIVER = Path(__file__).with_name("scorer_driver.py")
DETAILS_MAX_CHARS = 4000
METRICS_MAX = 50


@register("folder")
class FolderTask(Task):
    """`research.tasks: [{folder: path}]` is the evaluator "folder" with params {path: ...}."""

    def __init__(self, path: str) -> None:
        folder = read_folder(path)
        self.folder: TaskFolder = folder
        settings = folder.settings
        self.title, self.description = settings.title, settings.description or settings.title
        self.mode, self.entry = settings.submission.mode, settings.submission.entry
        self.filename = settings.submission.filename
        resources = settings.resources
        self.timeout_s, self.memory_mb = resources.timeout_s, resources.memory_mb
        if folder.format == "openevolve":  # the candidate program runs inside the evaluator's own run
            self.mode, self.entry, self.filename = "function", "evaluate(program_path) of evaluator.py", "program.py"
            self.timeout_s, self.memory_mb = settings.scorer.timeout_s, settings.scorer.memory_mb
        self.num_cpus, self.num_gpus = resources.cpus, resources.gpus
        self.display_precision = settings.display_precision
        self.metric_formats = dict(settings.metrics)

    # -- what agents read ----------------------------------------------------------------------
    def spec(self) -> str:
        return f"{self.folder.statement.rstrip()}\n\n{self._contract()}"

    def _contract(self) -> str:
        s = self.folder.settings
        better = "higher is better" if s.higher_is_better else "lower is better"
        if self.folder.format == "openevolve":
            run = (
                f"Submit a complete Python program (it replaces the task's initial program). The task's "
                f"evaluator runs it and measures it; its `{s.scorer.metric}` is the score ({better})."
            )
        elif self.mode == "function":
            run = (
                f"Submit a Python file (`{self.filename}`) defining `{self.entry}()`, called with no arguments. "
                "What it returns (numbers, strings, lists, dicts, NumPy arrays) is handed to the task's scorer; "
                "files it writes under `outputs/` are handed over too."
            )
        else:
            run = (
                f"Submit a Python file (`{self.filename}`); the station runs `{self.entry}` in its working "
                "directory. The task's scorer reads the files it leaves under `outputs/`."
            )
        data = "The task's data is in `data/` (read-only). " if self.folder.data_dir else ""
        sign = (
            "" if s.higher_is_better else f" The leaderboard shows minus the {s.score_name}, so that higher is better."
        )
        limits = f"{self.timeout_s:g} s of wall-clock time, {self._memory()}, {self.num_cpus:g} CPU core(s)"
        limits += f", {self.num_gpus:g} GPU(s)" if self.num_gpus else ", no GPU"
        return (
            "## How submissions run and are scored\n"
            f"{run} {data}\n\n"
            f"The score is the {s.score_name} ({better}).{sign} It is computed by the task's own scorer in a "
            "separate sandbox, from what your run returned or left in `outputs/`: printing a score changes "
            "nothing. If the scorer rejects the result, you get its reason.\n\n"
            f"Limits per run: {limits}. Files kept between runs go under `storage/` (see the storage rules).\n"
        )

    def _memory(self) -> str:
        return f"{self.memory_mb} MB of memory" if self.memory_mb else "no memory cap"

    def baselines(self) -> list[Baseline]:
        return list(self.folder.baselines)

    def private_paths(self) -> list[Path]:
        return [self.folder.path]  # the whole folder: submissions see data/ only, through its mount

    def data_mounts(self) -> list[Mount]:
        data = self.folder.data_dir
        return [Mount(data, "data")] if data else []

    # -- the two runs ----------------------------------------------------------------------------
    def execute(
        self, executor: Any, code: str, *, mounts: list[Mount], label: str, cpu_only: bool = False
    ) -> RunResult:
        with tempfile.TemporaryDirectory(prefix=f"station-{label}-") as work:
            inputs, outputs, copied = Path(work, "inputs"), Path(work, "outputs"), Path(work, "outputs-copy")
            for folder in (inputs, outputs, copied):
                folder.mkdir()
            (inputs / self.filename).write_text(code, encoding="utf-8")
            if self.folder.format == "openevolve":
                ran = RunResult(status="ok")
            else:
                os.chmod(outputs, 0o777)  # the sandbox's own uid writes here
                writable = Mount(outputs, "outputs", writable=True)
                ran = executor.run(self.run_spec(code, mounts=[*mounts, writable], label=label, cpu_only=cpu_only))
                if ran.status != "ok":
                    return ran  # a crash or a timeout is the submission's own outcome
                _copy_regular_files(outputs, copied)
            with open(inputs / "value.pkl", "wb") as f:
                pickle.dump(ran.value, f)  # plain data, as the executor decoded it
            (inputs / "scorer.json").write_text(json.dumps(self._scorer_settings()), encoding="utf-8")
            judged = executor.run(self._scorer_spec(inputs, copied, f"{label}-score"))
        if judged.status == "system_error":
            return judged  # the machine failed, not the scorer: the station pauses as for any run
        if self.folder.format == "openevolve":
            return self._program_outcome(judged)
        if judged.status != "ok":
            trace = f"\n{judged.traceback}" if judged.traceback else ""
            raise ScorerFailure(f"the task's scorer failed: {judged.error}{trace}", ran)
        return replace(ran, value=judged.value, duration_s=ran.duration_s + judged.duration_s)

    @staticmethod
    def _program_outcome(judged: RunResult) -> RunResult:
        """An OpenEvolve evaluator runs the program inside its own run: a timeout, or an exception
        raised from the program's code, is the program's outcome (as in OpenEvolve)."""
        if judged.status == "timeout":
            return judged
        if judged.status == "ok" and isinstance(judged.value, dict) and judged.value.get("outcome") == "crashed":
            answer = judged.value
            return replace(
                judged, status="error", value=None, error=answer.get("message"), traceback=answer.get("traceback")
            )
        if judged.status != "ok":
            trace = f"\n{judged.traceback}" if judged.traceback else ""
            raise ScorerFailure(f"the task's evaluator failed: {judged.error}{trace}", judged)
        return judged

    def _scorer_settings(self) -> dict[str, Any]:
        folder = self.folder
        return {
            "format": folder.format,
            "scorer_file": folder.scorer_file,
            "filename": self.filename,
            "mode": self.mode,
            "metric": folder.settings.scorer.metric,
            "cascade": folder.cascade.enabled,
            "cascade_thresholds": list(folder.cascade.thresholds),
        }

    def _scorer_spec(self, inputs: Path, outputs: Path, label: str) -> RunSpec:
        scorer = self.folder.settings.scorer
        # an OpenEvolve evaluator runs the program too: its run has the task's limit (a config may override it)
        timeout = self.timeout_s if self.folder.format == "openevolve" else scorer.timeout_s
        return RunSpec(
            code=DRIVER.read_text(encoding="utf-8"),
            mode="function",
            entry="run_scorer",
            filename="station_scorer.py",
            mounts=[Mount(self.folder.path, "task"), Mount(outputs, "outputs"), Mount(inputs, "inputs")],
            timeout_s=timeout,
            cpu_seconds=math.ceil(timeout * max(1.0, self.num_cpus)),
            memory_mb=scorer.memory_mb,
            num_cpus=self.num_cpus if self.folder.format == "openevolve" else 1.0,
            label=label,
        )

    # -- the scorer's answer -------------------------------------------------------------------
    def score(self, result: RunResult) -> Verdict:
        answer = result.value
        if not isinstance(answer, dict) or answer.get("outcome") not in ("scored", "rejected"):
            raise ScorerFailure(f"the task's scorer gave no answer the station can read ({_shown(answer)})", result)
        if answer["outcome"] == "rejected":
            return Verdict(False, details=f"Rejected by the task's scorer: {_clip(str(answer.get('message')))}")
        value = answer.get("score")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ScorerFailure(f"the task's scorer returned a score that is not a finite number: {value!r}", result)
        metrics = answer.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise ScorerFailure(f"the task's scorer returned metrics that are not a dict: {_shown(metrics)}", result)
        shown_metrics: dict[str, float | None] = {}
        for name, number in list(metrics.items())[:METRICS_MAX]:
            ok = isinstance(number, (int, float)) and not isinstance(number, bool)
            shown_metrics[str(name)[:60]] = float(number) if ok else None
        s = self.folder.settings
        if not s.higher_is_better:
            shown_metrics.setdefault(s.score_name, float(value))
        details = _clip(str(answer.get("details") or f"{s.score_name} = {value:.{self.display_precision}f}"))
        return Verdict(True, float(value) if s.higher_is_better else -float(value), details, shown_metrics)


def _copy_regular_files(source: Path, target: Path) -> None:
    """Copy what the submission left: directories and regular files only, never following a link,
    so a link planted in outputs/ cannot make the scorer read its own private files as an answer."""
    for root, dirs, files in os.walk(source, followlinks=False):
        here = Path(root)
        into = target / here.relative_to(source)
        for name in dirs:
            if not (here / name).is_symlink():
                (into / name).mkdir(exist_ok=True)
        for name in files:
            path = here / name
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # a link, a socket, a fifo: not an output
            with os.fdopen(fd, "rb") as f:
                if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    with open(into / name, "wb") as out:
                        shutil.copyfileobj(f, out)


def _clip(text: str) -> str:
    return text if len(text) <= DETAILS_MAX_CHARS else text[:DETAILS_MAX_CHARS] + " [...]"


def _shown(value: Any) -> str:
    return _clip(repr(value))[:300]
