"""Random tips: every N ticks each active agent gets one usage tip, drawn for it alone."""

from __future__ import annotations

from station.core.context import Context, Hook, register_hook
from station.core.events import TickStarted, on


@register_hook
class RandomTips(Hook):
    name = "tips"
    order = 20

    @on(TickStarted)
    def send_tips(self, ctx: Context, agent: str | None, event: TickStarted) -> None:
        every = ctx.config.notifications.tips_every_ticks
        tips = ctx.texts.tips
        if not every or not tips or ctx.tick % every:
            return
        header = ctx.texts.render("tips_header")
        for name in ctx.agents.active_names():  # names only: no record is loaded to send a tip
            tip = ctx.rng("tip", ctx.tick, name).choice(tips)
            ctx.notify(name, f"{header}\n{tip}", "tip")
