"""The evaluation worker: runs queued evaluations in the sandbox and records their results as inputs.

It changes no world state. For each queued evaluation (oldest first, at most
`research.executor.max_parallel` at once, each on its own thread) it walks the evaluation's
path (pipeline.walk), producing only the inputs not recorded yet (InputWorker.produce in
station/core/background.py): a sandbox run scored by the task's evaluator, or a debugger
proposal. An evaluation submitted as an instruction (coder mode) walks its coder's session
instead (coder.py): model calls, tool runs in the sandbox and official attempts, each attempt
run and scored here exactly as a version is. The engine applies an evaluation once its path is
complete. After a crash or a restart the walk resumes at the first missing input, so a run that
was in flight is simply run again and a recorded result is never produced twice.

A run that fails for the machine's sake (a system error: the sandbox could not be set up, the
executor broke) records nothing and pauses the station; it runs again on resume. The same
failure may come back every time (a scratch folder that does not exist, a name the storage
refuses): after SYSTEM_ERROR_LIMIT identical system errors of one run in a row, counted across
resumes in `evaluation_runs`, the run is recorded as a system error, and the evaluation ends
`system_failed`: charged to nobody, the author told so, an operator alert, the station goes on.

`evaluation_runs` keeps the runtime state (what is running, since when, where) for status
displays; it is bookkeeping, not world state.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from evaluators import scoring_process
from evaluators.base import ScorerFailure, Task
from rooms.research.config import DebuggerConfig, ResearchConfig
from station.core.agents import AgentRegistry
from station.core.background import InputWorker, Stopped
from station.core.run_types import Mount, RunResult
from station.core.store import Store, absolute
from station.executors.runfiles import Refused, sweep, work_base
from station.models import BudgetExceeded, ModelError, ModelPool
from station.workers.sandbox_tools import SandboxTools, SandboxUnavailable
from station.workers.session import model_call

from . import coder, debugger
from . import storage as rs
from .backends import CODER_BACKENDS
from .fingerprint import storage_hashes
from .pipeline import Trail, walk
from .store import open_evaluations
from .text import clip_log
from .visibility import sees_all

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5
RUN_LABEL = re.compile(r"eval-(\d+)-v(\d+)(?:-(\w+))?")  # the labels _run gives (a training task adds -train0, ...)
STREAM_KEEP_CHARS = 100_000  # per stream in a recorded result (head and tail)
SYSTEM_ERROR_LIMIT = 3  # identical system errors of one run, across resumes, before it is given up
# scorings of one run that the station died in, across resumes, before its result is a charged failure:
# one may be an operator's kill -9 landing there; a second is the result's doing
SCORING_DEATH_LIMIT = 2
DETAILS_KEEP_CHARS = 20_000  # a verdict's details as recorded (a run's claims may be long)


def run_payload(task: Any, result: RunResult, executor: str) -> dict[str, Any]:
    """A run's recorded result: the sandbox's outcome plus the trusted evaluator's verdict, judged in
    a scoring process of the task's (scoring_process.py), never in this one. ScoringUnavailable
    (no scoring process could be started) passes through: the station's fault."""
    payload = _base_payload(result, executor)
    if result.status != "ok":
        return payload
    try:
        verdict = scoring_process.score(task, result)
    except scoring_process.ScoringUnavailable:
        raise
    except Exception as err:  # noqa: BLE001 - the task's scorer broke: its fault, not the code's
        failure = err if isinstance(err, ScorerFailure) else ScorerFailure(f"{type(err).__name__}: {err}", result)
        log.error("the scorer of task %s failed: %s", task.kind, failure)
        return scorer_failed_payload(failure, executor)
    payload.update(verdict.to_payload())
    payload["details"] = clip_log(payload["details"], DETAILS_KEEP_CHARS)
    metrics = payload["metrics"]
    for name, value in list(metrics.items()):  # JSON has no NaN: keep it readable as "nan"
        if isinstance(value, float) and not math.isfinite(value):
            metrics[name] = str(value)
    if not verdict.success:
        payload["status"] = "invalid"
    return payload


def scorer_failed_payload(failure: ScorerFailure, executor: str) -> dict[str, Any]:
    """The task's scorer broke: recorded as such (status "scorer_error"), with the submission's own logs."""
    payload = _base_payload(failure.result or RunResult(status="ok"), executor)
    payload.update(status="scorer_error", error=clip_log(str(failure), STREAM_KEEP_CHARS), traceback=None)
    return payload


def _base_payload(result: RunResult, executor: str | None) -> dict[str, Any]:
    return {
        "status": result.status,
        "error": result.error,
        "traceback": result.traceback,
        "stdout": clip_log(result.stdout, STREAM_KEEP_CHARS),
        "stderr": clip_log(result.stderr, STREAM_KEEP_CHARS),
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 3),
        "isolation": result.isolation,
        "executor": executor,
        "success": False,
        "score": None,
        "sort_key": None,
        "metrics": {},
        "details": "",
    }


def system_failed_payload(error: str, tries: int, executor: str | None) -> dict[str, Any]:
    """A run given up after `tries` identical system errors: recorded, so the evaluation ends."""
    payload = _base_payload(RunResult(status="system_error"), executor)
    payload["error"] = f"the station could not run this evaluation ({tries} identical system errors): {error}"
    return payload


def system_error_signature(error: str) -> str:
    """What makes two system errors the same: the first line, numbers and the run's temporary names
    (any word holding a digit: run folders are named after the evaluation) set aside."""
    line = (error.strip().splitlines() or [""])[0]
    return " ".join("#" if any(c.isdigit() for c in word) else word for word in line.split())[:500]


def scoring_died_payload(result: RunResult, deaths: int, executor: str | None) -> dict[str, Any]:
    """A result whose scoring the station died in `deaths` times: a charged failure, not scored again."""
    payload = _base_payload(result, executor)
    payload.update(
        status="invalid",
        details=f"Not scored: the station stopped {deaths} times while scoring this result, so it is not "
        "scored again (a result must not cost the scorer more than its limits).",
    )
    return payload


def refused_payload(problem: str) -> dict[str, Any]:
    payload = _base_payload(RunResult(status="ok"), None)
    payload.update(status="refused", error=f"Validation error: {problem}")
    return payload


def storage_mounts(files: Path, lineage: str | None, cross_lineage: bool) -> list[Mount]:
    """A run's storage mounts, from the station's files/ folder (the room owns the storage layout)."""
    areas = rs.code_areas(rs.storage_root(files), lineage, cross_lineage)
    return [Mount(source, target, writable) for source, target, writable in areas]


def sees_other_lineages(store: Store, config: Any, author: str) -> bool:
    """Whether the author's code may read other lineages' storage: the room's rule (visibility.sees_all).

    The station's flag is checked first, for supervisors too (unlike the room's `storage` action,
    which lets supervisors read everything); they cannot submit, so no run of theirs comes here."""
    if not config.section(ResearchConfig).cross_lineage_storage:
        return False
    agent = AgentRegistry(store).get(author)  # None for System baselines
    return agent is not None and sees_all(agent, store.get_meta("tick", 1), config.lifecycle.maturity_ticks)


class SystemFailure(Exception):
    """The machinery failed (the sandbox could not be set up, the executor broke): not the code's fault.

    Such a result is not recorded, so it is charged to nobody: the worker stops taking work, the
    station pauses with the reason, and the evaluation runs again when the station is run again
    (`tries`: how many times in a row this run failed so; at SYSTEM_ERROR_LIMIT it is given up)."""

    def __init__(self, evaluation: int, error: str, tries: int | None = None, pause: Exception | None = None) -> None:
        super().__init__(f"evaluation #{evaluation} could not be run: {error}")
        self.evaluation, self.error, self.tries = evaluation, error, tries
        self.pause = pause  # a budget cap or a model that cannot be called: the operator's, not the machine's


class EvaluationWorker(InputWorker):
    discard_late = True  # a run cut short by the shutdown is not a result

    def __init__(
        self,
        directory: Path,
        config: Any,
        texts: Any,
        tasks: dict[str, Task],
        executor: Any | None = None,
        models: Any = None,
    ) -> None:
        super().__init__("evaluator", absolute(directory), config)
        self.models = models if models is not None else ModelPool()
        self.texts, self.tasks = texts, tasks
        self.executor = executor
        self.inflight: dict[int, threading.Thread] = {}
        self.complete: set[int] = set()  # every input recorded; waiting for the engine to apply them
        self.system_failure: SystemFailure | None = None  # set once; no new work is taken after it
        self._lock = threading.Lock()
        self._progress: dict[str, str] = {}  # run label -> what its harness last reported
        self._progress_changed = False

    # -- the scheduling loop --------------------------------------------------------------
    def serve(self, store: Store) -> None:
        try:
            # Runs left 'running' by an earlier process died with it (one engine per station).
            store.execute("UPDATE evaluation_runs SET state='abandoned' WHERE state='running'")
            if self.executor is None:
                from station.executors import create_executor  # the executors load Ray etc. only when used

                hidden = [self.directory, *(p for task in self.tasks.values() for p in task.private_paths())]
                config = self.config.section(ResearchConfig).executor
                self.executor = create_executor(config, hide=hidden, scratch_base=config.scratch_dir)
            left = sweep(work_base(self.executor))  # evaluation folders of a station killed mid-evaluation
            if left:
                log.info("removed %d evaluation folders left by an earlier run: %s", len(left), ", ".join(left))
            self.executor.on_progress = self._on_progress
            while not self.stop.is_set():
                self._schedule(store)
                self._save_progress(store)
                self.idle(POLL_SECONDS)
        except Exception as err:  # noqa: BLE001 - report it; the hook starts a new worker
            log.exception("the evaluator stopped")
            self.error = repr(err)

    def _schedule(self, store: Store) -> None:
        limit = self.config.section(ResearchConfig).executor.max_parallel
        with self._lock:
            for number in [n for n, t in self.inflight.items() if not t.is_alive()]:
                del self.inflight[number]
        if self.system_failure is not None:
            return
        for row in open_evaluations(store):
            if len(self.inflight) >= limit:
                break
            if row["id"] in self.inflight or row["id"] in self.complete:
                continue
            thread = threading.Thread(target=self._evaluate, args=(dict(row),), name=f"eval-{row['id']}", daemon=True)
            with self._lock:
                self.inflight[row["id"]] = thread
            thread.start()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop taking work; runs in flight are abandoned (they run again when the station resumes)."""
        super().shutdown(timeout)
        if self.executor is not None:
            self.executor.close()
        scoring_process.close(self.tasks.values())  # a scoring in flight ends now; its result is not recorded
        # the runs are killed: each evaluation's thread now removes its folder; let it (bounded)
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self.inflight.values())
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- one evaluation -------------------------------------------------------------------
    def _evaluate(self, row: dict[str, Any]) -> None:
        store = Store(self.directory)
        try:
            task = self.tasks.get(row["task"])
            if task is None:
                raise RuntimeError(f"evaluation {row['id']} names unknown task {row['task']!r}")

            def fetch(key: str, kind: str, make: Any) -> dict[str, Any]:
                return self.produce(store, key, kind, row["author"], make)

            if row["instruction"] is not None:
                backend = CODER_BACKENDS.get(self.config.section(ResearchConfig).coder.backend)
                backend.work(self, store, row, task, fetch)
            else:
                cfg = self.config.section(DebuggerConfig)
                walk(
                    row,
                    fetch,
                    run_code=lambda v, code: self._run(store, row, task, v, code),
                    debug=lambda attempt, so_far: self._debug(task, so_far),
                    debugger_enabled=cfg.enabled,
                    max_attempts=cfg.max_attempts,
                )
            self.complete.add(row["id"])
        except Stopped:
            pass
        except (BudgetExceeded, ModelError) as err:  # the coder's model: nothing recorded, the station pauses
            if not self.stop.is_set():
                self._fail(SystemFailure(row["id"], f"the research coder's model call stopped: {err}", pause=err))
        except SandboxUnavailable as err:  # a coder's tool run the machine could not make: nothing recorded
            if not self.stop.is_set():
                self._fail(SystemFailure(row["id"], f"a tool of the research coder could not run: {err}"))
        except Exception as err:  # noqa: BLE001 - the machinery broke: as loud as a broken sandbox
            if self.stop.is_set():
                pass  # cut short by the shutdown: not a result; it runs again on resume
            elif isinstance(err, SystemFailure):
                self._fail(err)
            else:
                log.exception("evaluation %s failed in the evaluator", row["id"])
                self.error = repr(err)
                self._fail(SystemFailure(row["id"], f"the evaluator failed: {type(err).__name__}: {err}"))
        finally:
            store.close()
            self.wake.set()

    def _fail(self, failure: SystemFailure) -> None:
        log.error("%s", failure)
        self.system_failure = self.system_failure or failure
        self.recorded.set()  # wakes the engine if it waits on this evaluation

    def _run(self, store: Store, row: dict[str, Any], task: Any, version: int, code: str) -> dict[str, Any]:
        problem = task.validate_code(code)
        if problem:
            return refused_payload(problem)
        assert self.executor is not None
        try:
            result = self._execute(store, row, task, version, code)
        except ScorerFailure as err:
            log.error("the scorer of evaluation %s failed: %s", row["id"], err)
            return scorer_failed_payload(err, self.executor.name)
        if result.status == "system_error" and not self.stop.is_set():
            return self._system_error(store, row["id"], version, result.error or "the executor failed")
        try:
            payload = self._score(store, row["id"], version, task, result)
        except scoring_process.ScoringUnavailable as err:
            return self._system_error(store, row["id"], version, f"Evaluation system error: {err}")
        try:  # what the run left in the storage `station external` would mount again: it compares
            payload["storage"] = storage_hashes(store.files, row["lineage"])
        except (OSError, ValueError):  # a lineage name its storage refuses: nothing to compare with later
            log.exception("the storage of evaluation %s could not be hashed", row["id"])
        return payload

    def _score(self, store: Store, evaluation: int, version: int, task: Any, result: RunResult) -> dict[str, Any]:
        """run_payload, with each scoring counted in `evaluation_runs` before it begins and uncounted
        when it ends: a count left over says the station died while scoring this result before."""
        assert self.executor is not None
        if result.status != "ok":
            return run_payload(task, result, self.executor.name)
        key = (evaluation, version)
        found = store.one("SELECT scorings FROM evaluation_runs WHERE evaluation=? AND version=?", key)
        deaths = found["scorings"] if found is not None else 0
        if deaths >= SCORING_DEATH_LIMIT:
            log.error(
                "evaluation %s: the station died %s times scoring its result; not scored again", evaluation, deaths
            )
            return scoring_died_payload(result, deaths, self.executor.name)
        store.execute("UPDATE evaluation_runs SET scorings=scorings+1 WHERE evaluation=? AND version=?", key)
        try:
            return run_payload(task, result, self.executor.name)
        finally:
            store.execute("UPDATE evaluation_runs SET scorings=0 WHERE evaluation=? AND version=?", key)

    def _execute(self, store: Store, row: dict[str, Any], task: Any, version: int, code: str) -> RunResult:
        """The sandbox run. What breaks in the machinery around the code (its storage mounts, the
        executor) is a system_error result; a ScorerFailure passes through."""
        assert self.executor is not None
        try:
            if row["instruction"] is not None:  # a coder's attempt: the author's view when it submitted
                others = bool(row["sees_all"]) and self.config.section(ResearchConfig).cross_lineage_storage
            else:
                others = sees_other_lineages(store, self.config, row["author"])
            mounts = storage_mounts(store.files, row["lineage"], others)
        except (OSError, ValueError) as err:  # e.g. a lineage name its storage refuses (an old station's)
            log.exception("the storage of evaluation %s could not be mounted", row["id"])
            return RunResult(status="system_error", error=f"Evaluation system error: {type(err).__name__}: {err}")
        self._mark(store, row["id"], version, "running")
        share = self.config.section(ResearchConfig).storage_share
        executor = rs.Charged(self.executor, rs.share_owner(row["lineage"], row["author"]), share)
        try:
            return task.execute(
                executor, code, mounts=mounts, label=f"eval-{row['id']}-v{version}", cpu_only=bool(row["cpu_only"])
            )
        except ScorerFailure:
            raise
        except Refused as err:  # what the submission left (its files, links, depth, names): its failure
            return RunResult(status="error", error=f"Refused: {err}")
        except Exception as err:  # noqa: BLE001 - the executor broke, not the code
            log.exception("executor failed on evaluation %s", row["id"])
            return RunResult(status="system_error", error=f"Evaluation system error: {err}")
        finally:
            self._mark(store, row["id"], version, "done")

    def _system_error(self, store: Store, evaluation: int, version: int, error: str) -> dict[str, Any]:
        """Count this system error of the run (identical ones in a row, across resumes); below the
        limit the station pauses (SystemFailure), at it the run is recorded as given up."""
        signature = system_error_signature(error)
        previous = store.one(
            "SELECT system_errors, system_error FROM evaluation_runs WHERE evaluation=? AND version=?",
            (evaluation, version),
        )
        tries = 1  # a different error starts the count again
        if previous is not None and previous["system_error"] == signature:
            tries += previous["system_errors"]
        store.execute(
            "INSERT INTO evaluation_runs(evaluation, version, state, started_at, executor, system_errors, system_error) "
            "VALUES(?,?,'done',?,?,?,?) ON CONFLICT(evaluation, version) DO UPDATE SET "
            "system_errors=excluded.system_errors, system_error=excluded.system_error",
            (evaluation, version, time.time(), getattr(self.executor, "name", "?"), tries, signature),
        )
        if tries < SYSTEM_ERROR_LIMIT:
            raise SystemFailure(evaluation, error, tries)
        log.error("evaluation %s given up after %s identical system errors: %s", evaluation, tries, error)
        return system_failed_payload(error, tries, getattr(self.executor, "name", None))

    def run_attempt(self, store: Store, row: dict[str, Any], task: Any, number: int, code: str) -> dict[str, Any]:
        """A coder's official attempt `number`: run and scored exactly as a version is (`_run`)."""
        return self._run(store, row, task, number, code)

    def tools_session(self, store: Store, row: dict[str, Any], task: Any, fetch: Any) -> None:
        """Walk the evaluation's coder session of the tools back-end (coder.py), producing what is
        missing: model calls, tool runs in the sandbox, official attempts run as `_run` runs a version."""
        research = self.config.section(ResearchConfig)
        number = row["id"]
        files = store.files
        listed = coder.surfaces(files, number, row["lineage"], bool(row["sees_all"]))
        workspace = coder.coder_dir(files, number) / coder.WORKSPACE
        if not workspace.is_dir():
            workspace.mkdir(parents=True)
            os.chmod(workspace, rs.DIR_MODE)
        coder.write_records(store, files, row)
        sandbox = SandboxTools(
            self.executor,
            [surface for surface, _, _ in listed],
            command_timeout_s=research.coder.command_timeout_s,
            spec=coder.task_limits(task, f"coder-{number}"),
            label=f"coder-{number}",
        )
        coder.walk(
            row,
            fetch,
            texts=self.texts,
            task=task,
            cfg=research.coder,
            max_code_chars=research.max_code_chars,
            sandbox=sandbox,
            workspace=workspace,
            opening_text=coder.opening(self.texts, row, task, task.spec(), listed, research.coder),
            call=model_call(lambda: self.models.get(research.coder.model), "coder"),
            run_attempt=lambda k, code: self._run(store, row, task, k, code),
        )

    def _debug(self, task: Any, so_far: Trail) -> dict[str, Any]:
        return debugger.propose(self.texts, task, so_far, self._debugger_model)

    def _debugger_model(self) -> Any:
        return self.models.get(self.config.section(DebuggerConfig).model)

    # -- progress of training runs, for the status displays ----------------------------------
    def _on_progress(self, label: str, text: str) -> None:
        """Called from the executor's threads: only noted here, saved by the scheduling loop."""
        with self._lock:
            self._progress[label] = text
            self._progress_changed = True

    def _save_progress(self, store: Store) -> None:
        with self._lock:
            if not self._progress_changed:
                return
            self._progress_changed = False
            reports = dict(self._progress)
        by_run: dict[tuple[int, int], list[str]] = {}
        for label, text in sorted(reports.items()):
            found = RUN_LABEL.fullmatch(label)
            if found:
                part = found.group(3)
                by_run.setdefault((int(found.group(1)), int(found.group(2))), []).append(
                    f"{part.replace('train', 'trial ')}: {text}" if part else text
                )
        for (evaluation, version), parts in by_run.items():
            store.execute(
                "UPDATE evaluation_runs SET progress=? WHERE evaluation=? AND version=? AND state='running'",
                ("; ".join(parts), evaluation, version),
            )

    def _mark(self, store: Store, evaluation: int, version: int, state: str) -> None:
        now = time.time()
        if state == "running":  # a row kept from an earlier try keeps its count of system errors
            store.execute(
                "INSERT INTO evaluation_runs(evaluation, version, state, started_at, finished_at, executor) "
                "VALUES(?,?,?,?,NULL,?) ON CONFLICT(evaluation, version) DO UPDATE SET state=excluded.state, "
                "started_at=excluded.started_at, finished_at=NULL, executor=excluded.executor, progress=NULL",
                (evaluation, version, state, now, getattr(self.executor, "name", "?")),
            )
        else:
            store.execute(
                "UPDATE evaluation_runs SET state=?, finished_at=? WHERE evaluation=? AND version=?",
                (state, now, evaluation, version),
            )
            prefix = f"eval-{evaluation}-v{version}"
            with self._lock:  # a finished run reports nothing more
                for label in [k for k in self._progress if k == prefix or k.startswith(prefix + "-")]:
                    del self._progress[label]
