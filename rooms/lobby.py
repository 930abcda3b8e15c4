"""Lobby: where every guest arrives; lists the rooms and who may enter them."""

from __future__ import annotations

from typing import Any

from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Room, register_room


@register_room
class Lobby(Room):
    short, name = "lobby", "Lobby"
    lobby_order = 10

    def help_values(self, ctx: Context) -> dict[str, Any]:
        life = ctx.config.lifecycle
        return {
            "life_section": ctx.texts.render("life_section", max_age=life.max_age) if life.max_age else "",
            "isolation_section": (
                ctx.texts.render("isolation_section", isolation_ticks=life.maturity_ticks)
                if life.maturity_ticks
                else ""
            ),
            "guest_mail_limit": ctx.config.rooms.guest_mail_limit,
        }

    def render(self, ctx: Context, agent: Agent) -> str:
        lines = ["**Available Rooms**"]
        mature = ctx.is_mature(agent)
        for room in ctx.rooms.values():
            if room.short == "lobby" or not room.listed:
                continue
            marker = ""
            if agent.is_guest and not room.guests_allowed:
                marker = " (Unavailable)"
            elif room.maturity_gated and not mature:
                marker = f" (opens at age {ctx.config.lifecycle.maturity_ticks})"
            lines.append(f"- {room.name} (`{room.short}`){marker}")
        lines.append(
            "\nThe Lobby has no actions of its own: use `goto <room>` to move and `help <room>` to learn a room."
        )
        return "\n".join(lines)
