"""Test Chamber: guests answer tests (graded after the turn by a model) and then ascend."""

from __future__ import annotations

from typing import Any, cast

from pydantic import Field, field_validator

from rooms.test.events import EntranceTestSubmitted
from station.core import agents as ag
from station.core import lifecycle
from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Outcome, Params, Room, action, register_room

from .grader import TestGrader

MIGRATIONS = [
    """CREATE TABLE test_attempts (id INTEGER PRIMARY KEY AUTOINCREMENT, session INTEGER NOT NULL,
       agent TEXT NOT NULL, test_id TEXT NOT NULL, status TEXT NOT NULL, answer TEXT NOT NULL,
       tick INTEGER NOT NULL, graded_tick INTEGER, comment TEXT, grader_calls INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX test_attempts_session ON test_attempts(session, test_id);
    CREATE INDEX test_attempts_status ON test_attempts(status)"""
]
STATUS_LABEL = {"pending": "Pending", "pass": "Pass", "fail": "Fail", "error": "Fail"}


def _one_line(value: str) -> str:
    value = value.strip()
    if "\n" in value:
        raise ValueError("the description must be a single line")
    return value


class InheritParams(Params):
    description: str | None = Field(None, max_length=200)

    @field_validator("description")
    @classmethod
    def _line(cls, value: str | None) -> str | None:
        return _one_line(value) if value is not None else None


class NewLineageParams(Params):
    name: str = Field(max_length=40)
    description: str = Field(max_length=200)

    @field_validator("description")
    @classmethod
    def _line(cls, value: str) -> str:
        value = _one_line(value)
        if not value:
            raise ValueError("the description is empty")
        return value


class TestTaking:
    def __init__(self, test: Any) -> None:
        self.test = test

    def first_prompt(self, ctx: Context, agent: Agent) -> str:
        return ctx.texts.render("test_prompt", test_id=self.test.id, title=self.test.title, question=self.test.question)

    def step(self, ctx: Context, agent: Agent, reply: str) -> tuple[str | None, list[str]]:
        ctx.store.execute(
            "INSERT INTO test_attempts(session, agent, test_id, status, answer, tick) VALUES(?, ?, ?, 'pending', ?, ?)",
            (agent.session, agent.name, self.test.id, reply, ctx.tick),
        )
        ctx.emit(EntranceTestSubmitted(self.test.id), agent.name)
        return None, [
            f"Your answer to test {self.test.id} was submitted at tick {ctx.tick}; "
            "it is graded before the next tick and the result arrives as a system message."
        ]


def latest_status(ctx: Context, session: int) -> dict[str, str]:
    rows = ctx.store.all("SELECT test_id, status FROM test_attempts WHERE session=? ORDER BY id", (session,))
    return {r["test_id"]: r["status"] for r in rows}


def passed_count(ctx: Context, session: int) -> int:
    return sum(1 for s in latest_status(ctx, session).values() if s == "pass")


@register_room
class TestChamber(Room):
    short, name = "test", "Test Chamber"
    lobby_order = 100
    migrations = MIGRATIONS

    def hooks(self, config: Any) -> list[Any]:
        return [TestGrader()]

    # -- output -----------------------------------------------------------------------------
    def render(self, ctx: Context, agent: Agent) -> str:
        lines = []
        state = agent.room_state(self.short)
        unseen = state.pop("unseen_results", [])
        if unseen:
            lines += ["**Recent Test Results**", *[f"- {r}" for r in unseen], ""]
        status = latest_status(ctx, agent.session)
        lines += ["**Available Tests**", "", "| ID | Title | Goal | Your Status |", "|---|---|---|---|"]
        tests = sorted(ctx.texts.tests, key=lambda t: (not t.id.isdigit(), int(t.id) if t.id.isdigit() else 0, t.id))
        for t in tests:
            label = STATUS_LABEL.get(status.get(t.id, ""), "Not Attempted")
            lines.append(f"| {t.id} | {_clip(t.title, 52)} | {_clip(t.goal, 98)} | {label} |")
        return "\n".join(lines)

    def system_notices(self, ctx: Context, agent: Agent) -> list[str]:
        """The ascension offer, shown first in every prompt of an eligible guest (never stored)."""
        if not agent.is_guest or not self.eligible(ctx, agent):
            return []
        ancestor = self.refresh_offer(ctx, agent)
        if ancestor is None:
            return [ctx.texts.render("ascend_offer_new")]
        return [
            ctx.texts.render(
                "ascend_offer_inherit",
                ancestor_name=ancestor.name,
                ancestor_description=ancestor.description,
                lineage=ancestor.lineage,
                next_name=f"{ancestor.lineage} {ag.roman(next_generation(ctx, lineage_of(ancestor)))}",
            )
        ]

    # -- ascension --------------------------------------------------------------------------
    def offered_ancestor(self, ctx: Context, agent: Agent) -> Agent | None:
        if not agent.is_guest or not self.eligible(ctx, agent):
            return None
        return self.refresh_offer(ctx, agent)

    def eligible(self, ctx: Context, agent: Agent) -> bool:
        return passed_count(ctx, agent.session) >= ctx.config.lifecycle.min_tests_for_ascension

    def _valid_ancestor(self, ctx: Context, name: str | None) -> Agent | None:
        a = ctx.agents.get(name) if name else None
        return a if a and a.state == ag.ENDED and not a.succeeded_by else None

    def refresh_offer(self, ctx: Context, guest: Agent) -> Agent | None:
        """Decide once which ancestor (if any) to offer; decide again only if it became invalid."""
        flags = guest.flags
        if flags.get("offer_decided"):
            if guest.offered_ancestor is None:
                return None
            valid = self._valid_ancestor(ctx, guest.offered_ancestor)
            if valid is not None:
                return valid
        flags["offer_decided"] = True
        guest.offered_ancestor = self._choose_ancestor(ctx, guest)
        return self._valid_ancestor(ctx, guest.offered_ancestor)

    def _choose_ancestor(self, ctx: Context, guest: Agent) -> str | None:
        cfg = ctx.config.lineage
        candidates = ag.ancestor_candidates(ctx.agents, guest)
        if guest.assigned_ancestor:
            chosen = ag.assigned_candidate(ctx.agents, guest, candidates)
            return chosen.name if chosen else None
        rng = ctx.rng("ancestor", guest.name, ctx.tick)
        if rng.random() < cfg.force_new_probability or not candidates:
            return None
        if cfg.selection == "uniform":
            return rng.choice(sorted(c.name for c in candidates))
        credits = ctx.lineage_credits()
        lineages = sorted({cast(str, c.lineage) for c in candidates})  # ascended agents all have one
        options: list[tuple[str | None, float]] = [
            (lin, ag.lineage_utility(ctx.agents, lin, ctx.tick, cfg.lifespan_penalty_per_tick, credits))
            for lin in lineages
        ] + [(None, cfg.new_lineage_utility)]
        lineage = ag.softmax_choice(options, cfg.temperature, rng.random())
        return ag.latest_of_lineage(candidates, lineage).name if lineage else None

    @action("ascend_inherit", params=InheritParams, yaml_required=False)
    def ascend_inherit(self, ctx: Context, agent: Agent, args: str | None, p: InheritParams | None) -> Outcome:
        if not agent.is_guest:
            return Outcome(["You have already ascended."])
        if not self.eligible(ctx, agent):
            return Outcome(["You must pass the test before you can ascend."])
        ancestor = self.refresh_offer(ctx, agent)
        if ancestor is None:
            return Outcome(["No ancestor is on offer to you; found a new lineage with `ascend_new`."])
        description = (
            p.description if p and p.description else None
        ) or f"Heir of {ancestor.name}, continuing the {ancestor.lineage} lineage."
        lineage = lineage_of(ancestor)
        new = lifecycle.ascend(ctx, agent, lineage, next_generation(ctx, lineage), description, ancestor)
        return Outcome(_ascended_lines(new))

    @action("ascend_new", params=NewLineageParams)
    def ascend_new(self, ctx: Context, agent: Agent, args: str | None, p: NewLineageParams) -> Outcome:
        if not agent.is_guest:
            return Outcome(["You have already ascended."])
        if not self.eligible(ctx, agent):
            return Outcome(["You must pass the test before you can ascend."])
        name = p.name.strip()
        problem = ag.lineage_name_problem(name)
        if problem is None and ctx.agents.exists(f"{name} {ag.roman(1)}"):
            problem = f"the lineage '{name}' already exists; choose another name"
        if problem:
            return Outcome([f"Ascension refused: {problem}."])
        new = lifecycle.ascend(ctx, agent, name, 1, p.description, None)
        return Outcome(_ascended_lines(new))

    # -- taking a test ----------------------------------------------------------------------
    @action("take", internal=True)
    def take(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        if not args:
            return Outcome(["Usage: /execute_action{take <test id>}, e.g. take 1."])
        test_id = args.strip()
        test = next((t for t in ctx.texts.tests if t.id == test_id), None)
        if test is None:
            ids = ", ".join(t.id for t in ctx.texts.tests) or "none"
            return Outcome([f"Test '{test_id}' not found (available: {ids})."])
        status = latest_status(ctx, agent.session).get(test_id)
        if status == "pass":
            return Outcome([f"You already passed test {test_id}."])
        if status == "pending":
            return Outcome([f"Your answer to test {test_id} is still being graded; wait for the result."])
        return Outcome([f"You took test {test_id}."], internal=TestTaking(test))


def _ascended_lines(new: Any) -> list[str]:
    return [
        f"You ascended: you are now {new.name}, a Recursive Agent, and take your place in the turn order.",
        "You are back in the Lobby from your next turn; actions after this one in your reply were not run.",
    ]


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def lineage_of(ancestor: Agent) -> str:
    """The lineage an heir of `ancestor` continues (an ancestor is always a recursive agent)."""
    if ancestor.lineage is None:
        raise ValueError(f"{ancestor.name} has no lineage to continue")
    return ancestor.lineage


def next_generation(ctx: Context, lineage: str) -> int:
    """One past the lineage's highest generation, so an heir never takes a living agent's name."""
    return 1 + max((a.generation or 0 for a in ctx.agents.by_lineage(lineage)), default=0)
