"""Codex Room: the station's founding texts, read one module per exchange inside the turn."""

from __future__ import annotations

from typing import Any

from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Outcome, Room, action, register_room


class CodexReading:
    def __init__(self, modules: list[Any]) -> None:
        self.modules, self.index = modules, 0

    def _prompt(self, ctx: Context) -> str:
        m = self.modules[self.index]
        return ctx.texts.render(
            "codex_module", index=self.index + 1, count=len(self.modules), title=m.title, content=m.text
        )

    def first_prompt(self, ctx: Context, agent: Agent) -> str:
        return self._prompt(ctx)

    def step(self, ctx: Context, agent: Agent, reply: str) -> tuple[str | None, list[str]]:
        self.index += 1
        if self.index < len(self.modules):
            return self._prompt(ctx), []
        return None, [ctx.texts.render("codex_finished", count=len(self.modules))]


@register_room
class CodexRoom(Room):
    short, name = "codex", "Codex Room"
    lobby_order = 20

    def render(self, ctx: Context, agent: Agent) -> str:
        status = agent.room_state("codex").get("read", {})
        rows = ["**Codex Read Status**", "", "| Module ID | Title | Last Read Tick | Word Count |", "|---|---|---|---|"]
        for m in ctx.texts.modules:
            last = f"Tick {status[m.id]}" if m.id in status else "Not yet read"
            title = m.title.replace("|", r"\|")
            rows.append(f"| {m.id} | {title} | {last} | {m.word_count} |")
        return "\n".join(rows)

    @action("read", internal=True)
    def read(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        modules = ctx.texts.modules
        if not modules:
            return Outcome(["The Codex is empty in this station; there is nothing to read."])
        wanted = (args or "all").strip()
        if wanted.lower() != "all":
            modules = [m for m in modules if wanted.lower() in (m.id.lower(), m.title.lower())]
            if not modules:
                ids = ", ".join(f"{m.id} ({m.title})" for m in ctx.texts.modules)
                return Outcome([f"Codex module '{wanted}' not found. Modules: {ids}."])
        status = agent.room_state("codex").setdefault("read", {})
        for m in modules:
            status[m.id] = ctx.tick
        what = "the entire Codex" if len(modules) == len(ctx.texts.modules) else f"module '{modules[0].title}'"
        return Outcome([f"You read {what}."], internal=CodexReading(modules))
