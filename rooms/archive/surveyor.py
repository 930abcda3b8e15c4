"""The Archive Surveyor: writes the surveys agents ask for, in the background, and delivers them.

The worker (SurveyWorker) walks each open survey's session (survey_session.walk) on its own
connection, producing the inputs not recorded yet: the surveyor model's replies (spend booked
under the role "surveyor", the station's caps apply) and its tool results (each a fresh sandbox
run over the survey's folders). It changes no world state. At each tick end the hook applies the
surveys whose session is complete, the list being a recorded input (`surveys-ready/<tick>`): a
report is mailed to the agent from "Archive Surveyor"; a session that ended without one (its turn
limit, repeated model failures) tells the agent so and frees its slot. Like an evaluation, a
survey `archive.survey.wait_ticks` old (counting the request tick) holds the tick until it is
complete. A replay applies the same surveys at the same points from the recorded inputs alone.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from rooms.archive.config import ArchiveConfig
from rooms.archive.events import SurveyEnded
from rooms.research.config import ResearchConfig
from rooms.research.tasks import tasks_of
from station.core.background import InputWorker, Stopped, apply_ready, recorded, wait_until_complete
from station.core.config import ExecutorConfig
from station.core.context import Context, Hook, StationPaused
from station.core.events import TickEnding, TurnStarted, on
from station.core.model_api import BudgetExceeded, ModelError
from station.core.store import Store
from station.executors import create_executor
from station.workers.sandbox_tools import SandboxTools, SandboxUnavailable
from station.workers.session import FINISHED, Session, model_call

from ..capsule_store import Author
from ..mail import mail_from_station
from . import survey_session
from .survey_store import MIGRATIONS, open_surveys

SURVEYOR = Author("Archive Surveyor", None, "System", 0)
POLL_SECONDS = 0.5
ERROR_PAUSE_SECONDS = 5.0
TITLE_QUESTION_CHARS = 60
log = logging.getLogger(__name__)


def sandbox_tools(files: Path, number: int, executor: Any) -> SandboxTools:
    return SandboxTools(executor, survey_session.surfaces(files, number), label=f"survey-{number}")


def walk_recorded(ctx: Context, row: Any, fetch: survey_session.Fetch) -> Session | None:
    """The survey's session from what is recorded (nothing is produced)."""
    return survey_session.walk(
        row,
        fetch,
        sandbox=sandbox_tools(ctx.store.files, row["id"], None),
        cfg=ctx.config.section(ArchiveConfig).survey,
        texts=ctx.texts,
        call=None,
    )


def complete(ctx: Context, row: Any) -> bool:
    return walk_recorded(ctx, row, lambda key, kind, make: ctx.store.get_input(key)) is not None


class Surveyor(Hook):
    name = "surveyor"
    order = 55
    migrations = MIGRATIONS

    def __init__(self) -> None:
        self.worker: SurveyWorker | None = None

    @on(TurnStarted)
    def keep_working(self, ctx: Context, agent: str | None, event: TurnStarted) -> None:
        """The worker runs while surveys are open (a new one is taken at the next turn; a station
        resumed with surveys open has its worker back before the tick ends)."""
        if ctx.replay_source is None and open_surveys(ctx.store):
            self._ensure_worker(ctx)
            assert self.worker is not None
            self.worker.wake.set()

    @on(TickEnding)
    def deliver(self, ctx: Context, agent: str | None, event: TickEnding) -> None:
        rows = open_surveys(ctx.store)
        if not rows:
            return
        wait = ctx.config.section(ArchiveConfig).survey.wait_ticks
        hold = [r for r in rows if ctx.tick - r["tick"] + 1 >= wait]
        apply_ready(
            ctx,
            f"surveys-ready/{ctx.tick}",
            "surveys_ready",
            rows,
            lambda: self._wait_until_ready(ctx, rows, hold),
            lambda row: self._apply(ctx, row),
            inline=not hold,  # nothing to wait for: which are complete is read at once
        )

    # -- the worker -----------------------------------------------------------------------
    def _ensure_worker(self, ctx: Context) -> None:
        if self.worker is not None and self.worker.is_alive():
            return
        hidden = [ctx.store.dir, *(p for task in tasks_of(ctx).values() for p in task.private_paths())]
        self.worker = SurveyWorker(ctx.store.dir, ctx.config, ctx.texts, ctx.models, hidden)
        self.worker.start()

    def _wait_until_ready(self, ctx: Context, rows: list[Any], hold: list[Any]) -> list[int]:
        """Ids of the complete surveys; first waits (outside any transaction) for those in `hold`."""

        def keep_going() -> InputWorker:
            if self.worker is not None and self.worker.failure is not None:
                failure, self.worker = self.worker.failure, None  # a new worker tries again on resume
                missing = [r["id"] for r in hold if not complete(ctx, r)]
                raise StationPaused(f"survey(s) {missing} cannot be written: {failure}")
            self._ensure_worker(ctx)
            assert self.worker is not None
            return self.worker

        return wait_until_complete(ctx, "survey(s)", rows, hold, lambda row: complete(ctx, row), keep_going)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.shutdown(10.0)
            self.worker = None

    # -- a finished survey ----------------------------------------------------------------
    def _apply(self, ctx: Context, row: Any) -> None:
        session = walk_recorded(ctx, row, lambda key, kind, make: recorded(ctx, "survey", key, kind, row["agent"]))
        assert session is not None  # the ready list named it: every input is recorded
        agent = ctx.agents.get(row["agent"])
        ours = agent if agent is not None and agent.session == row["session"] else None
        report = session.final.get("report") if session.end == FINISHED and session.final else None
        mail = None
        if report and ours is not None:
            question = " ".join(row["prompt"].split())
            if len(question) > TITLE_QUESTION_CHARS:
                question = question[: TITLE_QUESTION_CHARS - 1].rstrip() + "…"
            title = ctx.texts.render("survey_mail_title", number=row["id"], question=question)
            mail = mail_from_station(ctx, SURVEYOR, ours, title, report).number
        elif ours is not None and ours.active:
            cfg = ctx.config.section(ArchiveConfig).survey
            reason = ctx.texts.render(f"survey_reason_{session.end}", max_turns=cfg.max_turns)
            ctx.notify(ours, ctx.texts.render("survey_failed", number=row["id"], reason=reason), "survey")
        status = "delivered" if mail is not None else "failed"
        ctx.store.execute(
            "UPDATE surveys SET status=?, end_reason=?, turns=?, report=?, mail=?, finished_tick=? WHERE id=?",
            (status, session.end, len(session.turns), report, mail, ctx.tick, row["id"]),
        )
        ctx.emit(SurveyEnded(survey=row["id"], status=status, mail=mail), row["agent"])


class SurveyWorker(InputWorker):
    """Records the surveys' inputs ahead of the engine; changes nothing else.

    Each open survey is walked on a thread of its own (with its own connection), so one agent's long
    survey does not hold back another's; a survey whose every input is recorded waits for the engine.
    """

    discard_late = True  # a model call or a tool run cut short by the shutdown is not a result

    def __init__(self, directory: Path, config: Any, texts: Any, models: Any, hidden: list[Path]) -> None:
        super().__init__("archive-surveyor", directory, config)
        self.texts, self.models, self.hidden = texts, models, hidden
        self.executor: Any = None
        self.failure: str | None = None  # what stops every survey until the operator acts (a cap, a bad key)
        self.inflight: dict[int, threading.Thread] = {}
        self.complete: set[int] = set()  # every input recorded: the engine applies them
        self.retry_at: dict[int, float] = {}  # a survey whose walk broke unexpectedly waits a little
        self._lock = threading.Lock()

    def serve(self, store: Store) -> None:
        try:
            while not self.stop.is_set() and self.failure is None:
                self._start_walks(store)
                self.idle(POLL_SECONDS)
        finally:
            self._join(10.0)
            if self.executor is not None:
                self.executor.close()

    def shutdown(self, timeout: float) -> None:
        self.stop.set()
        if self.executor is not None:
            self.executor.close()  # a tool run in flight ends now; its result is not recorded
        super().shutdown(timeout)

    def _start_walks(self, store: Store) -> None:
        with self._lock:
            for number in [n for n, thread in self.inflight.items() if not thread.is_alive()]:
                del self.inflight[number]
        now = time.monotonic()
        for row in open_surveys(store):
            number = row["id"]
            if number in self.inflight or number in self.complete or self.retry_at.get(number, 0.0) > now:
                continue
            thread = threading.Thread(target=self._survey, args=(dict(row),), name=f"survey-{number}", daemon=True)
            with self._lock:
                self.inflight[number] = thread
            thread.start()

    def _join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self.inflight.values())
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _survey(self, row: dict[str, Any]) -> None:
        """Walk one survey to its end, producing its missing inputs, on this thread's own connection."""
        store = Store(self.directory)
        try:
            if self._walk(store, row) is not None:
                survey_session.remove_folders(store.files, row["id"])  # every input is recorded: the files served
                self.complete.add(row["id"])
        except Stopped:
            pass
        except (BudgetExceeded, ModelError, SandboxUnavailable) as err:  # a cap, a bad key, the machine
            self.failure = str(err) or type(err).__name__
            self.recorded.set()  # wakes a tick that waits on a survey
        except Exception as err:  # noqa: BLE001 - retried shortly; the engine waits only on held surveys
            if not self.stop.is_set():
                log.exception("survey %s failed in the surveyor; retrying shortly", row["id"])
                self.error = repr(err)
                self.retry_at[row["id"]] = time.monotonic() + ERROR_PAUSE_SECONDS
        finally:
            store.close()
            self.wake.set()

    def _walk(self, store: Store, row: dict[str, Any]) -> Session | None:
        cfg = self.config.section(ArchiveConfig).survey
        written = False

        def fetch(key: str, kind: str, make: Any) -> dict[str, Any]:
            nonlocal written
            found = store.get_input(key)
            if found is not None:
                return found
            if not written:  # the first input to produce: the tools need the folders
                survey_session.write_folders(store, self.config, self.texts, row)
                written = True
            return self.produce(store, key, kind, row["agent"], make)

        return survey_session.walk(
            row,
            fetch,
            sandbox=sandbox_tools(store.files, row["id"], self._executor()),
            cfg=cfg,
            texts=self.texts,
            call=model_call(lambda: self.models.get(cfg.model), "surveyor"),
        )

    def _executor(self) -> Any:
        """The local sandbox, as evaluations use it (the folders are on this machine, whatever runs evaluations)."""
        with self._lock:
            if self.executor is None:
                scratch = self.config.section(ResearchConfig).executor.scratch_dir
                self.executor = create_executor(ExecutorConfig(kind="local"), hide=self.hidden, scratch_base=scratch)
            return self.executor
