"""The command back-end of the research coder: an installed command-line coder in the sandbox.

`research.coder.backend: command` (docs/coder.md, "Back-ends"). The CLI (Claude Code, Codex...)
runs in one sandbox run with the coder's surfaces (station/workers/command.py); its model calls go
through the station's relay, which adds the key, applies the caps and books them as "coder"; its
official attempts (`submit_attempt PATH`) are read from the workspace and run exactly as the tools
back-end's are; it ends by writing workspace/REPORT.md. What the session did is recorded, and the
walk reads every one of these inputs back (so a replay copies them and needs no CLI, no model and
no sandbox):

    coder/N/spawn/<s>      a start of the CLI, recorded before it starts (at most max_spawns)
    coder/N/call/<k>       model call k as the relay forwarded it: request and reply (cut), usage
    coder/N/attempt/<k>    official attempt k: the code read from the workspace
    eval-run/N/<k>         its run, the input a direct submission's version k would be
    coder/N/end            the report, how the session ended, the CLI's exit status and the end
                           of its output, and how many starts, calls and attempts there were

A station killed mid-session starts the CLI again on resume (a new start, while starts are
left); attempts already recorded keep their numbers and are not run again.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from rooms.research.config import ResearchConfig
from station.core.background import Stopped
from station.core.model_api import BudgetExceeded
from station.workers.command import run_cli
from station.workers.sandbox_tools import SandboxTools, SandboxUnavailable
from station.workers.session import Fetch, Session

from . import coder
from . import storage as rs
from .coder_report import MAX_REPORT_CHARS, missing_sections
from .pipeline import Version, run_key

REPORT_FILE = "workspace/REPORT.md"
FINISHED, FAILED = "finished", "command_failed"


def key(evaluation: int, what: str, number: int | None = None) -> str:
    return f"{coder.prefix(evaluation)}/{what}" + (f"/{number}" if number is not None else "")


class CommandBackend:
    @staticmethod
    def recorded(row: Any, fetch: Fetch, *, texts: Any, task: Any, research: Any) -> coder.Outcome | None:
        return walk(row, fetch, None)

    @staticmethod
    def work(worker: Any, store: Any, row: Any, task: Any, fetch: Fetch) -> None:
        walk(row, fetch, lambda: CommandSession(worker, store, row, task, fetch).run())


def walk(row: Any, fetch: Fetch, make_end: Any) -> coder.Outcome | None:
    """The session as recorded (None: an input is missing); `make_end` runs the CLI when the end is
    not recorded yet (None in a walk that may not produce inputs)."""
    number = row["id"]

    def missing() -> dict[str, Any]:
        raise RuntimeError("this walk may not produce inputs")

    end = fetch(key(number, "end"), "worker_end", make_end or missing)
    if end is None:
        return None
    for what, count in (("spawn", end["spawns"]), ("call", end["calls"])):
        for n in range(1, count + 1):
            if fetch(key(number, what, n), f"worker_{what}", missing) is None:
                return None
    attempts = []
    for n in range(1, end["attempts"] + 1):
        snapshot = fetch(key(number, "attempt", n), "worker_tool", missing)
        result = fetch(run_key(number, n), "eval_run", missing)
        if snapshot is None or result is None:
            return None
        attempts.append(Version(n, "coder", snapshot["code"], run_key(number, n), result))
    return coder.Outcome(attempts, end.get("report"), end["end"], Session([], end["end"], None))


class CommandSession:
    """Produces `coder/N/end` on the evaluation worker's thread: one more start of the CLI, unless
    every start is used; the calls and attempts are recorded as they happen."""

    def __init__(self, worker: Any, store: Any, row: Any, task: Any, fetch: Fetch) -> None:
        self.worker, self.store, self.row, self.task, self.fetch = worker, store, row, task, fetch
        self.research = worker.config.section(ResearchConfig)
        self.number = row["id"]
        self.calls = self._count("call")
        self.attempts = self._count("attempt")
        self.workspace = coder.coder_dir(store.files, self.number) / coder.WORKSPACE
        self.toolbox = coder.CoderToolbox(  # the tools back-end's reading of an attempt and its answer
            self.number,
            SandboxTools(None, []),
            self.workspace,
            worker.texts,
            max_attempts=self.research.coder.max_attempts,
            max_code_chars=self.research.max_code_chars,
            run_attempt=None,
        )

    def run(self) -> dict[str, Any]:
        for n in range(1, self.attempts + 1):  # an attempt recorded before a stop, its run not yet
            self._run_attempt(n, self.store.get_input(key(self.number, "attempt", n))["code"])
        spawns = self._count("spawn")
        command = self.research.coder.command
        channel = coder.coder_dir(self.store.files, self.number) / "channel"
        if spawns >= command.max_spawns:
            shutil.rmtree(channel, ignore_errors=True)  # what a killed station left: its socket and prompt
            why = f"the command was started {spawns} time(s) without finishing (research.coder.command.max_spawns)"
            return self._end(None, None, why, spawns)
        self.fetch(key(self.number, "spawn", spawns + 1), "worker_spawn", lambda: {"spawn": spawns + 1})
        listed = coder.surfaces(self.store.files, self.number, self.row["lineage"], bool(self.row["sees_all"]))
        if not self.workspace.is_dir():
            self.workspace.mkdir(parents=True)
            os.chmod(self.workspace, rs.DIR_MODE)
        coder.write_records(self.store, self.store.files, self.row)
        prompt = coder.opening(
            self.worker.texts,
            self.row,
            self.task,
            self.task.spec(),
            listed,
            self.research.coder,
            template="coder_command_opening",
        )
        assert command.model is not None  # the config's check
        spawned = run_cli(
            self.worker.executor,
            [surface for surface, _, _ in listed],
            channel,
            argv=command.argv,
            prompt=prompt,
            provider=command.provider,
            model=command.model,
            ledger=self.worker.models.ledger,
            record=self._record,
            submit=self._submit,
            timeout_s=command.timeout_s,
            spec=coder.task_limits(self.task, f"coder-{self.number}"),
            label=f"coder-{self.number}-command",
        )
        if self.worker.stop.is_set():
            raise Stopped  # the run was cut short by the shutdown: not a result
        if spawned.refused is not None:
            raise BudgetExceeded(spawned.refused)  # nothing of this start's end is recorded: the station pauses
        result = spawned.result
        if result.status == "system_error":
            raise SandboxUnavailable(f"the coder's command could not run: {result.error}")
        output = "\n".join(part for part in (result.stdout, result.stderr, result.error or "") if part.strip())
        return self._end(result.exit_code, result.status, output, spawns + 1)

    def _end(self, exit_code: int | None, status: str | None, output: str, spawns: int) -> dict[str, Any]:
        """The session's end: the report as the CLI left it (read without following links)."""
        try:
            report: str | None = coder.read_workspace_file(self.workspace, REPORT_FILE, MAX_REPORT_CHARS)
            problem = None
        except ValueError as err:
            report, problem = None, str(err)
        missing = missing_sections(report) if report and report.strip() else None
        return {
            "end": FINISHED if missing == [] else FAILED,
            "report": report if report and report.strip() else None,
            "report_problem": problem,
            "missing_sections": missing,
            "exit_code": exit_code,
            "status": status,
            "output_tail": coder.tail(output, coder.OUTPUT_TAIL_CHARS),
            "spawns": spawns,
            "calls": self.calls,
            "attempts": self.attempts,
        }

    def _record(self, exchange: dict[str, Any]) -> None:
        self.calls += 1
        self.fetch(key(self.number, "call", self.calls), "worker_call", lambda: exchange)

    def _submit(self, path: str) -> dict[str, Any]:
        """`submit_attempt PATH`: the file is recorded as attempt k, then run as eval-run/N/k."""
        snapshot = self.toolbox.snapshot(path, self.research.coder.max_attempts - self.attempts)
        if snapshot.get("code") is None:
            return snapshot
        n = self.attempts + 1
        recorded = self.fetch(key(self.number, "attempt", n), "worker_tool", lambda: {**snapshot, "path": path})
        assert recorded is not None
        self.attempts = n
        result = self._run_attempt(n, recorded["code"])
        return {"text": self.toolbox.attempt_text(n, result), "error": not coder.scored_attempt(result)}

    def _run_attempt(self, n: int, code: str) -> dict[str, Any]:
        result = self.fetch(
            run_key(self.number, n),
            "eval_run",
            lambda: self.worker.run_attempt(self.store, self.row, self.task, n, code),
        )
        assert result is not None
        return result

    def _count(self, what: str) -> int:
        n = 0
        while self.store.get_input(key(self.number, what, n + 1)) is not None:
            n += 1
        return n
