"""The archive reviewer: one sequential reviewing dialogue that judges paper submissions (spec capsules §7).

The reviewer is not an agent. Its dialogue lives in this hook's tables: turn 1 is a context
turn (the research task, the papers already published, the publication criteria), then one
turn per submission. A verdict is a 1-10 score read from the reply's ```yaml block; a paper
scoring at least `reviewer.pass_threshold` is published through the Archive room with the
review as its message 2, and the author (or, if the author has left, the author's lineage) is
told. Every model call is a recorded input, so replay rebuilds the same verdicts without
asking the model.

The dialogue's shape is a pure function of the recorded inputs: which call comes next (the
context turn, a submission, a retry after an unreadable verdict) and its key
(`review-context/<generation>/<try>`, `review/<submission>/<attempt>`) follow from the
dialogue so far, and the text sent is stored inside the input. That is what lets the
verdicts be produced ahead of time by a background worker (`hold_tick: false`; the machinery
is station/core/background.py's): the worker walks the same path on its own connection, recording
inputs only, and at each tick end the engine applies the submissions whose inputs are
complete, that list itself being a recorded input (`reviews-ready/<tick>`). With
`hold_tick: true` (the default) every pending paper is reviewed at the end of the tick it
was submitted in, before the next tick starts.

An unreadable verdict is asked for again in the same dialogue; a provider error is retried
with the same request; after `reviewer.max_attempts` the submission is closed as failed, the
author is told, the operator is alerted, and nothing waits on it any more.

The verdict is read in verdict.py, and the dialogue (its turns, a submission's walk through it,
the messages sent) is kept in dialogue.py; this module holds the hook that drives it, what a
verdict does, and the background worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rooms.archive.config import ReviewerConfig
from rooms.archive.events import PaperReviewed, PaperSubmitted
from station.core.agents import Agent, AgentRegistry
from station.core.background import InputWorker, Stopped, apply_ready, recorded
from station.core.context import Context, Hook, request_hash
from station.core.conversation import Conversations
from station.core.events import OperatorAlert, TickEnding, TurnStarted, on
from station.core.model_api import INTERRUPTED, PERMANENT
from station.core.store import Store, dumps
from station.models import ModelError

from .dialogue import Dialogue, Prompts, ReviewOutcome, review_submission
from .verdict import PaperVerdict

if TYPE_CHECKING:
    from .room import ArchiveRoom  # the room hands itself over (it imports this module)

MIGRATIONS = [
    """
    CREATE TABLE reviewer_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        generation INTEGER NOT NULL,       -- the context turn's generation (a new one after each pruning)
        context_tries INTEGER NOT NULL     -- failed context calls of this generation
    );
    INSERT INTO reviewer_state(id, generation, context_tries) VALUES(1, 1, 0);
    CREATE TABLE reviewer_turns (
        seq INTEGER PRIMARY KEY,
        tick INTEGER NOT NULL,             -- tick in which the turn was applied
        generation INTEGER NOT NULL,
        submission INTEGER,                -- NULL: the context turn
        role TEXT NOT NULL,                -- user (what was sent) / assistant (the reviewer's reply)
        text TEXT NOT NULL,
        last_paper INTEGER NOT NULL DEFAULT 0,  -- highest paper number this turn told the reviewer about
        state TEXT NOT NULL DEFAULT 'live' -- live / pruned / dropped (turns of a failed submission)
    );
    CREATE INDEX reviewer_turns_live ON reviewer_turns(state, seq);
    CREATE TABLE paper_reviews (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        submission INTEGER NOT NULL,
        kind TEXT NOT NULL,                -- context / review
        attempt INTEGER NOT NULL,
        input_key TEXT NOT NULL,
        tick INTEGER NOT NULL,             -- tick in which the verdict was applied
        model TEXT NOT NULL,               -- the model that answered (as recorded in the input)
        history TEXT NOT NULL,             -- JSON: reviewer_turns seqs sent before the prompt
        prompt TEXT NOT NULL,              -- the message sent in this call
        response TEXT,
        thinking TEXT,
        error TEXT,
        extracted TEXT,                    -- JSON: the verdict read from the response, if any
        status TEXT NOT NULL,              -- acknowledged / success / parsing_error / unreadable / model_error /
                                           -- empty_reply
        decision TEXT NOT NULL             -- acknowledged / retry / accepted / rejected / failed
    );
    CREATE INDEX paper_reviews_submission ON paper_reviews(submission, id);
    """
]

POLL_SECONDS = 0.5  # the background worker's queue poll (it is also woken by each new submission)
ERROR_PAUSE_SECONDS = 5.0
AUTHOR_OF_CALLS = "reviewer"  # the `agent` argument of the reviewer's model calls
log = logging.getLogger(__name__)


def call_model(
    get_model: Callable[[], Any], system: str, messages: list[dict[str, str]], prompt: str, last_paper: int
) -> dict[str, Any]:
    """One reviewer call as a recorded payload; a provider failure is recorded too (as `error`).

    The model is looked up only here, when a call is really made, so a replay never needs the
    reviewer's provider (or its credentials), and a provider that cannot even be set up counts
    as a failed attempt like any other provider error.
    """
    base = {"prompt": prompt, "last_paper": last_paper, "model": None}
    try:
        model = get_model()
        base["model"] = getattr(model, "name", None)
        reply = model.complete(messages, system=system, agent=AUTHOR_OF_CALLS)
    except ModelError as err:
        if err.kind in (PERMANENT, INTERRUPTED):
            raise  # a bad key or a stop: retrying later must not cost the paper one of its attempts
        return {**base, "text": None, "thinking": None, "error": str(err) or type(err).__name__}
    return {**base, **reply.to_payload(), "error": None}


def pending(store: Store) -> list[Any]:
    return store.all("SELECT * FROM paper_submissions WHERE status='pending' ORDER BY id")


def ready_submissions(store: Store, cfg: Any) -> list[int]:
    """Pending submissions, in order, whose every input is recorded already (a prefix of the queue)."""
    dialogue = Dialogue.load(store)
    ready = []
    for row in pending(store):
        if review_submission(dialogue, row, cfg, lambda key, *_: store.get_input(key), None) is None:
            break
        ready.append(row["id"])
    return ready


# -- the hook ---------------------------------------------------------------------------------
class Reviewer(Hook):
    name = "reviewer"
    order = 50
    migrations = MIGRATIONS

    def __init__(self, archive: ArchiveRoom) -> None:
        self.archive = archive  # where accepted papers are published
        self.worker: ReviewWorker | None = None

    @on(PaperSubmitted)
    def wake(self, ctx: Context, agent: str | None, event: PaperSubmitted) -> None:
        if self._in_background(ctx) and ctx.replay_source is None and self.worker is not None:
            self.worker.wake.set()

    @on(TurnStarted)
    def keep_working(self, ctx: Context, agent: str | None, event: TurnStarted) -> None:
        self._in_background(ctx)

    @on(TickEnding)
    def review(self, ctx: Context, agent: str | None, event: TickEnding) -> None:
        background = self._in_background(ctx)
        rows = pending(ctx.store)
        if not rows:
            return
        if background:
            self._apply_ready(ctx, rows)
        else:
            self._review_now(ctx, rows)

    def _in_background(self, ctx: Context) -> bool:
        """Whether reviews run on the worker rather than at the tick's end; outside a replay the
        worker is started (again, if it died)."""
        background = not ctx.config.section(ReviewerConfig).hold_tick
        if background and ctx.replay_source is None:
            self._start_worker(ctx)
        return background

    # -- hold_tick: true ------------------------------------------------------------------
    def _review_now(self, ctx: Context, rows: list[Any]) -> None:
        cfg = ctx.config.section(ReviewerConfig)
        system = ctx.texts.render("reviewer_system")

        def fetch(key: str, kind: str, agent: str | None, history: list, make: Callable) -> dict[str, Any]:
            prompt, last_paper = make()
            messages = history + [{"role": "user", "text": prompt}]
            return ctx.obtain(
                key,
                kind,
                agent,
                lambda: call_model(lambda: ctx.models.get(cfg.model), system, messages, prompt, last_paper),
                request_hash(messages),
            )

        dialogue, prompts = Dialogue.load(ctx.store), Prompts(ctx)
        for row in rows:
            outcome = review_submission(dialogue, row, cfg, fetch, prompts)
            assert outcome is not None  # ctx.obtain always answers (or raises NeedInput)
            dialogue.save(ctx.store, ctx.tick)
            self._apply(ctx, row, outcome)

    # -- hold_tick: false -----------------------------------------------------------------
    def _apply_ready(self, ctx: Context, rows: list[Any]) -> None:
        cfg, store = ctx.config.section(ReviewerConfig), ctx.store
        dialogue = Dialogue.load(store)

        def fetch(key: str, kind: str, agent: str | None, history: list, make: Callable) -> dict[str, Any]:
            return recorded(ctx, "reviewer", key, kind, agent, request_hash(history))

        def review(row: Any) -> None:
            outcome = review_submission(dialogue, row, cfg, fetch, None)
            assert outcome is not None
            dialogue.save(store, ctx.tick)
            self._apply(ctx, row, outcome)

        # the dialogue takes the submissions in order: the first one not ready holds back the rest
        apply_ready(
            ctx,
            f"reviews-ready/{ctx.tick}",
            "reviews_ready",
            rows,
            lambda: ready_submissions(store, cfg),
            review,
            in_order=True,
            inline=True,  # reads what is recorded, waits for nothing
        )

    def _start_worker(self, ctx: Context) -> None:
        if self.worker is not None and self.worker.is_alive():
            return
        self.worker = ReviewWorker(ctx.store.dir, ctx.config, ctx.texts, ctx.rooms, ctx.models)
        self.worker.start()

    def close(self) -> None:
        self.stop_worker()

    def stop_worker(self, timeout: float = 10.0) -> None:
        """Stop the background worker (if any) after its current model call."""
        if self.worker is not None:
            self.worker.shutdown(timeout)
            self.worker = None

    # -- a verdict's effects (spec §7.6) ----------------------------------------------------
    def _apply(self, ctx: Context, row: Any, outcome: ReviewOutcome) -> None:
        verdict = outcome.verdict
        if verdict is None:
            decision = "failed"
        else:
            decision = "accepted" if verdict.score >= ctx.config.section(ReviewerConfig).pass_threshold else "rejected"
        self._record_calls(ctx, row, outcome, decision)
        author = ctx.agents.get(row["agent"])
        present = author is not None and author.active and author.session == row["session"]
        if verdict is None:
            self._failed(ctx, row, outcome.attempts, author, present)
        else:
            self._decided(ctx, row, verdict, outcome.attempts, decision, author, present)

    def _failed(self, ctx: Context, row: Any, attempts: int, author: Agent | None, present: bool) -> None:
        """Every attempt failed: the submission is closed, its author (if still present) and the operator told."""
        ctx.store.execute(
            "UPDATE paper_submissions SET status='failed', attempts=?, verdict=?, decided_tick=? WHERE id=?",
            (attempts, dumps({"status": "failed"}), ctx.tick, row["id"]),
        )
        if present and author is not None:
            ctx.notify(author, ctx.texts.render("reviewer_failed", title=row["title"], attempts=attempts), "review")
        ctx.emit(
            OperatorAlert("paper review failed", details={"submission": row["id"], "attempts": attempts}), row["agent"]
        )
        ctx.emit(PaperReviewed(submission=row["id"], decision="failed", score=None, paper=None), row["agent"])

    def _decided(
        self,
        ctx: Context,
        row: Any,
        verdict: PaperVerdict,
        attempts: int,
        decision: str,
        author: Agent | None,
        present: bool,
    ) -> None:
        """A verdict was read: the paper is published (accepted) or not, and the author is told."""
        cfg, texts = ctx.config.section(ReviewerConfig), ctx.texts
        fallback = verdict.status == "parsing_error"
        comment = verdict.comment or texts.render("reviewer_fallback_comment" if fallback else "reviewer_no_comment")
        suggestion = verdict.suggestion or texts.render(
            "reviewer_fallback_suggestion" if fallback else "reviewer_no_suggestion"
        )
        number = None
        if decision == "accepted":
            extra = "".join(
                f"\n{name.replace('_', ' ').title()}: {'n/a' if value is None else value}"
                for name, value in verdict.extra.items()
            )
            review = texts.render(
                "reviewer_review", score=verdict.score, extra_lines=extra, comment=comment, suggestion=suggestion
            )
            number = self.archive.publish(ctx, row, review)
        record = {**verdict.as_dict(), "comment": comment, "suggestion": suggestion}
        ctx.store.execute(
            "UPDATE paper_submissions SET status=?, attempts=?, score=?, verdict=?, decided_tick=?, "
            "capsule_number=? WHERE id=?",
            (decision, attempts, verdict.score, dumps(record), ctx.tick, number, row["id"]),
        )
        if decision == "rejected":
            if present and author is not None:
                ctx.notify(
                    author,
                    texts.render(
                        "reviewer_rejected",
                        title=row["title"],
                        score=verdict.score,
                        threshold=cfg.pass_threshold,
                        comment=comment,
                        suggestion=suggestion,
                    ),
                    "review",
                )
        else:
            self._announce(ctx, row, verdict, number, comment, suggestion, author, present)
        ctx.emit(
            PaperReviewed(submission=row["id"], decision=decision, score=verdict.score, paper=number), row["agent"]
        )

    def _announce(
        self,
        ctx: Context,
        row: Any,
        verdict: PaperVerdict,
        number: int | None,
        comment: str,
        suggestion: str,
        author: Any,
        present: bool,
    ) -> None:
        """An accepted paper: its author (or, if gone, the author's lineage) is told, then everyone else."""
        texts = ctx.texts
        told = {row["agent"]}
        if present:
            ctx.notify(
                author,
                texts.render(
                    "reviewer_accepted",
                    title=row["title"],
                    number=number,
                    score=verdict.score,
                    comment=comment,
                    suggestion=suggestion,
                ),
                "review",
            )
        elif row["lineage"]:
            for kin in ctx.agents.active_of_lineage(row["lineage"]):
                if kin.lineage == row["lineage"]:
                    ctx.notify(
                        kin,
                        texts.render(
                            "reviewer_lineage_published",
                            author=row["agent"],
                            lineage=row["lineage"],
                            title=row["title"],
                            number=number,
                            score=verdict.score,
                        ),
                        "review",
                    )
                    told.add(kin.name)
        description = author.description if author is not None else ""
        ctx.broadcast(
            texts.render(
                "reviewer_announcement", author=row["agent"], description=description, title=row["title"], number=number
            ),
            "publication",
            exclude=sorted(told),
        )

    def _record_calls(self, ctx: Context, row: Any, outcome: ReviewOutcome, decision: str) -> None:
        configured = ctx.config.section(ReviewerConfig).model.name
        last = len(outcome.calls) - 1
        for i, call in enumerate(outcome.calls):
            p = call.payload
            if i == last:
                step = decision
            else:
                step = "acknowledged" if call.status == "acknowledged" else "retry"
            ctx.store.execute(
                "INSERT INTO paper_reviews(submission, kind, attempt, input_key, tick, model, history, prompt, "
                "response, thinking, error, extracted, status, decision) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    row["id"],
                    call.kind,
                    call.attempt,
                    call.key,
                    ctx.tick,
                    p.get("model") or configured,
                    dumps(call.history),
                    p.get("prompt") or "",
                    p.get("text"),
                    p.get("thinking"),
                    p.get("error"),
                    dumps(call.verdict.as_dict()) if call.verdict else None,
                    call.status,
                    step,
                ),
            )


# -- hold_tick: false — verdicts produced ahead of time ----------------------------------------
class ReviewWorker(InputWorker):
    """Records the reviewer's inputs ahead of the engine, on its own connection; changes nothing else.

    Each round it reads the dialogue and the queue in one snapshot and walks the pending
    submissions with the same `review_submission` the engine uses, asking the model only for
    inputs not recorded yet. The engine applies what is complete at the next tick end.
    """

    def __init__(self, directory: Any, config: Any, texts: Any, rooms: dict[str, Any], models: Any) -> None:
        super().__init__("archive-reviewer", directory, config)
        self.texts, self.rooms = texts, rooms
        self.models = models  # the station's pool: budgets and spend cover the reviewer too
        self.calls = 0

    def serve(self, store: Store) -> None:
        ctx = Context(store, self.config, self.texts, AgentRegistry(store), Conversations(store, []))
        ctx.rooms = self.rooms

        def get_model() -> Any:
            return self.models.get(self.config.section(ReviewerConfig).model)

        system = self.texts.render("reviewer_system")
        while not self.stop.is_set():
            wait = POLL_SECONDS
            try:
                busy = self._round(ctx, get_model, system)
            except Stopped:
                break
            except Exception as err:  # noqa: BLE001 - keep serving; the engine never waits on us
                log.exception("the background reviewer failed a round; retrying shortly")
                self.error, busy, wait = repr(err), False, ERROR_PAUSE_SECONDS
                ctx.agents.invalidate()
            if not busy:
                self.idle(wait)

    def _round(self, ctx: Context, get_model: Callable[[], Any], system: str) -> bool:
        store, cfg = ctx.store, self.config.section(ReviewerConfig)
        store.execute("BEGIN")  # one read snapshot: the dialogue and the queue must agree
        try:
            dialogue, rows = Dialogue.load(store), pending(store)
        finally:
            store.execute("COMMIT")
        prompts, before = Prompts(ctx), self.calls

        def fetch(key: str, kind: str, agent: str | None, history: list, make: Callable) -> dict[str, Any]:
            def ask() -> dict[str, Any]:
                prompt, last_paper = make()
                payload = call_model(
                    get_model, system, history + [{"role": "user", "text": prompt}], prompt, last_paper
                )
                self.calls += 1
                return payload

            return self.produce(store, key, kind, agent, ask, request_hash(history))

        for row in rows:
            review_submission(dialogue, row, cfg, fetch, prompts)
        return self.calls > before
