"""The archive reviewer's dialogue (spec capsules §7): its live turns as stored, the walk of one
submission through it (pruning, the context turn, attempts) over recorded inputs, and the messages
the reviewer is sent. The hook that drives it, and what a verdict does, are in reviewer.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rooms.archive.config import ReviewerConfig
from station.core.context import Context
from station.core.store import Store

from .verdict import PaperVerdict, parse_paper_verdict


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
    def load(cls, store: Store) -> Dialogue:
        state = store.one("SELECT generation, context_tries FROM reviewer_state WHERE id=1")
        assert state is not None  # the reviewer's migration made the one row
        rows = store.all("SELECT * FROM reviewer_turns WHERE state='live' ORDER BY seq")
        turns = [Turn(r["seq"], r["generation"], r["submission"], r["role"], r["text"], r["last_paper"]) for r in rows]
        last = store.scalar("SELECT MAX(seq) FROM reviewer_turns") or 0
        return cls(turns, state["generation"], state["context_tries"], last + 1)

    def save(self, store: Store, tick: int) -> None:
        store.execute(
            "UPDATE reviewer_state SET generation=?, context_tries=? WHERE id=1", (self.generation, self.context_tries)
        )
        for turn in sorted(self._touched.values(), key=lambda t: t.seq):
            if turn.seq in self._stored:
                store.execute("UPDATE reviewer_turns SET state=? WHERE seq=?", (turn.state, turn.seq))
            else:
                store.execute(
                    "INSERT INTO reviewer_turns(seq, tick, generation, submission, role, text, last_paper, "
                    "state) VALUES(?,?,?,?,?,?,?,?)",
                    (
                        turn.seq,
                        tick,
                        turn.generation,
                        turn.submission,
                        turn.role,
                        turn.text,
                        turn.last_paper,
                        turn.state,
                    ),
                )
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
    verdict: PaperVerdict | None = None


@dataclass
class ReviewOutcome:
    verdict: PaperVerdict | None  # None: every attempt failed
    attempts: int
    calls: list[Call] = field(default_factory=list)


def answered(payload: dict[str, Any]) -> bool:
    return not payload.get("error") and bool((payload.get("text") or "").strip())


def failure(payload: dict[str, Any]) -> str:
    return "model_error" if payload.get("error") else "empty_reply"


def review_submission(
    dialogue: Dialogue, submission: Any, cfg: Any, fetch: Fetch, prompts: Prompts | None
) -> ReviewOutcome | None:
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
            payload = fetch(key, "review_context", None, [], (lambda: prompts.context()) if prompts else _no_prompt)
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
            make = (lambda: prompts.submission(submission, since)) if prompts else _no_prompt  # noqa: B023 - called at once, inside this iteration
        key = f"review/{sub_id}/{attempt}"
        payload = fetch(key, "review", submission["agent"], dialogue.messages(), make)
        if payload is None:
            return None
        if not answered(payload):
            calls.append(Call("review", attempt, key, history, payload, failure(payload)))
            continue
        dialogue.add(sub_id, "user", payload["prompt"], int(payload.get("last_paper") or 0))
        dialogue.add(sub_id, "assistant", payload["text"])
        verdict = parse_paper_verdict(payload["text"], cfg.extra_fields)
        if verdict is None:
            calls.append(Call("review", attempt, key, history, payload, "unreadable"))
            continue
        calls.append(Call("review", attempt, key, history, payload, verdict.status, verdict))
        return ReviewOutcome(verdict, attempt, calls)
    dialogue.drop(sub_id)
    return ReviewOutcome(None, cfg.max_attempts, calls)


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
            "AND deleted=0 AND number>? ORDER BY number",
            (after,),
        )

    def _entries(self, rows: list[Any]) -> str:
        return "\n".join(
            self.ctx.texts.render(
                "reviewer_paper_entry",
                number=r["number"],
                title=r["title"],
                author=r["author"],
                tick=r["created_tick"],
                abstract=" ".join((r["abstract"] or "").split()),
            )
            for r in rows
        )

    def task(self) -> str:
        text = self.ctx.task_summary()
        return text.strip() if text and text.strip() else self.ctx.texts.render("reviewer_no_task")

    def _extra_fields(self) -> str:
        fields = self.ctx.config.section(ReviewerConfig).extra_fields
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
            "reviewer_submission",
            title=submission["title"],
            tags=tags or "(none)",
            word_count=len(submission["content"].split()),
            new_papers=new,
            abstract=submission["abstract"],
            content=submission["content"],
            extra_fields=self._extra_fields(),
        )
        return text, max([since, *(r["number"] for r in rows)])

    def retry(self) -> tuple[str, int]:
        return self.ctx.texts.render("reviewer_retry", extra_fields=self._extra_fields()), 0
