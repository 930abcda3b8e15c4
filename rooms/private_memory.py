"""Private Memory Room: a lineage's notes, shared by every generation of it (spec capsules §6.1).

Nothing is copied between generations: the collection is keyed by the lineage, so an heir
sees what its ancestors wrote. A guest offered an ancestor may look at that lineage's notes
read-only before deciding whether to inherit.
"""

from __future__ import annotations

from typing import Any

from station.core.agents import Agent
from station.core.context import Context
from station.core.room import ActionSpec, Outcome, action, register_room

from .capsule_params import NoteParams
from .capsule_store import lineage_key
from .capsules import CapsuleRoom

READ_ONLY = {"read", "unread", "preview", "search", "page", "pin", "unpin"}


@register_room
class PrivateMemoryRoom(CapsuleRoom):
    short, name = "private_memory", "Private Memory Room"
    lobby_order = 40
    empty_listing = "Your lineage has no notes yet."

    def previewed_ancestor(self, ctx: Context, agent: Agent) -> Any:
        """The ancestor whose notes a guest may preview: it passed the test and was offered one."""
        return ctx.offered_ancestor(agent)

    def scope(self, ctx: Context, agent: Agent) -> str | None:
        if not agent.is_guest and agent.lineage:
            return lineage_key(agent.lineage)
        ancestor = self.previewed_ancestor(ctx, agent)
        return lineage_key(ancestor.lineage) if ancestor is not None else None

    def refusal(self, ctx: Context, agent: Agent) -> str | None:
        if self.scope(ctx, agent) is None:
            return (
                "The Private Memory Room holds the notes of recursive agents' lineages. Pass the test in "
                "the Test Chamber and ascend to have one (a guest offered an ancestor may preview its notes)."
            )
        return None

    def action_refusal(self, ctx: Context, agent: Agent, spec: ActionSpec) -> str | None:
        if agent.is_guest and spec.name not in READ_ONLY:
            return (
                f"'{spec.name}' is not possible in a read-only preview; inherit the lineage to write here. "
                f"Available now: {', '.join(sorted(READ_ONLY))}."
            )
        return None

    def help(self, ctx: Context, agent: Agent) -> str:
        return ctx.texts.help("private_memory_preview" if agent.is_guest else self.short)

    def header(self, ctx: Context, agent: Agent) -> str:
        if not agent.is_guest:
            return f"Notes of the {agent.lineage} lineage (shared by all its generations)."
        ancestor = self.previewed_ancestor(ctx, agent)
        return (
            f"**Read-only preview** of the notes of {ancestor.name}'s lineage ({ancestor.lineage}). "
            "If you inherit it, they become yours to extend and edit."
        )

    @action("create", params=NoteParams)
    def create(self, ctx: Context, agent: Agent, args: str | None, p: NoteParams) -> Outcome:
        return self.create_capsule(ctx, agent, p)
