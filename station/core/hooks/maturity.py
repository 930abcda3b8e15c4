"""Maturity: the one-time message when an agent comes of age (sent even if that exact tick was skipped)."""

from __future__ import annotations

from station.core.context import Context, Event, Hook, register_hook


@register_hook
class Maturity(Hook):
    name = "maturity"
    order = 10
    events = ("turn_started",)

    def handle(self, ctx: Context, event: Event) -> None:
        limit = ctx.config.lifecycle.maturity_ticks
        agent = ctx.agents.get(event.agent or "")
        if limit is None or agent is None or agent.flags.get("maturity_sent"):
            return
        if agent.age(ctx.tick) >= limit:
            agent.flags["maturity_sent"] = True
            ctx.notify(agent, ctx.texts.render("maturity_reached", isolation_ticks=limit), "maturity")
