"""External Counter: a recursive agent asks the human operator for help (one open request at a time)."""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator

from station.core.agents import Agent
from station.core.context import Context
from station.core.events import Event, event_kind
from station.core.room import Outcome, Params, Room, action, register_room
from station.core.store import Store
from station.models.scripted import Situation, room_play, yaml_block

MIGRATIONS = [
    """CREATE TABLE human_requests (id INTEGER PRIMARY KEY AUTOINCREMENT, tick INTEGER NOT NULL,
       agent TEXT NOT NULL, model TEXT NOT NULL, title TEXT NOT NULL, content TEXT NOT NULL,
       resolved_tick INTEGER, response TEXT)"""
]


@event_kind("human_request")
@dataclass(frozen=True)
class HumanRequest(Event):
    request_id: int
    title: str


class RequestParams(Params):
    content: str = Field(max_length=10000)
    title: str | None = Field(None, max_length=200)

    @field_validator("content")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the request is empty")
        return value.strip()


def open_request(ctx: Context, agent_name: str) -> Any:
    return ctx.store.one("SELECT * FROM human_requests WHERE agent=? AND resolved_tick IS NULL", (agent_name,))


def waiting_request(store: Store, request_id: int) -> Any:
    """Request `request_id`, still waiting for its answer; a ValueError says why it cannot be answered."""
    row = store.one("SELECT * FROM human_requests WHERE id=?", (request_id,))
    if row is None:
        waiting = [f"#{r[0]}" for r in store.all("SELECT id FROM human_requests WHERE resolved_tick IS NULL")]
        raise ValueError(f"no request #{request_id} ({'open: ' + ', '.join(waiting) if waiting else 'none is open'})")
    if row["resolved_tick"] is not None:
        raise ValueError(f"request #{request_id} was already answered at tick {row['resolved_tick']}")
    return row


def answer_request(ctx: Context, request_id: int, response: str | None) -> str:
    """Close a request (operator command); the agent hears the answer if it is still here."""
    row = waiting_request(ctx.store, request_id)
    ctx.store.execute(
        "UPDATE human_requests SET resolved_tick=?, response=? WHERE id=?", (ctx.tick, response, request_id)
    )
    agent = ctx.agents.get(row["agent"])
    if agent is not None and agent.active:
        text = (
            ctx.texts.render("request_answered", request_id=request_id, response=response)
            if response
            else ctx.texts.render("request_resolved", request_id=request_id)
        )
        ctx.notify(agent, text, "human_answer")
    return row["agent"]


@register_room
class ExternalCounter(Room):
    short, name = "external", "External Counter"
    lobby_order = 120
    guests_allowed = False
    migrations = MIGRATIONS

    @classmethod
    def check_operator_answer(cls, store: Store, request: int) -> bool:
        waiting_request(store, request)
        return True

    def answer_operator(self, ctx: Context, request: int, text: str | None) -> bool:
        answer_request(ctx, request, text)  # the only room with requests: an unknown number is an error
        return True

    def awaiting_operator(self, ctx: Context) -> list[str]:
        """Open requests of agents still here (the engine may pause for them)."""
        rows = ctx.store.all("SELECT id, agent FROM human_requests WHERE resolved_tick IS NULL ORDER BY id")
        return [
            f"request #{r['id']} from {r['agent']}"
            for r in rows
            if (a := ctx.agents.get(r["agent"])) is not None and a.active
        ]

    def render(self, ctx: Context, agent: Agent) -> str:
        row = open_request(ctx, agent.name)
        if row is None:
            return "No open request. To ask the station's human operator for help, use `request_human` (see `help external`)."
        return (
            f'Your request #{row["id"]} ("{row["title"]}", tick {row["tick"]}) is open. '
            "The operator will answer with a system message, which can take many ticks; keep working meanwhile."
        )

    @action("request_human", params=RequestParams)
    def request_human(self, ctx: Context, agent: Agent, args: str | None, p: RequestParams) -> Outcome:
        row = open_request(ctx, agent.name)
        if row is not None:
            return Outcome(
                [f"You already have an open request (#{row['id']}); wait for its answer before asking again."]
            )
        title = (p.title or "").strip() or f"Request from {agent.name} at tick {ctx.tick}"
        cur = ctx.store.execute(
            "INSERT INTO human_requests(tick, agent, model, title, content) VALUES(?, ?, ?, ?, ?)",
            (ctx.tick, agent.name, agent.model["name"], title, p.content),
        )
        ctx.emit(HumanRequest(request_id=int(cur.lastrowid or 0), title=title), agent.name)
        return Outcome(
            [f"Request #{cur.lastrowid} was sent to the operator. The answer will arrive as a system message."]
        )


# -- the scripted policy's play here: ask the operators one question, or none ------------------
@room_play("external")
def _play_external(s: Situation, rng: random.Random) -> list[str]:
    if not s.notes.get("asked") and rng.random() < 0.5:
        s.notes["asked"] = True
        return [
            "/execute_action{request_human}",
            yaml_block({"title": "Hello", "content": "Is there anything the operators want us to know?"}),
        ]
    return []


# -- read model: what the operator's page shows ------------------------------------------------
def waiting_requests(db: sqlite3.Connection, limit: int = 50) -> tuple[int, list[dict[str, Any]]]:
    """How many requests wait for the operator, and the newest `limit` of them (none when this
    station has no External Counter). `db`: a read-only connection whose rows are sqlite3.Row."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='human_requests'").fetchone():
        return 0, []
    waiting = db.execute("SELECT COUNT(*) FROM human_requests WHERE resolved_tick IS NULL").fetchone()[0]
    rows = db.execute(
        "SELECT * FROM human_requests WHERE resolved_tick IS NULL ORDER BY id DESC LIMIT ?", (limit,)
    ).fetchall()
    return int(waiting), [dict(row) for row in rows]
