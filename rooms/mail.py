"""Mail Room: messages between named agents; one or many recipients, replies, forwarding (spec §6.4).

Mail is addressed to exact identities (`Spiro II`), never to lineages, and stays with the
session of each participant. Only agents can be addressed: the reviewer is not one.
"""

from __future__ import annotations

from typing import Any

from rooms.capsule_config import CapsulesConfig
from station.core.agents import Agent
from station.core.context import Context
from station.core.room import ActionSpec, Outcome, action, register_room

from . import capsule_store as cs
from .capsule_ids import IdError, parse_single
from .capsule_params import ForwardParams, MailParams, as_list
from .capsule_store import Author, Capsule
from .capsules import CapsuleRoom, cell


@register_room
class MailRoom(CapsuleRoom):
    short, name = "mail", "Mail Room"
    lobby_order = 80
    empty_listing = "No mail you may view."

    def help_values(self, ctx: Context) -> dict[str, Any]:
        return {"guest_mail_limit": ctx.config.rooms.guest_mail_limit}

    def member(self, agent: Agent) -> int | None:
        return agent.session

    def columns(self) -> list[str]:
        cols = super().columns()
        return cols[:3] + ["Recipients"] + cols[3:]

    def row(self, capsule: Capsule, label: str) -> list[str]:
        row = super().row(capsule, label)
        return row[:3] + [cell(", ".join(capsule.recipients))] + row[3:]

    def header(self, ctx: Context, agent: Agent) -> str:
        names = ctx.agents.recursive_names(besides=agent.name)
        listed = ", ".join(names) if names else "none at the moment"
        return f"**Recursive agents you can write to:** {listed}"

    # -- rules ---------------------------------------------------------------------------
    def action_refusal(self, ctx: Context, agent: Agent, spec: ActionSpec) -> str | None:
        if agent.is_guest and spec.name in ("reply", "forward", "update", "delete"):
            return f"'{spec.name}' in the Mail Room is for recursive agents; guests may only send and read mail."
        return None

    def may_create(self, ctx: Context, agent: Agent) -> str | None:
        limit = ctx.config.rooms.guest_mail_limit
        if agent.is_guest and agent.room_state(self.short).get("sent", 0) >= limit:
            return f"guests may send at most {limit} mails; ascend to write more"
        return None

    def may_reply(self, ctx: Context, agent: Agent, capsule: Capsule) -> str | None:
        if agent.is_guest or not cs.is_member(ctx.store, agent.session, capsule):
            return "only the mail's author and recipients may reply"
        return None

    def may_edit(
        self, ctx: Context, agent: Agent, capsule: Capsule, message: cs.Message | None, verb: str
    ) -> str | None:
        owner = message.author_session if message is not None else capsule.author_session
        if owner != agent.session:
            return f"only the author may {verb} it"
        return None

    def _recipients(
        self, ctx: Context, agent: Agent, raw: list[str] | str | None
    ) -> tuple[list[Any], list[str], str | None]:
        """(agents, warnings, problem) for a recipient list: exact names of agents that exist."""
        names = sorted(set(as_list(raw)) - {agent.name})
        if not names:
            return [], [], "no recipient other than yourself was given"
        limit = ctx.config.section(CapsulesConfig).max_recipients
        if len(names) > limit:
            return [], [], f"{len(names)} recipients given; at most {limit} are allowed"
        found = {n: ctx.agents.get(n) for n in names}
        unknown = [n for n, a in found.items() if a is None]
        if unknown:
            return (
                [],
                [],
                (
                    f"no agent is called {', '.join(unknown)} (names are exact, e.g. 'Spiro II'; "
                    "the room lists who you can write to)"
                ),
            )
        people = [person for n in names if (person := found[n]) is not None]  # none is unknown here
        gone = [a.name for a in people if not a.active]
        warnings = [f"Note: {', '.join(gone)} no longer active in the station; they will not read it."] if gone else []
        return people, warnings, None

    # -- actions -------------------------------------------------------------------------
    @action("create", params=MailParams)
    def create(self, ctx: Context, agent: Agent, args: str | None, p: MailParams) -> Outcome:
        refused = self.may_create(ctx, agent)
        if refused:
            return Outcome([f"Mail not sent: {refused}."])
        missing = self.missing(p) + ([] if as_list(p.recipients) else ["recipients"])
        if missing:
            return Outcome([f"Mail not sent: missing or empty field(s): {', '.join(missing)}."])
        people, warnings, problem = self._recipients(ctx, agent, p.recipients)
        if problem:
            return Outcome([f"Mail not sent: {problem}."])
        capsule = self.new_capsule(
            ctx, agent, p, recipients=[a.name for a in people], members=[agent.session, *(a.session for a in people)]
        )
        if isinstance(capsule, str):
            return Outcome([f"Mail not sent: {capsule}."])
        if agent.is_guest:
            state = agent.room_state(self.short)
            state["sent"] = state.get("sent", 0) + 1
        for person in people:
            if person.active:
                ctx.notify(
                    person,
                    ctx.texts.render(
                        "mail_new", sender=agent.name, number=capsule.number, title=capsule.title, content=p.content
                    ),
                    "mail",
                )
                cs.mark_read(ctx.store, person.session, [(capsule.id, cs.WHOLE), (capsule.id, 1)], ctx.tick)
        sent = f"Sent mail {capsule.number}: '{capsule.title}' to {', '.join(capsule.recipients)}."
        return Outcome([sent] + warnings)

    def after_reply(self, ctx: Context, agent: Agent, capsule: Capsule, k: int) -> list[str]:
        message = cs.Capsules(ctx.store, self.short).message(capsule, k)
        assert message is not None
        sessions = set(
            r[0] for r in ctx.store.all("SELECT session FROM capsule_members WHERE capsule=?", (capsule.id,))
        )
        told = []
        for session, name in ctx.agents.turn_order():
            person = ctx.agents.get(name) if session in sessions and session != agent.session else None
            if person is not None:
                title = f" ({message.title})" if message.title else ""
                ctx.notify(
                    person,
                    ctx.texts.render(
                        "mail_reply",
                        sender=agent.name,
                        number=capsule.number,
                        k=k,
                        title=capsule.title,
                        reply_title=title,
                        content=message.content,
                    ),
                    "mail",
                )
                cs.mark_read(ctx.store, person.session, [(capsule.id, k)], ctx.tick)
                told.append(person.name)
        return [f"Delivered to: {', '.join(told)}."] if told else ["Nobody else on this mail is active now."]

    @action("forward", params=ForwardParams)
    def forward(self, ctx: Context, agent: Agent, args: str | None, p: ForwardParams) -> Outcome:
        text = (args or "").strip()
        if not text.isdigit():
            return Outcome(["Forward refused: give one mail number, e.g. /execute_action{forward 3}."])
        try:
            target = parse_single(text)
        except IdError as err:
            return Outcome([f"Forward refused: {err}."])
        caps = cs.Capsules(ctx.store, self.short)
        capsule = caps.get(target.number)
        if not self.visible(ctx, agent, capsule):
            return Outcome([f"Forward refused: mail {target.number} not found."])
        assert capsule is not None
        people, warnings, problem = self._recipients(ctx, agent, p.recipients)
        if problem:
            return Outcome([f"Forward refused: {problem}."])
        new = [a for a in people if a.name != capsule.author and not cs.is_member(ctx.store, a.session, capsule)]
        if not new:
            return Outcome(["Nothing forwarded: everyone named already has this mail."])
        caps.add_recipients(capsule, [a.name for a in new], [a.session for a in new], ctx.tick)
        body = caps.message(capsule, 1)
        for person in new:
            if person.active:
                ctx.notify(
                    person,
                    ctx.texts.render(
                        "mail_forward",
                        sender=agent.name,
                        author=capsule.author,
                        number=capsule.number,
                        title=capsule.title,
                        content=body.content if body and not body.deleted else "",
                    ),
                    "mail",
                )
                cs.mark_read(ctx.store, person.session, [(capsule.id, 1)], ctx.tick)
        return Outcome([f"Forwarded mail {capsule.number} to {', '.join(a.name for a in new)}."] + warnings)


def mail_from_station(ctx: Context, sender: Author, recipient: Agent, title: str, content: str) -> Capsule:
    """A mail from one of the station's services (the Archive Surveyor, say) to one agent: kept in the
    Mail Room like any mail, with the recipient's session as its member, and announced if it is active."""
    capsule = cs.Capsules(ctx.store, MailRoom.short).create(
        sender, ctx.tick, title=title, content=content, recipients=[recipient.name], members=[recipient.session]
    )
    if recipient.active:
        ctx.notify(
            recipient,
            ctx.texts.render("mail_new", sender=sender.name, number=capsule.number, title=title, content=content),
            "mail",
        )
        cs.mark_read(ctx.store, recipient.session, [(capsule.id, cs.WHOLE), (capsule.id, 1)], ctx.tick)
    return capsule
