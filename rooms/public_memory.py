"""Public Memory Room: the station's forum, with @mentions, reply notices and muting (spec §6.2)."""

from __future__ import annotations

from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Outcome, action, register_room

from . import capsule_store as cs
from .capsule_ids import IdError, parse_single
from .capsule_params import PostParams
from .capsule_store import Capsule
from .capsules import CapsuleRoom
from .mentions import mentioned_names


@register_room
class PublicMemoryRoom(CapsuleRoom):
    short, name = "public_memory", "Public Memory Room"
    lobby_order = 50
    maturity_gated = True
    required = ("title", "abstract", "content")
    update_notices = True

    def _muted(self, agent: Agent) -> list[str]:
        """The agent's muted capsules (read-only: notifying another agent must not change its record)."""
        return agent.rooms.get(self.short, {}).get("muted", [])

    def _mentions(self, ctx: Context, author: Agent, text: str) -> list[Agent]:
        others = [n for n in ctx.agents.active_names() if n != author.name]
        found = set(mentioned_names(text, others))
        return [a for a in (ctx.agents.get(n) for n in others if n in found) if a is not None]

    @action("create", params=PostParams)
    def create(self, ctx: Context, agent: Agent, args: str | None, p: PostParams) -> Outcome:
        return self.create_capsule(ctx, agent, p)

    def after_create(self, ctx: Context, agent: Agent, capsule: Capsule) -> list[str]:
        message = cs.Capsules(ctx.store, self.short).message(capsule, 1)
        assert message is not None
        mentioned = [a for a in self._mentions(ctx, agent, message.content) if ctx.is_mature(a)]
        for target in mentioned:
            ctx.notify(
                target,
                ctx.texts.render(
                    "public_mention",
                    author=agent.name,
                    number=capsule.number,
                    title=capsule.title,
                    content=message.content,
                ),
                "public_memory",
            )
            cs.mark_read(ctx.store, target.session, [(capsule.id, 1)], ctx.tick)
        ctx.broadcast(
            ctx.texts.render(
                "public_new", author=agent.name, number=capsule.number, title=capsule.title, words=capsule.word_count
            ),
            "public_memory",
            exclude=[agent.name, *(a.name for a in mentioned)],
        )
        return [f"Mentioned and notified: {', '.join(a.name for a in mentioned)}."] if mentioned else []

    def after_reply(self, ctx: Context, agent: Agent, capsule: Capsule, k: int) -> list[str]:
        caps = cs.Capsules(ctx.store, self.short)
        message = caps.message(capsule, k)
        assert message is not None
        mentioned = {a.name for a in self._mentions(ctx, agent, message.content)}
        participants = {capsule.author, *(m.author for m in caps.messages(capsule))} | mentioned
        told = []
        for name in ctx.agents.active_names():
            target = ctx.agents.get(name) if name in participants and name != agent.name else None
            if target is None or not ctx.is_mature(target):
                continue
            if capsule.full_id in self._muted(target):
                continue
            text = "public_reply_mention" if target.name in mentioned else "public_reply"
            ctx.notify(
                target,
                ctx.texts.render(
                    text, author=agent.name, number=capsule.number, k=k, title=capsule.title, content=message.content
                ),
                "public_memory",
            )
            if target.name in mentioned:
                cs.mark_read(ctx.store, target.session, [(capsule.id, k)], ctx.tick)
            told.append(target.name)
        return [f"Notified: {', '.join(told)}."] if told else []

    @action("mute")
    def mute(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        return self._mute(ctx, agent, args, True)

    @action("unmute")
    def unmute(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        return self._mute(ctx, agent, args, False)

    def _mute(self, ctx: Context, agent: Agent, args: str | None, on: bool) -> Outcome:
        verb = "Mute" if on else "Unmute"
        try:
            target = parse_single(args)
        except IdError as err:
            return Outcome([f"{verb} refused: {err}."])
        capsule = cs.Capsules(ctx.store, self.short).get(target.number)
        if target.k is not None or not self.visible(ctx, agent, capsule):
            return Outcome([f"{verb} refused: capsule {target} not found (mute takes a capsule number)."])
        assert capsule is not None
        muted = agent.room_state(self.short).setdefault("muted", [])
        if on:
            if capsule.full_id not in muted:
                muted.append(capsule.full_id)
            return Outcome([f"Capsule {capsule.number} muted: no more reply or mention notices from it."])
        if capsule.full_id not in muted:
            return Outcome([f"Capsule {capsule.number} was not muted."])
        muted.remove(capsule.full_id)
        return Outcome([f"Capsule {capsule.number} unmuted."])
