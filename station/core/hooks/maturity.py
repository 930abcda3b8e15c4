"""Maturity: the one-time message when an agent comes of age (sent even if that exact tick was skipped)."""

from __future__ import annotations

from station.core.context import Context, Hook, register_hook
from station.core.events import TurnStarted, on


@register_hook
class Maturity(Hook):
    name = "maturity"
    order = 10

    @on(TurnStarted)
    def tell_of_maturity(self, ctx: Context, agent_name: str | None, event: TurnStarted) -> None:
        limit = ctx.config.lifecycle.maturity_ticks
        agent = ctx.agents.get(agent_name or "")
        if limit is None or agent is None or agent.flags.get("maturity_sent"):
            return
        if agent.age(ctx.tick) >= limit:
            agent.flags["maturity_sent"] = True
            ctx.notify(agent, ctx.texts.render("maturity_reached", isolation_ticks=limit), "maturity")
