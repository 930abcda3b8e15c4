"""Misc Room: recursive agents change their description or leave a suggestion for the operators."""

from __future__ import annotations

import random
from dataclasses import dataclass

from pydantic import Field, field_validator

from station.core.agents import Agent
from station.core.context import Context
from station.core.events import Event, event_kind
from station.core.room import Outcome, Params, Room, action, register_room
from station.models.scripted import Situation, room_play, yaml_block

MIGRATIONS = [
    """CREATE TABLE suggestions (id INTEGER PRIMARY KEY AUTOINCREMENT, tick INTEGER NOT NULL,
       agent TEXT NOT NULL, text TEXT NOT NULL)"""
]


@event_kind("suggestion")
@dataclass(frozen=True)
class Suggestion(Event):
    text: str


class DescriptionParams(Params):
    new_description: str = Field(max_length=200)

    @field_validator("new_description")
    @classmethod
    def _one_line(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("the description is empty")
        if "\n" in value:
            raise ValueError("the description must be a single line")
        return value


class SuggestionParams(Params):
    suggestion_content: str = Field(max_length=5000)

    @field_validator("suggestion_content")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the suggestion is empty")
        return value.strip()


@register_room
class MiscRoom(Room):
    short, name = "misc", "Misc Room"
    lobby_order = 130
    guests_allowed = False
    migrations = MIGRATIONS

    def render(self, ctx: Context, agent: Agent) -> str:
        return "Use `help misc` to see this room's actions again."

    @action("change_description", params=DescriptionParams)
    def change_description(self, ctx: Context, agent: Agent, args: str | None, p: DescriptionParams) -> Outcome:
        agent.description = p.new_description
        return Outcome([f"Your description is now: {p.new_description}"])

    @action("suggest", params=SuggestionParams)
    def suggest(self, ctx: Context, agent: Agent, args: str | None, p: SuggestionParams) -> Outcome:
        ctx.store.execute(
            "INSERT INTO suggestions(tick, agent, text) VALUES(?, ?, ?)", (ctx.tick, agent.name, p.suggestion_content)
        )
        ctx.emit(Suggestion(p.suggestion_content), agent.name)
        return Outcome(["Your suggestion was recorded for the station's operators. Thank you."])


# -- the scripted policy's play here: describe itself once, then now and then suggest ----------
@room_play("misc")
def _play_misc(s: Situation, rng: random.Random) -> list[str]:
    if not s.notes.get("described"):
        s.notes["described"] = True
        return [
            "/execute_action{change_description}",
            yaml_block({"new_description": f"{s.name}: reads first, then experiments."}),
        ]
    if rng.random() < 0.5:
        return [
            "/execute_action{suggest}",
            yaml_block({"suggestion_content": "A short map of the rooms in the lobby would help newcomers."}),
        ]
    return []
