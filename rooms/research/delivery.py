"""Research evaluations inside the world: seeding baselines, delivering results, holding the tick.

The background worker (worker.py) records results as inputs; this hook applies them.
Before every turn and at every tick end, when evaluations are open, it obtains the list of
those whose recorded path is complete (`evals-ready/<tick>/<unit>`, a recorded input itself,
so a replay applies the same ones at the same points) and applies each (apply_ready in
station/core/background.py): the evaluation's row gets its status, score and logs, and the author
gets one message, in one transaction, so a result is on the leaderboard exactly when its
message is sent and never twice.

The tick wait (spec research §2.10): at the end of a tick, an open evaluation submitted
`research.wait_ticks` ticks ago or more (counting the submission tick) must be complete
before the next tick starts; producing the ready list then waits for it. System baselines
never hold the tick.

A coder-mode evaluation's path is its coder's session (coder.py); it is applied the same way,
with the last official attempt as its result and the coder's report beside the station's score.

With `research.delivery: on_time` a result is handed over at exactly that tick end, never
sooner, and System baselines wait their turn too: which results an agent has seen then
depends on the ticks alone, not on how fast the machine ran the evaluations.
"""

from __future__ import annotations

from typing import Any

from rooms.research.config import DebuggerConfig, ResearchConfig
from rooms.research.events import EvaluationFinished, EvaluationSubmitted
from rooms.research.tasks import tasks_of
from station.core.background import InputWorker, apply_ready, recorded, wait_until_complete
from station.core.context import Context, Hook, StationPaused
from station.core.events import OperatorAlert, StationCreated, TickEnding, TurnStarted, on
from station.core.store import dumps

from . import coder, debugger, states
from .backends import CODER_BACKENDS
from .coder_report import report_text
from .pipeline import Fetch, Trail, walk
from .store import SYSTEM_AUTHOR, insert_evaluation, open_evaluations
from .text import clip_log
from .worker import SYSTEM_ERROR_LIMIT, EvaluationWorker


class Evaluations(Hook):
    name = "evaluations"
    order = 70

    def __init__(self) -> None:
        self.worker: EvaluationWorker | None = None

    @on(StationCreated)
    def seed(self, ctx: Context, agent: str | None, event: StationCreated) -> None:
        seed_baselines(ctx)

    @on(EvaluationSubmitted)
    def wake(self, ctx: Context, agent: str | None, event: EvaluationSubmitted) -> None:
        self._open(ctx)

    @on(TurnStarted)
    def deliver_before_turn(self, ctx: Context, agent_name: str | None, event: TurnStarted) -> None:
        rows = self._open(ctx)
        if rows and ctx.config.section(ResearchConfig).delivery == "when_ready":
            agent = ctx.agents.get(agent_name or "")
            self._deliver(ctx, rows, f"s{agent.session if agent else agent_name}", [])

    @on(TickEnding)
    def deliver_at_tick_end(self, ctx: Context, agent: str | None, event: TickEnding) -> None:
        rows = self._open(ctx)
        if not rows:
            return
        cfg = ctx.config.section(ResearchConfig)
        wait = cfg.wait_ticks
        due = [r for r in rows if wait is not None and ctx.tick - r["tick"] + 1 >= wait]
        if cfg.delivery == "on_time":  # exactly the due ones, waiting for each: the same ticks at any speed
            if due:
                self._deliver(ctx, due, "end", due)
            return
        self._deliver(ctx, rows, "end", [r for r in due if r["holds_tick"]])

    def _open(self, ctx: Context) -> list[Any]:
        """The evaluations not yet delivered; outside a replay, the worker is woken for them."""
        rows = open_evaluations(ctx.store)
        if rows and ctx.replay_source is None:
            self._ensure_worker(ctx)
            self._pause_on_system_failure()
            self.worker.wake.set()  # type: ignore[union-attr]
        return rows

    def _deliver(self, ctx: Context, rows: list[Any], unit: str, hold: list[Any]) -> None:
        apply_ready(
            ctx,
            f"evals-ready/{ctx.tick}/{unit}",
            "evals_ready",
            rows,
            lambda: self._wait_until_ready(ctx, rows, hold),
            lambda row: apply(ctx, row, walk_recorded(ctx, row)),
            inline=not hold,  # nothing to wait for: which are complete is read at once
        )

    # -- the worker -----------------------------------------------------------------------
    def _ensure_worker(self, ctx: Context) -> None:
        if self.worker is not None and self.worker.is_alive():
            return
        self.worker = EvaluationWorker(ctx.store.dir, ctx.config, ctx.texts, tasks_of(ctx), models=ctx.models)
        self.worker.start()

    def _pause_on_system_failure(self) -> None:
        failure = self.worker.system_failure if self.worker is not None else None
        if failure is None:
            return
        if failure.pause is not None:  # the coder's model: a cap or a setting for the operator, as for agents
            raise StationPaused(
                f"the research coder of evaluation #{failure.evaluation} stopped: {failure.pause}. Nothing was "
                "recorded for that call; the coder's session goes on from there when the station runs again."
            )
        again = "the evaluation runs again when the station runs again"
        if failure.tries is not None:  # a run's failure (not the evaluator's own): it is given up at the limit
            again += (
                f" (identical failure {failure.tries} of {SYSTEM_ERROR_LIMIT}: after {SYSTEM_ERROR_LIMIT} in a row "
                "the evaluation ends as a system error charged to nobody, and the station goes on)"
            )
        raise StationPaused(
            f"{failure}. This is a fault of the station's machine, not of the agent's code: nothing was "
            f"charged to anyone, and {again}."
        )

    def close(self) -> None:
        if self.worker is not None:
            self.worker.shutdown()
            self.worker = None

    def _wait_until_ready(self, ctx: Context, rows: list[Any], hold: list[Any]) -> list[int]:
        """Ids of the complete evaluations; first waits (outside any transaction) for those in `hold`."""

        def keep_going() -> InputWorker:
            self._ensure_worker(ctx)
            self._pause_on_system_failure()
            assert self.worker is not None
            return self.worker

        return wait_until_complete(
            ctx,
            "evaluation(s)",
            rows,
            hold,
            lambda row: complete(ctx, row),
            keep_going,
            lambda: f" | {states.summary(ctx.store, live=True)}",
        )


def debugger_settings(ctx: Context) -> dict[str, Any]:
    cfg = ctx.config.section(DebuggerConfig)
    return {"debugger_enabled": cfg.enabled, "max_attempts": cfg.max_attempts}


Outcome = Trail | coder.Outcome  # a direct submission's versions, or a coder's session


def walk_evaluation(ctx: Context, row: Any, fetch: Fetch) -> Outcome | None:
    """The evaluation's path as far as it is recorded; nothing is produced."""
    if row["instruction"] is None:
        return walk(row, fetch, run_code=None, debug=None, **debugger_settings(ctx))
    research = ctx.config.section(ResearchConfig)
    backend = CODER_BACKENDS.get(research.coder.backend)
    return backend.recorded(row, fetch, texts=ctx.texts, task=tasks_of(ctx).get(row["task"]), research=research)


def complete(ctx: Context, row: Any) -> bool:
    return walk_evaluation(ctx, row, lambda key, kind, make: ctx.store.get_input(key)) is not None


def walk_recorded(ctx: Context, row: Any) -> Outcome:
    outcome = walk_evaluation(ctx, row, lambda key, kind, make: recorded(ctx, "evaluation", key, kind))
    assert outcome is not None
    return outcome


def seed_baselines(ctx: Context) -> None:
    """Each task's System baselines, queued when the station is created (the tick never waits for them)."""
    for number, entry in enumerate(ctx.config.section(ResearchConfig).tasks, 1):
        if not entry.baselines:
            continue
        for baseline in tasks_of(ctx)[str(number)].baselines():
            insert_evaluation(
                ctx.store,
                task=str(number),
                author=SYSTEM_AUTHOR,
                session=None,
                lineage=None,
                tick=0,
                title=baseline.title,
                tags=list(baseline.tags),
                abstract=baseline.abstract,
                code=baseline.code,
                holds_tick=False,
            )


# -- applying a finished evaluation ------------------------------------------------------------
# A coder session without an official attempt: a failure of the experiment, charged to its author.
NO_ATTEMPT: dict[str, Any] = {
    "status": "error",
    "error": "the research coder made no official attempt",
    "success": False,
}
ALERTS = {  # outcomes no author is charged for, and the operator alert each raises
    "scorer_failed": "the task's scorer failed",
    "system_failed": "an evaluation could not be run (the same system error each time): it was given up",
}


def final_status(result: dict[str, Any]) -> str:
    if result.get("status") == "ok" and result.get("success"):
        return "finished"
    if result.get("status") == "scorer_error":
        return "scorer_failed"
    if result.get("status") == "system_error":  # recorded only when given up (worker.SYSTEM_ERROR_LIMIT)
        return "system_failed"
    return "timed_out" if result.get("status") == "timeout" else "failed"


def apply(ctx: Context, row: Any, outcome: Outcome) -> None:
    reported = outcome.reported
    result = reported.result if reported is not None else NO_ATTEMPT
    status = final_status(result)
    ctx.store.execute(
        "UPDATE evaluations SET status=?, score=?, sort_key=?, metrics=?, details=?, error=?, reported_version=?, "
        "stdout=?, stderr=?, finished_tick=? WHERE id=?",
        (
            status,
            result.get("score") if status == "finished" else None,
            dumps(result["sort_key"]) if result.get("sort_key") else None,
            dumps(result.get("metrics") or {}),
            result.get("details") or "",
            result.get("error"),
            reported.number if reported is not None else None,
            result.get("stdout") or "",
            result.get("stderr") or "",
            ctx.tick,
            row["id"],
        ),
    )
    if isinstance(outcome, coder.Outcome):  # the final code is the last attempt's
        ctx.store.execute(
            "UPDATE evaluations SET code=?, coder_report=?, coder_end=? WHERE id=?",
            (reported.code if reported is not None else "", outcome.report, outcome.end, row["id"]),
        )
    for version in outcome.versions:
        ctx.store.execute(
            "INSERT INTO evaluation_versions(evaluation, version, source, code, status, score, error, input_key) "
            "VALUES(?,?,?,?,?,?,?,?)",
            (
                row["id"],
                version.number,
                version.source,
                version.code,
                version.result.get("status"),
                version.result.get("score"),
                version.result.get("error"),
                version.key,
            ),
        )
    if status in ALERTS:  # the task or the machine is broken: only the operator can mend it
        details = {"evaluation": row["id"], "task": row["task"], "error": (result.get("error") or "")[:2000]}
        ctx.emit(OperatorAlert(ALERTS[status], details=details), row["author"])
    author = ctx.agents.get(row["author"])
    if row["author"] != SYSTEM_AUTHOR and author is not None and author.active and author.session == row["session"]:
        ctx.notify(author, result_message(ctx, row, outcome, status), "evaluation")
    score = result.get("score") if status == "finished" else None
    ctx.emit(
        EvaluationFinished(
            evaluation=row["id"],
            task=row["task"],
            status=status,
            score=score,
            version=reported.number if reported is not None else 0,
        ),
        row["author"],
    )


def result_message(ctx: Context, row: Any, outcome: Outcome, status: str) -> str:
    texts, cfg = ctx.texts, ctx.config.section(ResearchConfig)
    task = tasks_of(ctx).get(row["task"])
    reported = outcome.reported
    result = reported.result if reported is not None else NO_ATTEMPT
    parts = [
        texts.render(
            "evaluation_headline",
            id=row["id"],
            outcome=texts.render(f"evaluation_outcome_{status}"),
            title=row["title"],
            task=row["task"],
            task_title=task.title if task else "?",
        )
    ]
    if isinstance(outcome, Trail) and outcome.debugged:
        parts.append(_debug_summary(ctx, outcome))
    if status == "finished":
        if cfg.no_score:
            parts.append(texts.render("evaluation_no_score"))
        else:
            score = repr(result["score"]) + (" (computed by the station)" if isinstance(outcome, coder.Outcome) else "")
            parts.append(texts.render("evaluation_score", score=score) + _metric_lines(task, result))
    if result.get("details"):
        parts.append(texts.render("evaluation_details", details=result["details"]))
    if status == "scorer_failed":
        parts.append(texts.render("evaluation_scorer_failed"))
    elif status == "system_failed":
        parts.append(texts.render("evaluation_system_failed"))  # the machine's error is for the operator
    elif status != "finished" and result.get("error"):
        parts.append(texts.render("evaluation_error", error=result["error"]))
        error = result["error"]
        if "Import failed" in error or "No module named" in error:
            parts.append(texts.render("evaluation_import_hint"))
    if status == "timed_out":
        parts.append(texts.render("evaluation_timeout_hint", seconds=int(task.timeout_s) if task else "?"))
    if isinstance(outcome, coder.Outcome):  # the coder's words come after the station's score, labelled
        parts.append(report_text(texts, outcome.report, outcome.end, len(outcome.attempts)))
    if status != "system_failed" and reported is not None:  # it never ran: no logs to show
        which = (
            "last attempt" if isinstance(outcome, coder.Outcome) else "fixed version" if reported.number > 1 else "run"
        )
        parts.append(_logs(ctx, reported.result, which))
    return "\n".join(p.strip() + "\n" for p in parts if p.strip())


def _metric_lines(task: Any, result: dict[str, Any]) -> str:
    formats = getattr(task, "metric_formats", {}) or {}
    lines = []
    for name, value in sorted((result.get("metrics") or {}).items()):
        if value is None:
            shown = "—"
        elif isinstance(value, (int, float)) and formats.get(name):
            shown = format(value, formats[name])
        else:
            shown = str(value)
        lines.append(f"\n{name}: {shown}")
    return "".join(lines)


def _debug_summary(ctx: Context, outcome: Trail) -> str:
    texts = ctx.texts
    original = outcome.versions[0]
    reported = outcome.reported
    if reported.number > 1:
        return texts.render(
            "evaluation_debugged",
            original_error=original.result.get("error") or "?",
            attempt=reported.number - 1,
            diff=debugger.diff(original.code, reported.code),
        )
    reasons = [p.get("error") for p in outcome.proposals if p.get("error")]
    if not any(p.get("code") for p in outcome.proposals):
        reasons.append("no fix was proposed")
    reason = f"; {reasons[-1]}" if reasons else ""
    return texts.render("evaluation_debug_failed", attempts=len(outcome.proposals), reason=reason)


def _logs(ctx: Context, result: dict[str, Any], which: str) -> str:
    stdout, stderr = result.get("stdout") or "", result.get("stderr") or ""
    trace = result.get("traceback") or ""
    if trace and trace.strip() not in stderr:
        stderr = f"{stderr.rstrip()}\n{trace}".strip()
    if not stdout.strip() and not stderr.strip():
        return ctx.texts.render("evaluation_no_logs")
    limit = ctx.config.section(ResearchConfig).log_max_chars
    return ctx.texts.render(
        "evaluation_logs",
        which=which,
        stdout=clip_log(stdout, limit // 2) or "(nothing)",
        stderr=clip_log(stderr, limit // 2) or "(nothing)",
    )
