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
is station/background.py's): the worker walks the same path on its own connection, recording
inputs only, and at each tick end the engine applies the submissions whose inputs are
complete, that list itself being a recorded input (`reviews-ready/<tick>`). With
`hold_tick: true` (the default) every pending paper is reviewed at the end of the tick it
was submitted in, before the next tick starts.

An unreadable verdict is asked for again in the same dialogue; a provider error is retried
with the same request; after `reviewer.max_attempts` the submission is closed as failed, the
author is told, the operator is alerted, and nothing waits on it any more.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import yaml

from station.agents import AgentRegistry
from station.background import InputWorker, Stopped, apply_ready, recorded
from station.context import Context, Event, Hook, request_hash
from station.conversation import Conversations
from station.models import ModelError
from station.models.base import INTERRUPTED, PERMANENT
from station.store import Store, dumps

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
    """,
]

POLL_SECONDS = 0.5  # the background worker's queue poll (it is also woken by each new submission)
ERROR_PAUSE_SECONDS = 5.0
AUTHOR_OF_CALLS = "reviewer"  # the `agent` argument of the reviewer's model calls
log = logging.getLogger(__name__)


# -- reading a verdict (spec §7.5) ------------------------------------------------------------
YAML_OPEN = re.compile(r"```\s*yaml", re.IGNORECASE)
SCORE_TEXT = re.compile(r"(?<![a-z_])score\s*\**\s*:\s*\**\s*(10|[1-9])\b")
LEADING_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


@dataclass
class Verdict:
    score: int
    comment: str | None
    suggestion: str | None
    extra: dict[str, Any]
    status: str  # "success" (from the YAML block) or "parsing_error" (score read from free text)
    decision: str | None = None  # the reviewer's own accept/reject word, if it gave one

    def as_dict(self) -> dict[str, Any]:
        return {"score": self.score, "comment": self.comment, "suggestion": self.suggestion,
                "extra": self.extra, "status": self.status, "reviewer_decision": self.decision}


def _score(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        found = LEADING_NUMBER.match(str(value))
        if not found:
            return None
        number = float(found.group(1))
    return max(1, min(10, int(number)))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        text = "\n".join(f"- {item}" for item in value)
    else:
        text = str(value)
    return text.strip() or None


def _field(value: Any) -> Any:
    """An extra field: a number when it reads as one, else a string; None when missing."""
    if value is None or isinstance(value, bool):
        return None if value is None else str(value).lower()
    if isinstance(value, (int, float)):
        return value
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() and "." not in text else number


def _yaml_mapping(text: str) -> dict | None:
    """The first ```yaml block (up to the next line holding ```), if it is a mapping."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if YAML_OPEN.search(line)), None)
    if start is None:
        return None
    end = next((j for j in range(start + 1, len(lines)) if "```" in lines[j]), None)
    if end is None:
        return None
    try:
        data = yaml.safe_load("\n".join(lines[start + 1:end]))
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def parse_verdict(text: str, extra_fields: Iterable[str] = ()) -> Verdict | None:
    """The verdict in a reviewer's reply, or None when it holds no score at all.

    The first ```yaml block is read as a mapping (score clamped to 1-10, comment, suggestion,
    extra fields, an optional `decision`). Without a usable block, the last `score: N` in the
    text is taken (N from 1 to 10) and the verdict is marked `parsing_error`.
    """
    extra_fields = list(extra_fields)
    data = _yaml_mapping(text)
    if data is not None:
        score = _score(data.get("score"))
        if score is not None:
            return Verdict(score, _text(data.get("comment")), _text(data.get("suggestion")),
                           {name: _field(data.get(name)) for name in extra_fields}, "success",
                           _text(data.get("decision")))
    found = SCORE_TEXT.findall(text.lower())
    if found:
        return Verdict(int(found[-1]), None, None, {name: None for name in extra_fields}, "parsing_error")
    return None


# -- the reviewer's dialogue -----------------------------------------------------------------
@dataclass
class Turn:
    seq: int
    generation: int
    submission: int | None
    role: str
    text: str
    last_paper: int = 0
    state: str = "live"


class Dialogue:
    """The live part of the reviewer's dialogue, and how it changes. Loaded from and saved to the store."""

    def __init__(self, turns: list[Turn], generation: int, context_tries: int, next_seq: int) -> None:
        self.turns = turns  # live turns, in the order they were written
        self.generation, self.context_tries = generation, context_tries
        self.next_seq = next_seq
        self._touched: dict[int, Turn] = {}
        self._stored = {t.seq for t in turns}

    @classmethod
    def load(cls, store: Store) -> "Dialogue":
        state = store.one("SELECT generation, context_tries FROM reviewer_state WHERE id=1")
        rows = store.all("SELECT * FROM reviewer_turns WHERE state='live' ORDER BY seq")
        turns = [Turn(r["seq"], r["generation"], r["submission"], r["role"], r["text"], r["last_paper"])
                 for r in rows]
        last = store.scalar("SELECT MAX(seq) FROM reviewer_turns") or 0
        return cls(turns, state["generation"], state["context_tries"], last + 1)

    def save(self, store: Store, tick: int) -> None:
        store.execute("UPDATE reviewer_state SET generation=?, context_tries=? WHERE id=1",
                      (self.generation, self.context_tries))
        for turn in sorted(self._touched.values(), key=lambda t: t.seq):
            if turn.seq in self._stored:
                store.execute("UPDATE reviewer_turns SET state=? WHERE seq=?", (turn.state, turn.seq))
            else:
                store.execute("INSERT INTO reviewer_turns(seq, tick, generation, submission, role, text, last_paper, "
                              "state) VALUES(?,?,?,?,?,?,?,?)", (turn.seq, tick, turn.generation, turn.submission,
                                                                  turn.role, turn.text, turn.last_paper, turn.state))
                self._stored.add(turn.seq)
        self._touched.clear()

    # -- what is sent ---------------------------------------------------------------------
    def ordered(self) -> list[Turn]:
        """The context turn first (it is rewritten after pruning), then the reviews in order."""
        return [t for t in self.turns if t.submission is None] + [t for t in self.turns if t.submission is not None]

    def messages(self) -> list[dict[str, str]]:
        return [{"role": t.role, "text": t.text} for t in self.ordered()]

    def has_context(self) -> bool:
        return any(t.submission is None and t.role == "assistant" for t in self.turns)

    def reviews(self) -> list[int]:
        return list(dict.fromkeys(t.submission for t in self.turns if t.submission is not None))

    def has_turns(self, submission: int) -> bool:
        return any(t.submission == submission for t in self.turns)

    def last_paper(self) -> int:
        return max((t.last_paper for t in self.turns), default=0)

    # -- changes --------------------------------------------------------------------------
    def add(self, submission: int | None, role: str, text: str, last_paper: int = 0) -> None:
        turn = Turn(self.next_seq, self.generation, submission, role, text, last_paper)
        self.next_seq += 1
        self.turns.append(turn)
        self._touched[turn.seq] = turn

    def _retire(self, turns: list[Turn], state: str) -> None:
        for turn in turns:
            turn.state = state
            self._touched[turn.seq] = turn
        gone = {t.seq for t in turns}
        self.turns = [t for t in self.turns if t.seq not in gone]

    def prune(self, keep: int) -> None:
        """Keep the newest `keep` reviews; the context turn is written afresh before the next call."""
        kept = set(self.reviews()[-keep:])
        self._retire([t for t in self.turns if t.submission not in kept], "pruned")
        self.generation += 1
        self.context_tries = 0

    def drop(self, submission: int) -> None:
        """A failed submission's exchanges leave the dialogue: there is no verdict to remember."""
        self._retire([t for t in self.turns if t.submission == submission], "dropped")


# -- one submission, as a path through recorded inputs ---------------------------------------
# fetch(key, kind, agent, history, make_prompt) -> the input's payload, or None when it is not
# recorded (only the readiness check answers None). `history` is the dialogue sent before the
# new message; make_prompt() -> (the new message, the highest paper number it mentions) is
# called by a fetch that may ask the model, and by the hold-mode fetch to fingerprint the request.
Fetch = Callable[..., "dict[str, Any] | None"]


@dataclass
class Call:
    kind: str  # "context" or "review"
    attempt: int
    key: str
    history: list[int]
    payload: dict[str, Any]
    status: str
    verdict: Verdict | None = None


@dataclass
class Outcome:
    verdict: Verdict | None  # None: every attempt failed
    attempts: int
    calls: list[Call] = field(default_factory=list)


def answered(payload: dict[str, Any]) -> bool:
    return not payload.get("error") and bool((payload.get("text") or "").strip())


def failure(payload: dict[str, Any]) -> str:
    return "model_error" if payload.get("error") else "empty_reply"


def review_submission(dialogue: Dialogue, submission: Any, cfg: Any, fetch: Fetch, prompts: "Prompts | None"
                      ) -> Outcome | None:
    """Walk one submission through the dialogue (pruning, context turn, attempts).

    Returns None as soon as `fetch` has no payload for a step (the readiness check); the
    dialogue is then left half-way and must be thrown away.
    """
    sub_id = submission["id"]
    calls: list[Call] = []
    if len(dialogue.reviews()) >= cfg.history_max:
        dialogue.prune(cfg.history_keep)
    for attempt in range(1, cfg.max_attempts + 1):
        if not dialogue.has_context():
            key = f"review-context/{dialogue.generation}/{dialogue.context_tries + 1}"
            payload = fetch(key, "review_context", None, [],
                            (lambda: prompts.context()) if prompts else _no_prompt)
            if payload is None:
                return None
            if answered(payload):
                dialogue.add(None, "user", payload["prompt"], int(payload.get("last_paper") or 0))
                dialogue.add(None, "assistant", payload["text"])
                calls.append(Call("context", attempt, key, [], payload, "acknowledged"))
            else:
                dialogue.context_tries += 1
                calls.append(Call("context", attempt, key, [], payload, failure(payload)))
                continue
        history = [t.seq for t in dialogue.ordered()]
        since = dialogue.last_paper()
        if dialogue.has_turns(sub_id):
            make = (lambda: prompts.retry()) if prompts else _no_prompt
        else:
            make = (lambda: prompts.submission(submission, since)) if prompts else _no_prompt
        key = f"review/{sub_id}/{attempt}"
        payload = fetch(key, "review", submission["agent"], dialogue.messages(), make)
        if payload is None:
            return None
        if not answered(payload):
            calls.append(Call("review", attempt, key, history, payload, failure(payload)))
            continue
        dialogue.add(sub_id, "user", payload["prompt"], int(payload.get("last_paper") or 0))
        dialogue.add(sub_id, "assistant", payload["text"])
        verdict = parse_verdict(payload["text"], cfg.extra_fields)
        if verdict is None:
            calls.append(Call("review", attempt, key, history, payload, "unreadable"))
            continue
        calls.append(Call("review", attempt, key, history, payload, verdict.status, verdict))
        return Outcome(verdict, attempt, calls)
    dialogue.drop(sub_id)
    return Outcome(None, cfg.max_attempts, calls)


def _no_prompt() -> tuple[str, int]:
    raise RuntimeError("the reviewer tried to build a prompt where only recorded inputs may be used")


# -- what the reviewer is sent -----------------------------------------------------------------
class Prompts:
    """The reviewer's messages, built from the world as `ctx.store` shows it now."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def papers(self, after: int = 0) -> list[Any]:
        return self.ctx.store.all(
            "SELECT number, title, author, created_tick, abstract FROM capsules WHERE room='archive' AND scope='' "
            "AND deleted=0 AND number>? ORDER BY number", (after,))

    def _entries(self, rows: list[Any]) -> str:
        return "\n".join(self.ctx.texts.render("reviewer_paper_entry", number=r["number"], title=r["title"],
                                               author=r["author"], tick=r["created_tick"],
                                               abstract=" ".join((r["abstract"] or "").split()))
                         for r in rows)

    def task(self) -> str:
        room = self.ctx.room("research")
        text = room.task_summary(self.ctx) if room is not None else None
        return text.strip() if text and text.strip() else self.ctx.texts.render("reviewer_no_task")

    def _extra_fields(self) -> str:
        fields = self.ctx.config.reviewer.extra_fields
        return "".join(self.ctx.texts.render("reviewer_extra_field", name=name) + "\n" for name in fields)

    def context(self) -> tuple[str, int]:
        rows = self.papers()
        papers = self._entries(rows) if rows else self.ctx.texts.render("reviewer_no_papers")
        text = self.ctx.texts.render("reviewer_context", task=self.task(), papers=papers)
        return text, max((r["number"] for r in rows), default=0)

    def submission(self, submission: Any, since: int) -> tuple[str, int]:
        rows = self.papers(after=since)
        new = ("\n" + self.ctx.texts.render("reviewer_new_papers", papers=self._entries(rows)) + "\n") if rows else ""
        tags = ", ".join(json.loads(submission["tags"] or "[]"))
        text = self.ctx.texts.render(
            "reviewer_submission", title=submission["title"], tags=tags or "(none)",
            word_count=len(submission["content"].split()), new_papers=new, abstract=submission["abstract"],
            content=submission["content"], extra_fields=self._extra_fields())
        return text, max([since, *(r["number"] for r in rows)])

    def retry(self) -> tuple[str, int]:
        return self.ctx.texts.render("reviewer_retry", extra_fields=self._extra_fields()), 0


def call_model(get_model: Callable[[], Any], system: str, messages: list[dict[str, str]], prompt: str,
               last_paper: int) -> dict[str, Any]:
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
    events = ("tick_ending", "paper_submitted", "turn_started")
    migrations = MIGRATIONS

    def __init__(self) -> None:
        self.worker: ReviewWorker | None = None

    def handle(self, ctx: Context, event: Event) -> None:
        background = not ctx.config.reviewer.hold_tick
        if background and ctx.replay_source is None:
            self._start_worker(ctx)
            if event.kind == "paper_submitted" and self.worker is not None:
                self.worker.wake.set()
        if event.kind != "tick_ending":
            return
        rows = pending(ctx.store)
        if not rows:
            return
        if background:
            self._apply_ready(ctx, rows)
        else:
            self._review_now(ctx, rows)

    # -- hold_tick: true ------------------------------------------------------------------
    def _review_now(self, ctx: Context, rows: list[Any]) -> None:
        cfg = ctx.config.reviewer
        system = ctx.texts.render("reviewer_system")

        def fetch(key: str, kind: str, agent: str | None, history: list, make: Callable) -> dict[str, Any]:
            prompt, last_paper = make()
            messages = history + [{"role": "user", "text": prompt}]
            return ctx.obtain(key, kind, agent,
                              lambda: call_model(lambda: ctx.models.get(cfg.model), system, messages, prompt,
                                                 last_paper),
                              request_hash(messages))

        dialogue, prompts = Dialogue.load(ctx.store), Prompts(ctx)
        for row in rows:
            outcome = review_submission(dialogue, row, cfg, fetch, prompts)
            assert outcome is not None  # ctx.obtain always answers (or raises NeedInput)
            dialogue.save(ctx.store, ctx.tick)
            self._apply(ctx, row, outcome)

    # -- hold_tick: false -----------------------------------------------------------------
    def _apply_ready(self, ctx: Context, rows: list[Any]) -> None:
        cfg, store = ctx.config.reviewer, ctx.store
        dialogue = Dialogue.load(store)

        def fetch(key: str, kind: str, agent: str | None, history: list, make: Callable) -> dict[str, Any]:
            return recorded(ctx, "reviewer", key, kind, agent, request_hash(history))

        def review(row: Any) -> None:
            outcome = review_submission(dialogue, row, cfg, fetch, None)
            assert outcome is not None
            dialogue.save(store, ctx.tick)
            self._apply(ctx, row, outcome)

        # the dialogue takes the submissions in order: the first one not ready holds back the rest
        apply_ready(ctx, f"reviews-ready/{ctx.tick}", "reviews_ready", rows, lambda: ready_submissions(store, cfg),
                    review, in_order=True)

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
    def _apply(self, ctx: Context, row: Any, outcome: Outcome) -> None:
        cfg, texts = ctx.config.reviewer, ctx.texts
        verdict = outcome.verdict
        if verdict is None:
            decision = "failed"
        else:
            decision = "accepted" if verdict.score >= cfg.pass_threshold else "rejected"
        self._record_calls(ctx, row, outcome, decision)
        author = ctx.agents.get(row["agent"])
        present = author is not None and author.active and author.session == row["session"]
        if verdict is None:
            ctx.store.execute("UPDATE paper_submissions SET status='failed', attempts=?, verdict=?, decided_tick=? "
                              "WHERE id=?", (outcome.attempts, dumps({"status": "failed"}), ctx.tick, row["id"]))
            if present:
                ctx.notify(author, texts.render("reviewer_failed", title=row["title"], attempts=outcome.attempts),
                           "review")
            ctx.emit("operator_alert", row["agent"], problem="paper review failed", submission=row["id"],
                     attempts=outcome.attempts)
            ctx.emit("paper_reviewed", row["agent"], submission=row["id"], decision=decision, score=None, paper=None)
            return
        fallback = verdict.status == "parsing_error"
        comment = verdict.comment or texts.render("reviewer_fallback_comment" if fallback else "reviewer_no_comment")
        suggestion = verdict.suggestion or texts.render(
            "reviewer_fallback_suggestion" if fallback else "reviewer_no_suggestion")
        number = None
        if decision == "accepted":
            archive = ctx.room("archive")
            if archive is None or not hasattr(archive, "publish"):
                raise RuntimeError("the reviewer needs the Archive room to publish accepted papers")
            extra = "".join(f"\n{name.replace('_', ' ').title()}: {'n/a' if value is None else value}"
                            for name, value in verdict.extra.items())
            review = texts.render("reviewer_review", score=verdict.score, extra_lines=extra, comment=comment,
                                  suggestion=suggestion)
            number = archive.publish(ctx, row, review)
        record = {**verdict.as_dict(), "comment": comment, "suggestion": suggestion}
        ctx.store.execute("UPDATE paper_submissions SET status=?, attempts=?, score=?, verdict=?, decided_tick=?, "
                          "capsule_number=? WHERE id=?", (decision, outcome.attempts, verdict.score, dumps(record),
                                                          ctx.tick, number, row["id"]))
        if decision == "rejected":
            if present:
                ctx.notify(author, texts.render("reviewer_rejected", title=row["title"], score=verdict.score,
                                                threshold=cfg.pass_threshold, comment=comment,
                                                suggestion=suggestion), "review")
        else:
            told = {row["agent"]}
            if present:
                ctx.notify(author, texts.render("reviewer_accepted", title=row["title"], number=number,
                                                score=verdict.score, comment=comment, suggestion=suggestion),
                           "review")
            elif row["lineage"]:
                for kin in ctx.agents.active():
                    if kin.lineage == row["lineage"]:
                        ctx.notify(kin, texts.render("reviewer_lineage_published", author=row["agent"],
                                                     lineage=row["lineage"], title=row["title"], number=number,
                                                     score=verdict.score), "review")
                        told.add(kin.name)
            description = author.description if author is not None else ""
            ctx.broadcast(texts.render("reviewer_announcement", author=row["agent"], description=description,
                                       title=row["title"], number=number), "publication", exclude=sorted(told))
        ctx.emit("paper_reviewed", row["agent"], submission=row["id"], decision=decision, score=verdict.score,
                 paper=number)

    def _record_calls(self, ctx: Context, row: Any, outcome: Outcome, decision: str) -> None:
        configured = ctx.config.reviewer.model.name
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
                (row["id"], call.kind, call.attempt, call.key, ctx.tick, p.get("model") or configured,
                 dumps(call.history), p.get("prompt") or "", p.get("text"), p.get("thinking"), p.get("error"),
                 dumps(call.verdict.as_dict()) if call.verdict else None, call.status, step))


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
            return self.models.get(self.config.reviewer.model)

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
        store, cfg = ctx.store, self.config.reviewer
        store.execute("BEGIN")  # one read snapshot: the dialogue and the queue must agree
        try:
            dialogue, rows = Dialogue.load(store), pending(store)
        finally:
            store.execute("COMMIT")
        prompts, before = Prompts(ctx), self.calls

        def fetch(key: str, kind: str, agent: str | None, history: list, make: Callable) -> dict[str, Any]:
            def ask() -> dict[str, Any]:
                prompt, last_paper = make()
                payload = call_model(get_model, system, history + [{"role": "user", "text": prompt}], prompt,
                                     last_paper)
                self.calls += 1
                return payload
            return self.produce(store, key, kind, agent, ask, request_hash(history))

        for row in rows:
            review_submission(dialogue, row, cfg, fetch, prompts)
        return self.calls > before
