"""Inactivity warnings for recursive agents that have not run a productive action for a while.

What counts as productive is declared by rooms (`productive_actions`, e.g. `submit` at the
Research Counter); with no such room enabled the hook stays silent.  A warning is sent when
the count crosses the threshold and then again every `inactivity_repeat_ticks` turns, not on
every turn as the reference did.
"""

from __future__ import annotations

from station.core.context import Context, Hook, register_hook
from station.core.events import TurnFinished, on
from station.core.turn import GLOBAL_ACTIONS


@register_hook
class InactivityWarnings(Hook):
    name = "inactivity"
    order = 30

    @on(TurnFinished)
    def count_idle_turns(self, ctx: Context, agent_name: str | None, event: TurnFinished) -> None:
        agent = ctx.agents.get(agent_name or "")
        if agent is None or agent.is_guest or not agent.active:
            return
        cfg = ctx.config.notifications
        names = set(event.actions)
        if agent.role == "supervisor":
            threshold, active = (
                cfg.supervisor_inactivity_threshold,
                bool(names - set(GLOBAL_ACTIONS)),
            )  # moving about is not work
        else:
            productive = {a for room in ctx.rooms.values() for a in room.productive_actions}
            if not productive:
                return
            threshold, active = cfg.inactivity_threshold, bool(names & productive)
        if threshold is None:
            return
        count = 0 if active else agent.flags.get("inactive_turns", 0) + 1
        agent.flags["inactive_turns"] = count
        if count >= threshold and (count - threshold) % cfg.inactivity_repeat_ticks == 0:
            ctx.notify(agent, ctx.texts.render("inactivity_warning", inactive_ticks=count), "inactivity")
