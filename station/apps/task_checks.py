"""The checks a task folder passes before a station runs it (docs/tasks.md, "Checking a folder").

`station task check` prints them. `station init` and `station run` run the same checks for every
folder task of their config before the first tick, and refuse, in one line, a task that cannot
work: a scorer that cannot be imported or lacks its entry points, a baseline (the initial program of
an OpenEvolve or ShinkaEvolve folder) that does not score. What could not be checked because the
machine failed (a system error) decides nothing: the station's own runs meet it and pause.

A station remembers the folders that passed (task_checks.json beside its database: a fingerprint
of each folder's files and limits), so a resumed `run` checks a folder again only when it changed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluators.folder.layout import MAX_CHECKED_ENTRIES, TaskFolder, exposure_warnings
from evaluators.folder.task import MEAN_NOTE_START, FolderTask, NotChecked
from rooms.research.standalone import evaluate
from station.apps.report import shown
from station.core.terminal_text import clean

RECORD = "task_checks.json"  # in the station's directory: {task id: fingerprint of the folder that passed}
Step = Callable[[str], AbstractContextManager[Any]]  # wraps a long step (a live "N s" line on a terminal)


class TaskCannotWork(ValueError):
    """A folder task failed its checks: one line naming the task and the problem."""


@dataclass
class TaskCheck:
    lines: list[str] = field(default_factory=list)  # the report, in order, as `task check` prints it
    problems: list[str] = field(default_factory=list)  # why the task cannot work
    warnings: list[str] = field(default_factory=list)  # worth knowing, not failing
    scores: list[str] = field(default_factory=list)  # "title: score" of each baseline
    not_run: str = ""  # the machine could not run a check: no verdict on the task

    def say(self, line: str, out: Callable[[str], None]) -> None:
        self.lines.append(line)
        out(line)


def check_task(
    task: FolderTask,
    executor: Any,
    *,
    baselines: bool = True,
    twice: bool = False,
    out: Callable[[str], None] = lambda line: None,
    step: Step = lambda what: nullcontext(),
) -> TaskCheck:
    """Import the scorer in its sandbox and look for its entry points, then evaluate the baselines
    once (`twice`: the first one twice, warning when its score differs). Each line of the report goes
    to `out` as soon as it is known."""
    check, layout = TaskCheck(), task.folder
    read = f"{layout.format} format" + (f", {layout.reference.describe()}" if layout.reference else "")
    check.say(f"task folder {layout.path} ({read}): '{task.title}'", out)
    if layout.format == "openevolve":
        check.say(config_line(layout), out)
    for note in task.config_notes():  # a reference-format folder's constant_config.yaml
        check.say(note, out)
    for warning in exposure_warnings(layout.path):
        check.warnings.append(warning)
        check.say(f"warning: {warning}", out)
    try:
        with step("importing the scorer in its sandbox"):
            problem = task.check_scorer(executor)
    except (NotChecked, OSError) as err:
        check.not_run = f"the scorer's sandbox could not be started: {_first_line(str(err))}"
        check.say(f"scorer: not checked: {check.not_run}", out)
        return check
    entry = ", ".join(f"{name}()" for name in layout.entry_points)
    check.say(f"scorer: {problem}" if problem else f"scorer: {layout.scorer_file} imports and defines {entry}", out)
    if problem:
        check.problems.append(problem)
    isolation = task.program_isolation()
    if isolation:  # an OpenEvolve or ShinkaEvolve program: what keeps it from its evaluator
        check.say(f"program: {isolation}", out)
    if problem is None and baselines and task.baselines():
        _check_baselines(task, executor, check, twice, out, step)
    if not task.baselines():
        check.say("no baselines (baselines/*.py): the leaderboard starts empty", out)
    return check


def _check_baselines(
    task: FolderTask, executor: Any, check: TaskCheck, twice: bool, out: Callable[[str], None], step: Step
) -> None:
    results = []
    try:
        with step("evaluating baselines"):
            for baseline in task.baselines():
                try:
                    results.append((baseline, evaluate(task, baseline.code, executor)))
                except ValueError as err:  # refused before it ran (no code, the task's validation)
                    check.problems.append(f"its baseline {baseline.title!r} is refused: {_first_line(str(err))}")
    except OSError as err:  # the executor's scratch folder: the machine's fault
        check.not_run = f"the baselines could not be run: {_first_line(str(err))}"
        check.say(f"baselines: not run: {check.not_run}", out)
        return
    check.say("baselines:", out)
    for problem in check.problems:
        check.say(f"  {problem}", out)
    for baseline, r in results:
        if r["status"] == "system_error":
            check.not_run = f"{baseline.title!r} could not be run: {_first_line(r.get('error') or '?')}"
            check.say(f"  {baseline.title}: not run ({check.not_run})", out)
            continue
        if not r["success"]:
            why = _first_line(r.get("error") or r.get("details") or "?")
            check.problems.append(f"its baseline {baseline.title!r} does not score ({r['status']}: {why})")
            check.say(f"  {baseline.title}: n.a.  ({r['status']}: {why})", out)
            continue
        check.scores.append(f"{baseline.title}: {shown(r['score'])}")
        check.say(f"  {check.scores[-1]}", out)
        note = _first_line(r.get("details") or "")
        if note.startswith(MEAN_NOTE_START):  # OpenEvolve's mean made the score: said loudly
            check.warnings.append(note)
            check.say(f"  warning: {note}", out)
    if not results:
        return
    first, result = results[0]
    if twice and result["success"]:
        with step(f"evaluating {first.title!r} again"):
            again = evaluate(task, first.code, executor)
        warning = _unsteady(first.title, result, again)
        if warning:
            check.warnings.append(warning)
            check.say(f"warning: {warning}", out)


def _unsteady(title: str, first: dict[str, Any], second: dict[str, Any]) -> str:
    """Why the same program scoring twice worries ("" when both runs agree exactly)."""
    if second["status"] == "system_error" or (second["success"] and second["score"] == first["score"]):
        return ""
    then = shown(second["score"]) if second["success"] else f"n.a. ({second['status']})"
    return (
        f"{title!r} scored {shown(first['score'])}, then {then} when run again unchanged: the evaluator is "
        "not deterministic (an unseeded random generator, timing), so agents will take its noise for progress "
        "or for regress. Seed its randomness, or average enough runs that the spread is below the "
        "improvements that matter."
    )


def config_line(layout: TaskFolder) -> str:
    """Which OpenEvolve config was read, among the folder's configs."""
    if not layout.config_file:
        return "config: none (OpenEvolve's defaults: cascade thresholds 0.5, 0.75, 0.9)"
    others = [name for name in layout.configs if name != layout.config_file]
    return f"config: {layout.config_file}" + (
        f" (also here: {', '.join(others)}; task.yaml `config: NAME` reads another)" if others else ""
    )


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:500]


# -- before a station's first tick ---------------------------------------------------------------
def check_station_tasks(
    tasks: dict[str, Any],
    executor_config: Any,
    baselines: dict[str, bool],
    *,
    remembered: dict[str, str],
    refusal: str,
    out: Callable[[str], None],
) -> dict[str, str]:
    """Check each folder task among `tasks` whose fingerprint is not `remembered` as checked; the
    fingerprints of those that pass (or were remembered). Raises TaskCannotWork, one line, on the first
    that fails; `refusal` says what that means here ("nothing was created")."""
    from station.executors import create_executor

    passed: dict[str, str] = {}
    for number, task in tasks.items():
        if not isinstance(task, FolderTask):
            continue
        mark = fingerprint(task)
        if remembered.get(number) == mark:
            passed[number] = mark
            continue
        executor = create_executor(executor_config, hide=task.private_paths(), scratch_base=executor_config.scratch_dir)
        try:
            check = check_task(task, executor, baselines=baselines.get(number, True))
        finally:
            executor.close()
        if check.problems:
            raise TaskCannotWork(
                clean(
                    f"research task {number} ({task.folder.path}) cannot work: {_first_line(check.problems[0])}; "
                    f"{refusal} (`station task check {task.folder.path}` shows every check)"
                )
            )
        out(_summary(number, check))
        for warning in check.warnings:
            out(clean(f"task {number}: warning: {warning}"))
        if not check.not_run:
            passed[number] = mark
    return passed


def _summary(number: str, check: TaskCheck) -> str:
    if check.not_run:
        return clean(f"task {number}: not checked ({check.not_run}); the station's own runs will say more")
    scores = f"; baselines: {', '.join(check.scores)}" if check.scores else ""
    return clean(f"task {number}: checked (its scorer imports{scores})")


def fingerprint(task: FolderTask) -> str:
    """What a folder's check depends on: its files (names, sizes, times of change) and the task's limits."""
    digest = hashlib.sha256(repr((str(task.folder.path), task.timeout_s, task.memory_mb)).encode())
    for line in _entries(task.folder.path):
        digest.update(line.encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _entries(folder: Path) -> Iterator[str]:
    for count, (root, dirs, files) in enumerate(os.walk(folder)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            try:
                info = os.stat(Path(root, name), follow_symlinks=False)
            except OSError:
                continue
            yield f"{Path(root, name).relative_to(folder)}\0{info.st_size}\0{info.st_mtime_ns}\n"
        if count > MAX_CHECKED_ENTRIES:
            return


def remembered(directory: Path) -> dict[str, str]:
    try:
        found = json.loads((directory / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def remember(directory: Path, passed: dict[str, str]) -> None:
    (directory / RECORD).write_text(json.dumps(passed, indent=1) + "\n", encoding="utf-8")


def check_folder_tasks(config: Any, directory: Path, refusal: str, out: Callable[[str], None]) -> dict[str, str]:
    """The checks of `station task check` for each folder task of `config`, before its first tick
    (`station init`, `station run`, the web viewer's run): a task that cannot work is refused in one
    line (TaskCannotWork, a ValueError). A folder that passed for the station at `directory` and has
    not changed since is not checked again. The fingerprints of the folders that passed."""
    from rooms.research.config import ResearchConfig
    from rooms.research.tasks import load_tasks

    research = config.section(ResearchConfig)
    tasks = load_tasks(research)
    if not tasks:
        return {}
    return check_station_tasks(
        tasks,
        research.executor,
        {str(number): entry.baselines for number, entry in enumerate(research.tasks, 1)},
        remembered=remembered(directory),
        refusal=refusal,
        out=out,
    )


def remember_checks(directory: Path, passed: dict[str, str]) -> None:
    if passed:
        remember(directory, passed)
