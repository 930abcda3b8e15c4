"""Research holidays (holiday mode, off by default): on ticks ending in 9 or 0 no submissions are
taken and agents at the Research Counter are sent to the Lobby (spec research §1.11)."""

from __future__ import annotations

from rooms.research.config import ResearchConfig
from station.core.context import Context, Hook
from station.core.events import TickStarted, on


def is_holiday(tick: int) -> bool:
    return tick % 10 in (9, 0)


class HolidayEvacuation(Hook):
    """On a holiday tick, agents standing at the Research Counter are sent to the Lobby."""

    name = "research_holiday"

    @on(TickStarted)
    def send_away(self, ctx: Context, about: str | None, event: TickStarted) -> None:
        if not ctx.config.section(ResearchConfig).holiday_mode or not is_holiday(ctx.tick):
            return
        for name in ctx.agents.active_in("research", order="position"):
            agent = ctx.agents.get(name)
            if agent is not None:
                agent.location = "lobby"
                ctx.notify(agent, ctx.texts.render("research_holiday_moved", tick=ctx.tick), "research")
                ctx.agents.save(agent)
