"""Common Room: mature recursive agents talk; recent talk is shown once, older talk is archived.

Messages live in the room's own table with per-reader read marks, so a visitor sees each
recent message once (plus again on a re-render within the same tick). At each tick end, talk
older than `common_room.archive_after_ticks` is tagged with its batch period; nothing is
deleted, and `history` reads any span back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator

from station.core.agents import Agent
from station.core.config import Section, config_section
from station.core.context import Context, Hook
from station.core.events import Event, TickEnding, event_kind, on
from station.core.room import Outcome, Params, Room, action, register_room

MIGRATIONS = [
    """
    CREATE TABLE common_messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tick INTEGER NOT NULL,
        author TEXT NOT NULL,
        content TEXT NOT NULL,
        period_start INTEGER,  -- set when archived: the batch period [period_start, period_end]
        period_end INTEGER
    );
    CREATE INDEX common_messages_tick ON common_messages(tick, id);
    CREATE TABLE common_reads (
        message INTEGER NOT NULL REFERENCES common_messages(id),
        reader TEXT NOT NULL,
        tick INTEGER NOT NULL,
        PRIMARY KEY (message, reader)
    );
    """
]

MAX_MESSAGE_CHARS = 5000
MAX_INVITEES = 20
HISTORY_MAX_MESSAGES = 100
HISTORY_MAX_CHARS = 40_000  # one system message must stay readable
ECHO_CHARS = 50
SPAN = re.compile(r"^(\d+)(?:\s*-\s*(\d+))?$")


@config_section("common_room")
class CommonRoomConfig(Section):
    display_ticks: int = Field(5, ge=1, description="messages this recent are shown to visitors")
    archive_after_ticks: int = Field(40, ge=1, description="older messages leave the live room")
    batch_ticks: int = Field(20, ge=1, description="archived talk is grouped in periods of this many ticks")


@event_kind("common_message")
@dataclass(frozen=True)
class CommonMessage(Event):
    message_id: int


class SpeakParams(Params):
    message: str = Field(max_length=MAX_MESSAGE_CHARS)

    @field_validator("message")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the message is empty")
        return value.strip()


class InviteParams(Params):
    # A list or a comma-separated string; coerced by hand so odd types get a clear line.
    recipients: Any


def _names(raw: Any) -> tuple[list[str], str | None]:
    """Recipient names from a list or a comma string, de-duplicated in order; or an error."""
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, list) and all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in raw):
        items = [str(x) for x in raw]
    else:
        return [], "'recipients' must be a list of agent names or one comma-separated string"
    names = list(dict.fromkeys(n.strip() for n in items if n.strip()))
    if not names:
        return [], "'recipients' names nobody"
    if len(names) > MAX_INVITEES:
        return [], f"'recipients' names {len(names)} agents; at most {MAX_INVITEES} can be invited at once"
    return names, None


def _echo(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= ECHO_CHARS else flat[:ECHO_CHARS] + "..."


class CommonArchiver(Hook):
    """At each tick end, tags talk that left the live window with its batch period."""

    name = "common_archive"

    @on(TickEnding)
    def archive_talk(self, ctx: Context, agent: str | None, event: TickEnding) -> None:
        cfg = ctx.config.section(CommonRoomConfig)
        new_tick = ctx.tick + 1  # the hook runs just before the clock moves on
        batch = cfg.batch_ticks
        # Ticks start at 1, so periods are 1..batch, batch+1..2*batch, ...
        ctx.store.execute(
            "UPDATE common_messages SET period_start = ((tick - 1) / ?) * ? + 1, "
            "period_end = ((tick - 1) / ?) * ? + ? "
            "WHERE period_start IS NULL AND tick < ?",
            (batch, batch, batch, batch, batch, new_tick - cfg.archive_after_ticks),
        )


@register_room
class CommonRoom(Room):
    short, name = "common", "Common Room"
    lobby_order = 90
    guests_allowed = False
    maturity_gated = True
    migrations = MIGRATIONS

    def hooks(self, config: Any) -> list[Hook]:
        return [CommonArchiver()]

    def help_values(self, ctx: Context) -> dict[str, Any]:
        cfg = ctx.config.section(CommonRoomConfig)
        return {
            "display_ticks": cfg.display_ticks,
            "archive_after_ticks": cfg.archive_after_ticks,
            "batch_ticks": cfg.batch_ticks,
            "max_chars": MAX_MESSAGE_CHARS,
            "max_invitees": MAX_INVITEES,
        }

    def status_counts(self, ctx: Context) -> dict[str, Any]:
        return {"common_room_messages": ctx.store.scalar("SELECT COUNT(*) FROM common_messages")}

    # -- what the agent sees ----------------------------------------------------------------
    def render(self, ctx: Context, agent: Agent) -> str:
        window = ctx.config.section(CommonRoomConfig).display_ticks
        present = ctx.agents.active_in(self.short)
        lines = [
            f"**Agents currently present:** {', '.join(present) if present else 'nobody'}",
            f"(Presence is only informational: whoever looks in within {window} ticks reads what "
            "was said, present or not. `invite` asks others to come.)",
            "",
        ]
        rows = ctx.store.all(
            "SELECT m.id, m.tick, m.author, m.content FROM common_messages m "
            "LEFT JOIN common_reads r ON r.message = m.id AND r.reader = ? "
            "WHERE m.period_start IS NULL AND m.tick >= ? AND (r.tick IS NULL OR r.tick = ?) "
            "ORDER BY m.tick, m.id",
            (agent.name, ctx.tick - window, ctx.tick),
        )
        if not rows:
            lines.append(f"Nothing new was said here in the last {window} ticks.")
            return "\n".join(lines)
        lines.append(f"**Recent messages unread by you (last {window} ticks):**")
        shown = [f"[Tick {r['tick']}] {r['author']}:\n{r['content']}" for r in rows]
        lines.append("\n\n---\n\n".join(shown))  # rules between messages only
        ctx.store.executemany(
            "INSERT OR IGNORE INTO common_reads(message, reader, tick) VALUES(?, ?, ?)",
            [(r["id"], agent.name, ctx.tick) for r in rows],
        )
        return "\n".join(lines)

    # -- operators (web console) ------------------------------------------------------------
    def post(self, ctx: Context, speaker: str, text: str) -> int:
        """Store a message under any speaker name; returns its id."""
        text, speaker = text.strip(), speaker.strip()
        if not text or not speaker:
            raise ValueError("both a speaker and a non-empty message are needed")
        if len(text) > MAX_MESSAGE_CHARS:
            raise ValueError(f"the message is {len(text)} characters; at most {MAX_MESSAGE_CHARS}")
        cur = ctx.store.execute(
            "INSERT INTO common_messages(tick, author, content) VALUES(?, ?, ?)", (ctx.tick, speaker, text)
        )
        assert cur.lastrowid is not None  # an INSERT always sets it
        message_id = int(cur.lastrowid)
        # The speaker has read their own words.
        ctx.store.execute(
            "INSERT INTO common_reads(message, reader, tick) VALUES(?, ?, ?)", (message_id, speaker, ctx.tick)
        )
        return message_id

    # -- actions ----------------------------------------------------------------------------
    @action("speak", params=SpeakParams)
    def speak(self, ctx: Context, agent: Agent, args: str | None, p: SpeakParams) -> Outcome:
        message_id = self.post(ctx, agent.name, p.message)
        ctx.emit(CommonMessage(message_id), agent.name)
        return Outcome([f'You said: "{_echo(p.message)}"'])

    @action("invite", params=InviteParams)
    def invite(self, ctx: Context, agent: Agent, args: str | None, p: InviteParams) -> Outcome:
        names, problem = _names(p.recipients)
        if problem:
            return Outcome([f"No invitation was sent: {problem}."])
        lines, invited = [], set()
        for name in names:
            invitee = self._find(ctx, name)
            if invitee is not None and invitee.name in invited:
                continue  # named twice (e.g. in another case): one notice is enough
            if invitee is not None and invitee.name == agent.name:
                lines.append("You cannot invite yourself.")
            elif invitee is None:
                lines.append(f"'{name}' is not an active agent of this station.")
            elif invitee.is_guest:
                lines.append(f"{invitee.name} is a guest; the Common Room is for recursive agents only.")
            elif not ctx.is_mature(invitee):
                lines.append(f"{invitee.name} is not mature yet and cannot enter the Common Room.")
            else:
                ctx.notify(invitee, ctx.texts.render("common_invite", inviter=agent.name), "common_invite")
                invited.add(invitee.name)
        return Outcome([f"Invitations sent: {len(invited)}.", *lines])

    @staticmethod
    def _find(ctx: Context, name: str) -> Any:
        """An active agent by exact name, else by case-insensitive name."""
        found = ctx.agents.get(name)
        if found is not None and found.active:
            return found
        wanted = name.casefold()
        match = next((n for n in ctx.agents.active_names() if n.casefold() == wanted), None)
        return ctx.agents.get(match) if match is not None else None

    @action("history")
    def history(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        batch = ctx.config.section(CommonRoomConfig).batch_ticks
        wanted = (args or "").strip()
        if not wanted:
            return Outcome([self._periods(ctx)])
        m = SPAN.match(wanted)
        if not m:
            return Outcome(
                [f"Usage: `history <tick>` or `history <first>-<last>` (e.g. history 21-40); '{wanted}' is neither."]
            )
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        if first < 1 or first > last:
            return Outcome([f"'{wanted}' is not a valid span: ticks start at 1 and the first comes first."])
        if last - first + 1 > batch:
            return Outcome(
                [f"A span of at most {batch} ticks can be read at once; {first}-{last} covers {last - first + 1}."]
            )
        rows = ctx.store.all(
            "SELECT tick, author, content FROM common_messages WHERE tick BETWEEN ? AND ? ORDER BY tick, id",
            (first, last),
        )
        if not rows:
            return Outcome([f"Nothing was said in the Common Room during ticks {first}-{last}."])
        shown: list[Any] = []
        size = 0
        for r in rows:
            text = f"[Tick {r['tick']}] {r['author']}:\n{r['content']}"
            if shown and (len(shown) >= HISTORY_MAX_MESSAGES or size + len(text) > HISTORY_MAX_CHARS):
                break
            shown.append(text)
            size += len(text)
        body = "\n\n---\n\n".join(shown)
        rest = rows[len(shown) :]
        if rest:
            nxt = rest[0]["tick"]
            more = (
                f"Ask for `history {nxt}-{last}` to read on."
                if nxt > first
                else f"Tick {first} alone holds more than one reading can show."
            )
            body += f"\n\n({len(rest)} more message(s) of this span are not shown. {more})"
        ctx.notify(agent, f"Common Room talk, ticks {first}-{last}:\n\n{body}", "common_history")
        return Outcome(
            [f"{len(shown)} message(s) from ticks {first}-{last} will appear in your System Messages next turn."]
        )

    def _periods(self, ctx: Context) -> str:
        rows = ctx.store.all(
            "SELECT period_start AS a, period_end AS b, COUNT(*) AS n FROM common_messages "
            "WHERE period_start IS NOT NULL GROUP BY period_start ORDER BY period_start"
        )
        if rows:
            listed = ", ".join(f"{r['a']}-{r['b']} ({r['n']} message{'' if r['n'] == 1 else 's'})" for r in rows)
            text = f"Archived periods: {listed}."
        else:
            after = ctx.config.section(CommonRoomConfig).archive_after_ticks
            text = f"Nothing is archived yet (talk is archived once it is {after} ticks old)."
        return text + " Read a span with `history <tick>` or `history <first>-<last>`."
