"""The capsule protocol shared by Private Memory, Public Memory, Archive and Mail (spec capsules §2-§6).

A room subclass says who may do what (`scope`, `member`, `may_*`) and what happens around a
change (`after_*`, notifications); everything else — listing, paging, reading with per-agent
read marks, previews, edits, soft deletion, pins, tag search — is here. Bulk output (what an
agent reads) goes to its System Messages for the next prompt; the action log gets one line.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rooms.capsule_config import CapsulesConfig
from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Outcome, Room, action

from . import capsule_store as cs
from .capsule_ids import IdError, Target, parse_ids, parse_single
from .capsule_params import Limits, ReplyParams, UpdateParams
from .capsule_store import WHOLE, Author, Capsule, Capsules

SEPARATOR = "\n\n* * *\n\n"  # not "---", which separates the prompt's sections
READ_OUTPUT_WORDS = 40_000  # one read stops adding content beyond this; the rest waits for a later read
SEARCH_RESULTS = 50


def cell(value: Any) -> str:
    return str(value).replace("|", r"\|").replace("\n", " ")


class CapsuleRoom(Room):
    migrations = cs.MIGRATIONS
    migration_component = "capsules"
    required: ClassVar[tuple[str, ...]] = ("title", "content")
    empty_listing: ClassVar[str] = "No capsules here yet."
    update_notices: ClassVar[bool] = False

    # -- rules a room refines -------------------------------------------------------------
    def scope(self, ctx: Context, agent: Agent) -> str | None:
        """Which collection the agent sees ('' = the room's only one); None = no access."""
        return ""

    def member(self, agent: Agent) -> int | None:
        """Mail lists only capsules the agent's session belongs to; other rooms list everything."""
        return None

    def may_create(self, ctx: Context, agent: Agent) -> str | None:
        return "only recursive agents may create capsules here" if agent.is_guest else None

    def may_reply(self, ctx: Context, agent: Agent, capsule: Capsule) -> str | None:
        return "only recursive agents may reply here" if agent.is_guest else None

    def may_edit(
        self, ctx: Context, agent: Agent, capsule: Capsule, message: cs.Message | None, verb: str
    ) -> str | None:
        """The lineage rule: the target's author lineage is the agent's (so Spiro II may edit Spiro I)."""
        owner = message.author_lineage if message is not None else capsule.author_lineage
        if agent.is_guest or not agent.lineage or owner != agent.lineage:
            what = f"message {capsule.number}-{message.k}" if message else f"capsule {capsule.number}"
            return f"you may not {verb} {what}: only its author's lineage may"
        return None

    def limits(self, ctx: Context) -> Limits:
        return Limits(ctx)

    def after_create(self, ctx: Context, agent: Agent, capsule: Capsule) -> list[str]:
        return []

    def after_reply(self, ctx: Context, agent: Agent, capsule: Capsule, k: int) -> list[str]:
        return []

    def header(self, ctx: Context, agent: Agent) -> str:
        return ""

    # -- helpers --------------------------------------------------------------------------
    def capsules(self, ctx: Context, agent: Agent) -> Capsules | None:
        scope = self.scope(ctx, agent)
        return None if scope is None else Capsules(ctx.store, self.short, scope)

    def may_see(self, ctx: Context, agent: Agent, capsule: Capsule) -> bool:
        """Whether the capsule is this agent's to see at all (deleted or not)."""
        member = self.member(agent)
        return member is None or cs.is_member(ctx.store, member, capsule)

    def visible(self, ctx: Context, agent: Agent, capsule: Capsule | None) -> bool:
        """The capsule exists, is not deleted, and this agent may see it."""
        return capsule is not None and not capsule.deleted and self.may_see(ctx, agent, capsule)

    def state(self, agent: Agent) -> dict[str, Any]:
        return agent.room_state(self.short)

    def _pins(self, agent: Agent) -> list[str]:
        return self.state(agent).setdefault("pins", [])

    def status_label(self, capsule: Capsule, unread: int) -> str:
        if capsule.message_count == 0:
            return "No Msgs"
        return f"{unread} unread" if unread else "All Read"

    # -- the listing ----------------------------------------------------------------------
    def output(self, ctx: Context, agent: Agent) -> str:
        refused = self.refusal(ctx, agent)
        if refused:
            return refused
        state = self.state(agent)
        parts = []
        if not state.get("help_shown"):
            state["help_shown"] = True
            parts.append(f"---\n**Help Message - {self.name}**\n\n{self.help(ctx, agent)}\n\n---")
            if not agent.flags.get("capsule_help_shown"):
                agent.flags["capsule_help_shown"] = True
                parts.append(f"---\n**Help Message - Capsule Protocol**\n\n{ctx.texts.help('capsule')}\n\n---")
            else:
                parts.append(
                    "The capsule actions work here as in the other capsule rooms; "
                    "`/execute_action{help capsule}` shows their guide again."
                )
        parts.append(self.render(ctx, agent))
        return "\n\n".join(p for p in parts if p)

    def render(self, ctx: Context, agent: Agent) -> str:
        caps = self.capsules(ctx, agent)
        if caps is None:
            return self.refusal(ctx, agent) or ""
        member = self.member(agent)
        size = ctx.config.section(CapsulesConfig).page_size
        parts = [p for p in (self.header(ctx, agent),) if p]
        pinned_numbers = self._pinned_numbers(ctx, agent, caps)
        pinned = sorted(caps.live(pinned_numbers, member=member), key=lambda c: (-c.created_tick, -c.number))
        if pinned:
            parts.append("**Pinned Capsules**\n\n" + self._table(ctx, agent, pinned))
        total = caps.count(member=member, exclude=pinned_numbers)
        pages = max(1, -(-total // size))
        page = min(max(1, int(self.state(agent).get("page", 1))), pages)
        self.state(agent)["page"] = page
        listed = caps.page(page, size, member=member, exclude=pinned_numbers)
        heading = f"**Capsules (Page {page} / {pages})**"
        if listed:
            parts.append(f"{heading}\n\n{self._table(ctx, agent, listed)}")
        else:
            parts.append(f"{heading}\n\n{self.empty_listing}")
        if pages > 1:
            parts.append(f"Use `/execute_action{{page N}}` to see other pages (1 to {pages}).")
        return "\n\n".join(parts)

    def _pinned_numbers(self, ctx: Context, agent: Agent, caps: Capsules) -> list[int]:
        prefix = cs.full_id(self.short, caps.scope, 0)[:-1]
        return [
            int(pid[len(prefix) :])
            for pid in self._pins(agent)
            if pid.startswith(prefix) and pid[len(prefix) :].isdigit()
        ]

    def columns(self) -> list[str]:
        return ["ID", "Title", "Author", "Date", "Words", "Msgs", "Status"]

    def row(self, capsule: Capsule, label: str) -> list[str]:
        return [
            str(capsule.number),
            cell(capsule.title),
            cell(capsule.author),
            f"Tick {capsule.created_tick}",
            str(capsule.word_count),
            str(capsule.message_count),
            label,
        ]

    def _table(self, ctx: Context, agent: Agent, capsules: list[Capsule]) -> str:
        unread = cs.unread_counts(ctx.store, agent.session, capsules)
        cols = self.columns()
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for c in capsules:
            lines.append("| " + " | ".join(self.row(c, self.status_label(c, unread[c.id]))) + " |")
        return "\n".join(lines)

    # -- creating and replying ----------------------------------------------------------
    def missing(self, p: Any) -> list[str]:
        return [name for name in self.required if getattr(p, name, None) is None or not str(getattr(p, name)).strip()]

    def check_fields(self, ctx: Context, p: Any, *, max_words: int | None = None) -> tuple[list[str], str | None]:
        """(tags, problem) for the fields of a create."""
        limits = self.limits(ctx)
        problem = limits.title(p.title) or (limits.body(p.content or "", max_words=max_words))
        if not problem and p.abstract is not None:
            problem = limits.abstract(p.abstract)
        tags, tag_problem = limits.tag_list(p.tags)
        return tags, problem or tag_problem

    def new_capsule(self, ctx: Context, agent: Agent, p: Any, **extra: Any) -> Capsule | str:
        """Check and store a new capsule from create params; a str is why it was refused."""
        refused = self.may_create(ctx, agent)
        if refused:
            return refused
        missing = self.missing(p)
        if missing:
            return f"missing or empty field(s): {', '.join(missing)}"
        tags, problem = self.check_fields(ctx, p)
        if problem:
            return problem
        caps = self.capsules(ctx, agent)
        assert caps is not None
        capsule = caps.create(
            Author.of(agent),
            ctx.tick,
            title=p.title.strip(),
            content=p.content or "",
            abstract=p.abstract.strip() if p.abstract else None,
            tags=tags,
            **extra,
        )
        cs.mark_read(ctx.store, agent.session, [(capsule.id, WHOLE), (capsule.id, 1)], ctx.tick)
        return capsule

    def create_capsule(self, ctx: Context, agent: Agent, p: Any) -> Outcome:
        made = self.new_capsule(ctx, agent, p)
        if isinstance(made, str):
            return Outcome([f"Create refused: {made}."])
        lines = [f"Created capsule {made.number}: '{made.title}' ({made.full_id})."]
        return Outcome(lines + self.after_create(ctx, agent, made))

    @action("reply", params=ReplyParams)
    def reply(self, ctx: Context, agent: Agent, args: str | None, p: ReplyParams) -> Outcome:
        try:
            target = parse_single(args)
        except IdError as err:
            return Outcome([f"Reply refused: {err}."])
        caps = self.capsules(ctx, agent)
        capsule = caps.get(target.number) if caps else None
        if capsule is None or not self.may_see(ctx, agent, capsule):
            return Outcome([f"Reply refused: capsule {target.number} not found."])
        refused = self.may_reply(ctx, agent, capsule)
        if refused:
            return Outcome([f"Reply refused: {refused}."])
        if capsule.deleted:
            return Outcome([f"Reply refused: capsule {target.number} was deleted."])
        limits = self.limits(ctx)
        problem = limits.body(p.content) or (limits.title(p.title, what="reply title") if p.title is not None else None)
        if problem:
            return Outcome([f"Reply refused: {problem}."])
        assert caps is not None
        k = caps.add_message(
            capsule, Author.of(agent), ctx.tick, title=p.title.strip() if p.title else None, content=p.content
        )
        cs.mark_read(ctx.store, agent.session, [(capsule.id, k)], ctx.tick)
        return Outcome(
            [f"Replied to capsule {capsule.number} as message {capsule.number}-{k}."]
            + self.after_reply(ctx, agent, capsule, k)
        )

    # -- reading -------------------------------------------------------------------------
    def _targets(self, ctx: Context, args: str | None, **kw: Any) -> list[Target | str]:
        return parse_ids(args, limit=ctx.config.section(CapsulesConfig).max_range, **kw)

    @action("read")
    def read(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        try:
            targets = self._targets(ctx, args)
        except IdError as err:
            return Outcome([f"Read refused: {err}. Examples: read 3, read 3-2, read 1:5, read 3-1:3-4."])
        caps = self.capsules(ctx, agent)
        assert caps is not None
        outputs, marks, words, deferred = [], [], 0, []
        for target in targets:
            if isinstance(target, str):
                outputs.append(f"'{target}' is not a valid ID (use 3, 3-2 or a range like 1:5).")
                continue
            if words >= READ_OUTPUT_WORDS:
                deferred.append(str(target))
                continue
            capsule = caps.get(target.number)
            if not self.visible(ctx, agent, capsule):
                outputs.append(f"Capsule {target.number}: not found, or you may not read it.")
                continue
            assert capsule is not None
            text, new_marks, n_words = self._read_one(ctx, agent, caps, capsule, target.k)
            outputs.append(text)
            marks += new_marks
            words += n_words
        cs.mark_read(ctx.store, agent.session, marks, ctx.tick)
        if deferred:
            outputs.append(f"Not shown, to keep this message readable: {', '.join(deferred)}. Read them next.")
        ctx.notify(
            agent, f"**{self.name}: read {args.strip() if args else ''}**\n\n" + SEPARATOR.join(outputs), "capsule_read"
        )
        shown = ", ".join(str(t) for t in targets)
        return Outcome([f"Read {shown}: the content will be in your System Messages next turn."])

    def _read_one(
        self, ctx: Context, agent: Agent, caps: Capsules, capsule: Capsule, k: int | None
    ) -> tuple[str, list[tuple[int, int]], int]:
        already = cs.read_ks(ctx.store, agent.session, capsule)
        n = capsule.number
        if k is not None:
            message = caps.message(capsule, k)
            if message is None or message.deleted:
                return f"Message {n}-{k}: not found in capsule {n}.", [], 0
            if k in already:
                return f"Message {n}-{k}: already read (`unread {n}-{k}` shows it again).", [], 0
            text = f"**Capsule {n}: {capsule.title}**\n" + self._message_text(n, message)
            return text, [(capsule.id, k)], message.word_count
        lines = [f"**Capsule {n}: {capsule.title}**", f"By {capsule.author}, created at tick {capsule.created_tick}."]
        if capsule.tags:
            lines.append(f"Tags: {', '.join(capsule.tags)}")
        if capsule.abstract:
            lines.append(f"Abstract: {capsule.abstract}")
        marks, words = [(capsule.id, WHOLE)], 0
        for message in caps.messages(capsule):
            if message.k in already:
                lines.append(f"\n(Message {n}-{message.k} already read; `unread {n}-{message.k}` shows it again.)")
                continue
            lines.append("\n" + self._message_text(n, message))
            marks.append((capsule.id, message.k))
            words += message.word_count
        return "\n".join(lines), marks, words

    def _message_text(self, n: int, message: cs.Message) -> str:
        title = f" — {message.title}" if message.title and message.k > 1 else ""
        return f"*Message {n}-{message.k}* by {message.author} at tick {message.tick}{title}:\n{message.content}"

    @action("unread")
    def unread(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        try:
            targets = self._targets(ctx, args)
        except IdError as err:
            return Outcome([f"Unread refused: {err}."])
        caps = self.capsules(ctx, agent)
        assert caps is not None
        lines = []
        for target in targets:
            if isinstance(target, str):
                lines.append(f"'{target}' is not a valid ID.")
                continue
            capsule = caps.get(target.number)
            if not self.visible(ctx, agent, capsule):
                lines.append(f"{target}: not found, or you may not read it.")
                continue
            assert capsule is not None
            if target.k is None:
                items = [(capsule.id, WHOLE)] + [(capsule.id, m.k) for m in caps.messages(capsule)]
            else:
                items = [(capsule.id, target.k), (capsule.id, WHOLE)]
            cs.mark_unread(ctx.store, agent.session, items)
            lines.append(f"{target} marked unread.")
        return Outcome(lines)

    @action("preview")
    def preview(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        caps = self.capsules(ctx, agent)
        assert caps is not None
        limit = ctx.config.section(CapsulesConfig).max_range
        if (args or "").strip().lower() == "all":
            capsules = caps.all_live(member=self.member(agent), limit=limit + 1)
            more = len(capsules) > limit
            entries = [self._preview_text(c) for c in capsules[:limit]]
            if more:
                entries.append(
                    f"Only the oldest {limit} are shown; preview a range such as "
                    f"`preview {capsules[limit].number}:{capsules[limit].number + limit - 1}` for more."
                )
            if not entries:
                return Outcome(["There is nothing to preview here yet."])
        else:
            try:
                targets = self._targets(ctx, args, messages=False)
            except IdError as err:
                return Outcome([f"Preview refused: {err}. Use capsule numbers, ranges like 1:5, or `all`."])
            entries = []
            for target in targets:
                capsule = caps.get(target.number) if isinstance(target, Target) else None
                if isinstance(target, str):
                    entries.append(f"'{target}' is not a valid capsule number.")
                elif not self.visible(ctx, agent, capsule):
                    entries.append(f"Capsule {target.number}: not found, or you may not see it.")
                else:
                    entries.append(self._preview_text(capsule))  # type: ignore[arg-type]
        ctx.notify(
            agent, f"**{self.name}: preview {(args or '').strip()}**\n\n" + SEPARATOR.join(entries), "capsule_preview"
        )
        return Outcome([f"Previewed {len(entries)} item(s): see your System Messages next turn."])

    def _preview_text(self, c: Capsule) -> str:
        abstract = f"Abstract: {c.abstract}" if c.abstract else "(No abstract.)"
        return (
            f"**Capsule {c.number}: {c.title}**\nBy {c.author} at tick {c.created_tick}; "
            f"{c.message_count} message(s), {c.word_count} words.\n{abstract}"
        )

    @action("search")
    def search(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        tag = (args or "").strip().lower()
        if not tag:
            return Outcome(["Search needs a tag: /execute_action{search <tag>} (matches whole tags, any case)."])
        caps = self.capsules(ctx, agent)
        assert caps is not None
        hits = caps.tagged(tag, member=self.member(agent), limit=SEARCH_RESULTS)
        if not hits:
            return Outcome([f"No capsule here is tagged '{tag}'."])
        unread = cs.unread_counts(ctx.store, agent.session, hits)
        lines = [f"- {c.number}: {c.title} ({self.status_label(c, unread[c.id])})" for c in hits]
        ctx.notify(agent, f"**{self.name}: capsules tagged '{tag}'**\n" + "\n".join(lines), "capsule_search")
        return Outcome([f"Found {len(hits)} capsule(s) tagged '{tag}': listed in your System Messages next turn."])

    # -- changing ------------------------------------------------------------------------
    def _edit_target(
        self, ctx: Context, agent: Agent, args: str | None, verb: str
    ) -> tuple[Capsules, Capsule, cs.Message | None] | str:
        try:
            target = parse_single(args)
        except IdError as err:
            return str(err)
        caps = self.capsules(ctx, agent)
        assert caps is not None
        capsule = caps.get(target.number)
        if capsule is None or not self.may_see(ctx, agent, capsule):
            return f"capsule {target.number} not found"
        message = None
        if target.k is not None:
            message = caps.message(capsule, target.k)
            if message is None:
                return f"message {target} not found"
        refused = self.may_edit(ctx, agent, capsule, message, verb)
        if refused:
            return refused
        return caps, capsule, message

    @action("update", params=UpdateParams)
    def update(self, ctx: Context, agent: Agent, args: str | None, p: UpdateParams) -> Outcome:
        found = self._edit_target(ctx, agent, args, "update")
        if isinstance(found, str):
            return Outcome([f"Update refused: {found}."])
        caps, capsule, message = found
        if capsule.deleted or (message is not None and message.deleted):
            return Outcome(["Update refused: that item was deleted."])
        given = p.model_fields_set
        nulls = [key for key in ("title", "content", "abstract", "tags") if key in given and getattr(p, key) is None]
        if nulls:
            return Outcome([f"Update refused: {', '.join(nulls)} cannot be empty (null); leave a key out to keep it."])
        limits = self.limits(ctx)
        tags, tag_problem = limits.tag_list(p.tags) if p.tags is not None else ([], None)
        problem = (
            (limits.title(p.title) if p.title is not None else None)
            or (limits.body(p.content) if p.content is not None else None)
            or (limits.abstract(p.abstract) if p.abstract is not None else None)
            or tag_problem
        )
        if problem:
            return Outcome([f"Update refused: {problem}."])
        n = capsule.number
        if message is None:
            if not given & {"title", "content", "abstract", "tags"}:
                return Outcome(["Update refused: give at least one of title, abstract, tags or content."])
            caps.update_capsule(
                capsule,
                ctx.tick,
                title=p.title.strip() if p.title else None,
                abstract=p.abstract,
                tags=tags if p.tags is not None else None,
            )
            if p.title is not None:
                caps.update_message(capsule, 1, ctx.tick, title=p.title.strip())
            if p.content is not None:
                caps.update_message(capsule, 1, ctx.tick, content=p.content)
            changed = [WHOLE] + ([1] if p.content is not None else [])
        else:
            if p.title is None and p.content is None:
                return Outcome(["Update refused: to edit a message give its content and/or title."])
            caps.update_message(
                capsule, message.k, ctx.tick, title=p.title.strip() if p.title else None, content=p.content
            )
            if message.k == 1 and p.title is not None:
                caps.update_capsule(capsule, ctx.tick, title=p.title.strip())
            changed = [message.k]
        notified = self._update_notices(ctx, agent, capsule, changed) if self.update_notices else 0
        target = f"{n}" if message is None else f"{n}-{message.k}"
        tail = f" {notified} earlier reader(s) were told." if notified else ""
        return Outcome([f"Updated {target}.{tail}"])

    def _update_notices(self, ctx: Context, editor: Any, capsule: Capsule, ks: list[int]) -> int:
        """Readers of the changed items (other than the editor) lose their read marks and get one notice."""
        current = Capsules(ctx.store, self.short, capsule.scope).get(capsule.number) or capsule
        by_session = dict(ctx.agents.turn_order())
        readers = {s for k in ks for s in cs.readers(ctx.store, capsule, k)} - {editor.session}
        item = f"{capsule.number}" if ks[0] == WHOLE else f"{capsule.number}-{ks[0]}"
        told = 0
        for session in sorted(readers):
            reader = ctx.agents.get(by_session[session]) if session in by_session else None
            if reader is None:
                continue
            cs.mark_unread(ctx.store, session, [(capsule.id, k) for k in ks])
            ctx.notify(
                reader,
                ctx.texts.render("capsule_updated", room=self.name, item=item, title=current.title, editor=editor.name),
                "capsule_update",
            )
            told += 1
        return told

    @action("delete")
    def delete(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        found = self._edit_target(ctx, agent, args, "delete")
        if isinstance(found, str):
            return Outcome([f"Delete refused: {found}."])
        caps, capsule, message = found
        if message is None:
            if capsule.deleted:
                return Outcome([f"Capsule {capsule.number} is already deleted."])
            caps.delete_capsule(capsule, ctx.tick)
            return Outcome([f"Capsule {capsule.number} deleted (kept in the station's records, hidden here)."])
        if capsule.deleted or message.deleted:
            return Outcome([f"Delete refused: {capsule.number}-{message.k} is already deleted."])
        caps.delete_message(capsule, message.k, ctx.tick)
        return Outcome([f"Message {capsule.number}-{message.k} deleted."])

    # -- per-agent view state --------------------------------------------------------------
    @action("pin")
    def pin(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        return self._pin(ctx, agent, args, True)

    @action("unpin")
    def unpin(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        return self._pin(ctx, agent, args, False)

    def _pin(self, ctx: Context, agent: Agent, args: str | None, on: bool) -> Outcome:
        verb = "Pin" if on else "Unpin"
        try:
            targets = self._targets(ctx, args, messages=False, ranges=False)
        except IdError as err:
            return Outcome([f"{verb} refused: {err}."])
        caps = self.capsules(ctx, agent)
        assert caps is not None
        pins, lines = self._pins(agent), []
        for target in targets:
            if isinstance(target, str):
                lines.append(f"'{target}' is not a capsule number; skipped.")
                continue
            capsule = caps.get(target.number)
            if not self.visible(ctx, agent, capsule):
                lines.append(f"Capsule {target.number}: not found.")
                continue
            assert capsule is not None
            if on:
                lines.append(
                    f"Capsule {target.number} is already pinned."
                    if capsule.full_id in pins
                    else f"Pinned capsule {target.number}."
                )
                if capsule.full_id not in pins:
                    pins.append(capsule.full_id)
            else:
                lines.append(
                    f"Unpinned capsule {target.number}."
                    if capsule.full_id in pins
                    else f"Capsule {target.number} was not pinned."
                )
                if capsule.full_id in pins:
                    pins.remove(capsule.full_id)
        return Outcome(lines)

    @action("page")
    def page(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        text = (args or "").strip()
        if not text.isdigit() or int(text) < 1 or len(text) > 9:
            return Outcome(["Usage: /execute_action{page N} with N a page number from 1."])
        self.state(agent)["page"] = int(text)
        return Outcome([f"Showing page {int(text)} of the listing (the last page if there are fewer)."])

    # -- status ------------------------------------------------------------------------
    def status_counts(self, ctx: Context) -> dict[str, Any]:
        count = ctx.store.scalar("SELECT COUNT(*) FROM capsules WHERE room=? AND deleted=0", (self.short,)) or 0
        key = {"private_memory": "private", "public_memory": "public"}.get(self.short, self.short)
        return {"capsules": {key: count}}
