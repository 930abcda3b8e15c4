"""The research coder's session for one evaluation (`research.mode: coder`, docs/coder.md).

An agent's instruction is implemented by a tool-using model (station/workers): it writes files
in a workspace of its own, runs commands in the sandbox, submits official attempts and finishes
with a report. The session is a path through recorded inputs like any evaluation's
(pipeline.py): model call n under `coder/<id>/turn/<n>`, each tool call's result under
`coder/<id>/tool/<turn>/<index>`, and official attempt k under `eval-run/<id>/<k>`, the very run
input a direct submission's version k would be, scored the same way. So the same walk serves the
evaluation worker (producing what is missing), the readiness check and the engine applying a
finished session, and a replay needs no model and no sandbox.

An attempt's code is recorded first (the tool call's input: the file as read from the
workspace, never through a link), then run: after a kill between the two the same code runs.
The coder's view is fixed at submission (`evaluations.sees_all`): the workspace is its only
writable place; its lineage's storage, the System folder and the records of the evaluations its
author could see are mounted read-only, and once the author was mature the shared storage and
the other lineages' storage too. The sandbox enforces that, not the prompt.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from station.core.model_api import Tool
from station.core.run_types import RunSpec
from station.executors.disk import DIR_FLAGS, FILE_FLAGS
from station.workers.sandbox_tools import SandboxTools, Surface
from station.workers.session import Fetch, ModelCall, Session, walk_session

from . import storage as rs
from .coder_report import MAX_REPORT_CHARS, SECTIONS, missing_sections
from .pipeline import Version, run_key
from .text import fence

WORKSPACE, RECORDS = "workspace", "records"
OUTPUT_TAIL_CHARS = 3_000  # of an attempt's output, read back by the coder
RunAttempt = Callable[[int, str], dict[str, Any]]  # (attempt, code) -> the run payload (worker._run)

ARGUMENTS = {  # the coder's own tools: name -> (argument, what it holds)
    "submit_attempt": ("path", "the program, e.g. workspace/solution.py"),
    "finish": ("report", "the Coder Report, in Markdown"),
}


def prefix(evaluation: int) -> str:
    return f"coder/{evaluation}"


def coder_dir(files: Path, evaluation: int) -> Path:
    """The coder's folders of one evaluation, under the station's files/."""
    return Path(files) / "coder" / str(evaluation)


@dataclass
class Outcome:
    """A finished coder session: its official attempts in order, the report and how it ended."""

    attempts: list[Version]
    report: str | None
    end: str  # finished / turn_limit / model_failed
    session: Session

    @property
    def versions(self) -> list[Version]:
        return self.attempts

    @property
    def reported(self) -> Version | None:
        return self.attempts[-1] if self.attempts else None


class CoderToolbox:
    """The sandbox tools plus `submit_attempt` and `finish`, dispatched by name. Built afresh for each
    walk: it counts the attempts the walk has passed."""

    def __init__(
        self,
        evaluation: int,
        sandbox: SandboxTools,
        workspace: Path,
        texts: Any,
        *,
        max_attempts: int,
        max_code_chars: int,
        run_attempt: RunAttempt | None,
    ) -> None:
        self.evaluation, self.sandbox, self.workspace, self.texts = evaluation, sandbox, workspace, texts
        self.max_attempts, self.max_code_chars, self.run_attempt = max_attempts, max_code_chars, run_attempt
        self.attempts: list[Version] = []

    def tools(self) -> list[Tool]:
        own = [
            Tool(
                name,
                self.texts.render(f"coder_tool_{name}", sections=", ".join(SECTIONS)),
                {"type": "object", "properties": {key: {"type": "string", "description": what}}, "required": [key]},
            )
            for name, (key, what) in ARGUMENTS.items()
        ]
        return [*self.sandbox.tools(), *own]

    def handle(self, turn: int, index: int, call: dict[str, Any], fetch: Fetch) -> dict[str, Any] | None:
        """Every call's result is recorded under its key (the viewer reads the session from them); an
        attempt's key holds its code, and its result is told from the run input it led to."""
        key = f"{prefix(self.evaluation)}/tool/{turn}/{index}"
        if call.get("name") == "submit_attempt":
            return self._submit(key, call, fetch)
        if call.get("name") == "finish":
            return fetch(key, "worker_tool", lambda: self._finish(call))
        return self.sandbox.handle(turn, index, call, fetch, prefix(self.evaluation))

    def _submit(self, key: str, call: dict[str, Any], fetch: Fetch) -> dict[str, Any] | None:
        path = (call.get("arguments") or {}).get("path")
        left = self.max_attempts - len(self.attempts)
        snapshot = fetch(key, "worker_tool", lambda: self.snapshot(path, left))
        if snapshot is None or snapshot.get("code") is None:
            return snapshot
        number = len(self.attempts) + 1
        code = snapshot["code"]

        def run() -> dict[str, Any]:
            if self.run_attempt is None:
                raise RuntimeError("this walk may not produce inputs")
            return self.run_attempt(number, code)

        result = fetch(run_key(self.evaluation, number), "eval_run", run)
        if result is None:
            return None
        self.attempts.append(Version(number, "coder", code, run_key(self.evaluation, number), result))
        return {"text": self.attempt_text(number, result), "error": not scored_attempt(result), "attempt": number}

    def snapshot(self, path: Any, left: int) -> dict[str, Any]:
        """The recorded input of an attempt: the file's text, or why no attempt is run."""
        if not isinstance(path, str) or not path.strip():
            return _error("submit_attempt needs `path`: the file of your workspace to run, e.g. workspace/solution.py")
        if left <= 0:
            return _error(self.texts.render("coder_attempts_left_none", max_attempts=self.max_attempts))
        try:
            code = read_workspace_file(self.workspace, path, self.max_code_chars)
        except ValueError as err:
            return _error(str(err))
        return {"text": f"the attempt runs {path} ({len(code):,} characters)", "error": False, "code": code}

    def attempt_text(self, number: int, result: dict[str, Any]) -> str:
        scored = scored_attempt(result)
        status = (
            "scored"
            if scored
            else {"timeout": "timed out", "invalid": "not valid"}.get(
                str(result.get("status")), f"failed ({result.get('status')})"
            )
        )
        score = f"Score: {result.get('score')!r} (computed by the station)" if scored else "No score."
        if result.get("details"):
            score += f"\nEvaluator: {str(result['details']).strip()}"
        output = "\n".join(s for s in (result.get("stdout") or "", result.get("stderr") or "") if s.strip())
        trace = result.get("traceback") or ""
        if trace and trace.strip() not in output:
            output = f"{output}\n{trace}".strip()
        return self.texts.render(
            "coder_attempt_result",
            attempt=number,
            max_attempts=self.max_attempts,
            status=status,
            score=score,
            error=f"Error: {result['error']}" if result.get("error") else "",
            output=tail(output, OUTPUT_TAIL_CHARS) or "(nothing)",
        )

    def _finish(self, call: dict[str, Any]) -> dict[str, Any]:
        report = (call.get("arguments") or {}).get("report")
        if not isinstance(report, str) or not report.strip():
            return _error("finish needs `report`: your Coder Report as Markdown text")
        if len(report) > MAX_REPORT_CHARS:
            return _error(f"the report is {len(report):,} characters long; at most {MAX_REPORT_CHARS:,} are taken")
        missing = missing_sections(report)
        if missing:
            return _error(
                "the report lacks the section(s) " + ", ".join(missing) + "; give each a heading line of its "
                "name and call finish again"
            )
        return {"text": "Report received; the session is over.", "error": False, "final": True, "report": report}


def _error(text: str) -> dict[str, Any]:
    return {"text": f"Error: {text}", "error": True}


def scored_attempt(result: dict[str, Any]) -> bool:
    return result.get("status") == "ok" and bool(result.get("success"))


def tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "[... the beginning is cut ...]\n" + text[-limit:]


def read_workspace_file(workspace: Path, path: str, limit: int) -> str:
    """The text of a regular file below the workspace, walked one folder at a time without
    following a link (the sandbox wrote it); ValueError, worded for the coder, if it cannot be used."""
    parts = [p for p in path.strip().split("/") if p not in ("", ".")]
    if parts and parts[0] == WORKSPACE:
        parts = parts[1:]
    if not parts or ".." in parts or path.strip().startswith("/"):
        raise ValueError(f"'{path[:200]}' is not a file in your workspace; give a path like workspace/solution.py")
    at = os.open(workspace, DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, DIR_FLAGS, dir_fd=at)
            except OSError:
                raise ValueError(f"'{path[:200]}': there is no folder '{part}' (links are not followed)") from None
            os.close(at)
            at = inner
        try:
            fd = os.open(parts[-1], FILE_FLAGS, dir_fd=at)
        except OSError as err:
            raise ValueError(f"'{path[:200]}' cannot be read: {err.strerror} (links are not followed)") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ValueError(f"'{path[:200]}' is not a regular file")
            if info.st_size > limit:
                raise ValueError(f"'{path[:200]}' holds {info.st_size:,} bytes; an attempt takes at most {limit:,}")
            data = os.read(fd, limit + 1)
        finally:
            os.close(fd)
    finally:
        os.close(at)
    if len(data) > limit:
        raise ValueError(f"'{path[:200]}' holds more than {limit:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"'{path[:200]}' is not UTF-8 text") from None
    if "\x00" in text:
        raise ValueError(f"'{path[:200]}' holds NUL characters")
    return text


# -- the session's surfaces and prompt ---------------------------------------------------------------
def surfaces(files: Path, evaluation: int, lineage: str | None, sees_all: bool) -> list[tuple[Surface, str, dict]]:
    """What the coder's sandbox sees, each with the text naming it: (surface, text name, values)."""
    root = rs.storage_root(files)
    rs.ensure_layout(root)
    here = coder_dir(files, evaluation)
    found: list[tuple[Surface, str, dict]] = [
        (Surface(WORKSPACE, here / WORKSPACE, writable=True), "coder_surface_workspace", {}),
        (Surface(RECORDS, here / RECORDS), "coder_surface_records", {}),
        (Surface(f"storage/{rs.SYSTEM}", root / rs.SYSTEM), "coder_surface_system", {}),
    ]
    own = lineage.lower() if lineage else None
    if own is not None:
        mine = root / rs.LINEAGES_DIR / own
        if not mine.is_dir():  # a lineage whose code never ran yet
            mine.mkdir(parents=True)
            os.chmod(mine, rs.DIR_MODE)
        found.append((Surface(f"storage/{rs.LINEAGE}", mine), "coder_surface_lineage", {}))
    if sees_all:
        found.append((Surface(f"storage/{rs.SHARED}", root / rs.SHARED), "coder_surface_shared", {}))
        for name in rs.lineage_dirs(root):
            if name != own and name not in (rs.SHARED, rs.SYSTEM, rs.LINEAGE):
                found.append(
                    (
                        Surface(f"storage/{name}", root / rs.LINEAGES_DIR / name),
                        "coder_surface_other",
                        {"lineage": name},
                    )
                )
    return found


def opening(
    texts: Any,
    row: Any,
    task: Any,
    task_spec: str,
    listed: list[tuple[Surface, str, dict]],
    cfg: Any,
    template: str = "coder_opening",
) -> str:
    """The coder's first message: the task, its folders and access, the rules, the instruction (last).
    `template`: the text it is rendered with (the command back-end's prompt file has its own)."""
    lines = [
        texts.render(
            "coder_surface",
            target=s.target,
            what=texts.render(name, **values),
            mode="read and write" if s.writable else "read-only",
        )
        for s, name, values in listed
    ]
    return texts.render(
        template,
        id=row["id"],
        title=row["title"],
        task_id=row["task"],
        task_title=task.title,
        task_spec=task_spec.strip(),
        surfaces="\n".join(lines),
        access=texts.render("coder_access_mature" if row["sees_all"] else "coder_access_immature"),
        entry=task.entry,
        max_attempts=cfg.max_attempts,
        max_turns=cfg.max_turns,
        sections=", ".join(SECTIONS),
        author=row["author"],
        instruction=row["instruction"],
    )


def task_limits(task: Any, label: str) -> Callable[[RunSpec], RunSpec]:
    """Puts the task's data mounts, environment and limits on a tool's run (its own time limit stays)."""
    own = task.run_spec("", mounts=[], label=label)

    def apply(spec: RunSpec) -> RunSpec:
        return replace(
            spec,
            mounts=[*spec.mounts, *own.mounts],
            env={**own.env, **spec.env},
            memory_mb=own.memory_mb,
            max_processes=own.max_processes,
            max_scratch_mb=own.max_scratch_mb,
            max_files=own.max_files,
            num_cpus=own.num_cpus,
            num_gpus=0.0,
        )

    return apply


def walk(
    row: Any,
    fetch: Fetch,
    *,
    texts: Any,
    task: Any,
    cfg: Any,
    max_code_chars: int,
    sandbox: SandboxTools,
    workspace: Path,
    opening_text: str,
    call: ModelCall | None,
    run_attempt: RunAttempt | None,
) -> Outcome | None:
    """The coder session of evaluation `row` as far as it is recorded (None: an input is missing and
    this walk may not produce it)."""
    toolbox = CoderToolbox(
        row["id"],
        sandbox,
        workspace,
        texts,
        max_attempts=cfg.max_attempts,
        max_code_chars=max_code_chars,
        run_attempt=run_attempt,
    )
    # the first message as the coder got it (rebuilt on a resume, it could differ): the viewer shows it
    told = fetch(f"{prefix(row['id'])}/opening", "worker_opening", lambda: {"text": opening_text})
    if told is None:
        return None
    session = walk_session(
        prefix(row["id"]),
        fetch,
        system=texts.render("coder_system"),
        opening=str(told.get("text") or ""),
        toolbox=toolbox,
        call=call,
        max_turns=cfg.max_turns,
    )
    if session is None:
        return None
    report = session.final.get("report") if session.final else None
    return Outcome(toolbox.attempts, report if isinstance(report, str) else None, session.end, session)


# -- the records folder ----------------------------------------------------------------------------
def write_records(store: Any, files: Path, row: Any) -> Path:
    """The records the author could see at submission (every evaluation, or its own lineage's and the
    System baselines'), delivered before this one, one Markdown file each; written once, when the
    session starts (what the coder read is recorded with its tool calls, so a replay needs none)."""
    folder = coder_dir(files, row["id"]) / RECORDS
    if folder.is_dir():
        return folder
    scope, params = (
        ("1", ())
        if row["sees_all"]
        else ("(lineage = ? OR (lineage IS NULL AND author = 'System'))", (row["lineage"],))
    )
    rows = store.all(
        f"SELECT * FROM evaluations WHERE id < ? AND status != 'queued' AND {scope} ORDER BY id", (row["id"], *params)
    )
    partial = folder.with_name(RECORDS + ".partial")
    if partial.exists():
        for old in partial.iterdir():
            old.unlink()
    else:
        partial.mkdir(parents=True)
    for found in rows:
        (partial / f"{found['id']}.md").write_text(record_file(store, found), encoding="utf-8")
    os.chmod(partial, 0o755)
    partial.rename(folder)
    return folder


def record_file(store: Any, row: Any) -> str:
    """One evaluation as the coder reads it in records/."""
    version = row["reported_version"]
    code = None
    if version is not None:
        code = store.scalar(
            "SELECT code FROM evaluation_versions WHERE evaluation = ? AND version = ?", (row["id"], version)
        )
    code = code if code is not None else row["code"]
    lines = [
        f"# Evaluation {row['id']}: {row['title']}",
        "",
        f"- Task: {row['task']}",
        f"- Author: {row['author']} (lineage {row['lineage'] or 'none'}), submitted at tick {row['tick']}",
        f"- Status: {row['status']}",
        f"- Score: {row['score'] if row['score'] is not None else 'none'}",
        "",
        "## Abstract",
        "",
        row["abstract"],
    ]
    if row["instruction"] is not None:
        lines += ["", "## Instruction", "", row["instruction"]]
    if row["coder_report"]:
        lines += ["", "## Coder Report (the coder's own words)", "", row["coder_report"]]
    if row["details"]:
        lines += ["", "## Evaluator", "", row["details"]]
    if code:
        lines += ["", "## Final code", "", fence(code, "python")]
    return "\n".join(lines) + "\n"
