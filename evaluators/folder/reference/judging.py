"""How the station runs and scores a reference-format task (FolderTask hands over to these for a
folder that layout.read_folder found in that format; docs/tasks.md).

Up to three sandboxed runs per evaluation, none sharing a process or a writable file:

1. the evaluator's validate_submission_code on the submitted source, in the scorer's sandbox,
   when the evaluator defines it: a refusal rejects the submission before any of it has run;
2. the submission, as a native folder's runs (function mode: the expected function's return value,
   as data; command mode: the evaluator's command, its printed output kept), with the folder's
   research/storage/system shown read-only at storage/system, where the reference puts it;
3. the evaluator's evaluate_submission on that value or output, in the scorer's sandbox, with the
   stand-in for the reference's `station` package (reference_scorer.py).
"""

from __future__ import annotations

import math
import pickle
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from station.core.run_types import Mount, RunResult
from station.executors.runfiles import work_base, work_folder

from ...base import ScorerFailure, Verdict
from .folder import APPLIED, ReferenceTask

DETAILS_MAX_CHARS = 4000
METRICS_MAX = 50
EVAL_ID = re.compile(r"^eval-(\d+)-")


def scorer_settings(reference: ReferenceTask) -> dict[str, Any]:
    """What reference_scorer.py needs besides the common scorer.json keys."""
    contract = reference.contract
    read = {"mode": contract.mode, "filename": contract.filename}
    read.update({"function": contract.function} if contract.mode == "function" else {"command": contract.command})
    return {"class_name": reference.class_name, "config": reference.config, "contract": read}


def execute(task: Any, executor: Any, code: str, *, mounts: list[Mount], label: str, cpu_only: bool) -> RunResult:
    reference: ReferenceTask = task.folder.reference
    eval_id = (EVAL_ID.match(label) or [None, label])[1]
    with work_folder(work_base(executor), label) as work:
        inputs, empty = Path(work, "inputs"), Path(work, "outputs-copy")
        inputs.mkdir()
        empty.mkdir()
        (inputs / task.filename).write_text(code, encoding="utf-8")
        if reference.contract.validates:
            task._write_settings(inputs, action="validate", eval_id=eval_id)
            checked = _scorer_run(task, executor, inputs, empty, f"{label}-validate")
            if checked.status != "ok":
                return checked  # the machine failed
            if checked.value.get("outcome") != "valid":
                return RunResult(status="ok", value=checked.value)  # refused: scored as a rejection
        spec = task.run_spec(code, mounts=_with_system(task, mounts), label=label, cpu_only=cpu_only)
        if reference.contract.mode == "command":  # its runner imports the submission from the working dir
            spec = replace(spec, env={**spec.env, "PYTHONPATH": "."})
        ran = executor.run(spec)
        if ran.status != "ok":
            return ran  # a crash or a timeout is the submission's own outcome
        if reference.contract.mode == "function":
            with open(inputs / "value.pkl", "wb") as f:
                pickle.dump(ran.value, f)  # plain data, as the executor decoded it
        else:
            (inputs / "output.txt").write_text(ran.stdout or "", encoding="utf-8")
        task._write_settings(inputs, action="score", eval_id=eval_id)
        judged = _scorer_run(task, executor, inputs, empty, f"{label}-score", ran)
    if judged.status != "ok":
        return judged
    return replace(ran, value=judged.value, duration_s=ran.duration_s + judged.duration_s)


def _scorer_run(
    task: Any, executor: Any, inputs: Path, empty: Path, label: str, ran: RunResult | None = None
) -> RunResult:
    judged = executor.run(task._scorer_spec(inputs, empty, label))
    if judged.status == "system_error":
        return judged  # the machine failed, not the evaluator: the station pauses as for any run
    if judged.status != "ok" or not isinstance(judged.value, dict):
        trace = f"\n{judged.traceback}" if judged.traceback else ""
        raise ScorerFailure(f"the task's evaluator failed: {judged.error}{trace}", ran or judged)
    return judged


def _with_system(task: Any, mounts: list[Mount]) -> list[Mount]:
    """The submission's mounts, the folder's research/storage/system (when it has one) read-only at
    storage/system in place of the station's own system area."""
    system = task.folder.path / task.folder.reference.system_dir
    if not system.is_dir():
        return mounts
    return [*(m for m in mounts if m.target != "storage/system"), Mount(system, "storage/system")]


def score(task: Any, result: RunResult) -> Verdict:
    answer = result.value
    if not isinstance(answer, dict) or answer.get("outcome") not in ("reference", "rejected"):
        raise ScorerFailure(f"the task's evaluator gave no answer the station can read ({_clip(repr(answer))})", result)
    if answer["outcome"] == "rejected":
        return Verdict(False, details=_clip(f"Rejected by the task's evaluator: {answer.get('message')}"))
    text, metrics = _details(answer.get("details"))
    if not answer.get("success"):
        return Verdict(False, details=_clip(text or "The task's evaluator did not accept the result."))
    value = answer.get("score")
    if not _finite(value):
        raise ScorerFailure(
            f"the task's evaluator accepted the result with a score that is not a finite number: {_clip(repr(value))}",
            result,
        )
    key = answer.get("sort_key")
    if key is not None and not (isinstance(key, list) and key and all(_finite(k) for k in key)):
        raise ScorerFailure(
            f"the task's evaluator returned a sort key that is not a list of finite numbers: {_clip(repr(key))}", result
        )
    number = float(value)  # type: ignore[arg-type]  # _finite: a number
    shown = text or f"score = {number:.{task.display_precision}f}"
    return Verdict(True, number, _clip(shown), metrics, tuple(float(k) for k in key) if key else None)


def _details(details: Any) -> tuple[str, dict[str, float | None]]:
    """The evaluator's details as text for the author and secondary metrics: a dict's Message is the
    text, its numbers (and None) are metrics, its other entries are added to the text."""
    if not isinstance(details, dict):
        return str(details or ""), {}
    lines = [str(details.get("Message") or "")]
    metrics: dict[str, float | None] = {}
    for name, value in details.items():
        if name == "Message":
            continue
        if value is None or (_number(value) and len(metrics) < METRICS_MAX):
            metrics[name[:60]] = float(value) if _finite(value) else None
        else:
            lines.append(f"{name}: {value}")
    return "\n".join(line for line in lines if line), metrics


def metric_formats(formats: dict[str, str | None]) -> dict[str, str]:
    """The evaluator's metric formats as ours: integers ('d') are shown without decimals, as the
    station keeps every metric as a float; a format a float cannot take is left out."""
    ours = {}
    for name, spec in formats.items():
        spec = ".0f" if spec == "d" else spec
        try:
            if spec:
                format(1.5, spec)
                ours[name] = spec
        except ValueError:
            continue
    return ours


def contract(task: Any) -> str:
    """The section the station appends to the task's text: how a submission runs and is ranked."""
    reference: ReferenceTask = task.folder.reference
    c = reference.contract
    if c.mode == "function":
        run = (
            f"Submit a Python file defining `{c.function}()`, called with no arguments. What it returns is handed, "
            "as data, to the task's evaluator: None, numbers, strings, lists, tuples, dicts with string keys and "
            "NumPy arrays of numbers arrive as they were returned (NumPy scalars arrive as Python numbers); "
            "any other object is refused."
        )
    else:
        run = (
            f"Submit a Python file (saved as `{c.filename}`); the station runs `{c.command}` in its working "
            "directory, and what the command prints is handed to the task's evaluator."
        )
    system = task.folder.path / reference.system_dir
    files = " The task's own files are in `storage/system/` (read-only)." if system.is_dir() else ""
    check = (
        " The evaluator first checks the submitted source; if it refuses it, nothing of it runs and the "
        "evaluation fails with its reason."
        if c.validates
        else ""
    )
    limits = f"{task.timeout_s:g} s of wall-clock time, {task._memory()}, {task.num_cpus:g} CPU core(s)"
    limits += f", {task.num_gpus:g} GPU(s)" if task.num_gpus else ", no GPU"
    return (
        "## How submissions run and are scored\n"
        f"{run}{files}{check}\n\n"
        f"The task's evaluator ({reference.evaluator_file}) judges the result in a separate sandbox. When it "
        "accepts it, its score is recorded; when it gives a ranking key, the leaderboard ranks by that key "
        "(larger first: a task where lower scores are better ranks by minus the score, so read above which "
        "direction is better), else by the score, higher first. A result it does not accept counts as a failed "
        "evaluation, without a score (n.a.), with its reason.\n\n"
        f"Limits per run: {limits}. Files kept between runs go under `storage/` (see the storage rules).\n"
    )


def config_notes(reference: ReferenceTask) -> list[str]:
    """For `station task check`: what the folder's constant_config.yaml set here, and what it did not."""
    if not reference.config:
        return []
    notes = [
        f"constant_config.yaml {key} = {reference.config[key]!r} sets {path}"
        for key, path in _applied_keys(reference).items()
    ]
    notes += [
        f"constant_config.yaml {key} = {reference.config[key]!r} is the station's {setting} here (one value for "
        "the whole station): set it in the station's config"
        for key, setting in reference.station_wide.items()
    ]
    if reference.ignored:
        notes.append(f"constant_config.yaml keys ignored (no meaning in this station): {', '.join(reference.ignored)}")
    return notes


def _applied_keys(reference: ReferenceTask) -> dict[str, str]:
    return {key: path for key, path in APPLIED.items() if path in reference.applied and key in reference.config}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    try:
        return _number(value) and math.isfinite(float(value))
    except OverflowError:  # an int beyond floats
        return False


def _clip(text: str) -> str:
    return text if len(text) <= DETAILS_MAX_CHARS else text[:DETAILS_MAX_CHARS] + " [...]"
