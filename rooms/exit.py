"""Exit: leaving the station for good, after a short reflection that must be confirmed."""

from __future__ import annotations

import re

from station.core import lifecycle
from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Outcome, Room, action, register_room
from station.core.texts import token_amount, token_reserve

CONFIRMATION = re.compile(r"^`?/execute_action\{\s*exit\s*\}`?$")


class ExitReflection:
    def first_prompt(self, ctx: Context, agent: Agent) -> str:
        return ctx.texts.render("exit_reflection_prompt")

    def step(self, ctx: Context, agent: Agent, reply: str) -> tuple[str | None, list[str]]:
        if any(CONFIRMATION.match(line.strip()) for line in reply.splitlines()):
            lifecycle.end_session(ctx, agent, lifecycle.VOLUNTARY)
            lines = ["You confirmed your departure. Farewell."]
            if not agent.is_guest:
                lines.append("The other agents were told that you left.")
            return None, lines
        agent.room_state("exit")["last_attempt"] = {"tick": ctx.tick, "message": reply[:500]}
        return None, ["You did not confirm, so you stay in the Exit room."]


@register_room
class ExitRoom(Room):
    short, name = "exit", "Exit"
    lobby_order = 140

    def help(self, ctx: Context, agent: Agent) -> str:
        # The advice "staying is safe while more than N tokens are left" scales with the agent's
        # limit: 10k for large budgets, a quarter of the limit for a small model's context.
        return ctx.texts.help(self.short, reserve=token_amount(token_reserve(lifecycle.effective_limit(ctx, agent))))

    def render(self, ctx: Context, agent: Agent) -> str:
        state = agent.room_state("exit")
        lines = []
        attempt = state.pop("last_attempt", None)
        if attempt:
            lines.append(f"**Previous Exit Attempt (Tick {attempt['tick']})**: not confirmed, so you stayed.\n")
        lines.append("`exit` ends your session permanently. You will be asked to confirm first.")
        return "\n".join(lines)

    def refusal(self, ctx: Context, agent: Agent) -> str | None:
        if agent.role == "supervisor":
            return "Supervisors cannot use the Exit."
        return None

    @action("exit", internal=True)
    def exit(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        return Outcome(["You started the exit procedure."], internal=ExitReflection())
