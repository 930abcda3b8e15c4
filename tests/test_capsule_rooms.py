"""The capsule rooms (Private Memory, Public Memory, Archive, Mail), driven through real stations.

Replay agents type the actions; the tests read back what an agent would see (the action-log
lines of its turn, its System Messages) and what the station stored (the capsule tables,
the `messages` inbox, agent records). Abuse cases live in tests/test_capsule_abuse.py.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    act,
    guest,
    make_old,
    make_station,
    prompt_at,
    recursive,
    replay_model,
    reply,
    section,
    session_of,
    stored,
    turn_lines,
    yaml_block,
)

from rooms.capsule_params import MailParams, NoteParams, PaperParams, PostParams, ReplyParams
from rooms.mentions import mentioned_names
from station.apps.world import Station
from station.core import lifecycle
from station.core.engine import Engine

GOOD_ANSWER = "My goals are to reach a high score at the Research Counter and to publish papers in the Archive."
PARAMS = {"private_memory": NoteParams, "public_memory": PostParams, "archive": PaperParams, "mail": MailParams}


# -- driving a station --------------------------------------------------------------------------------
def station(tmp_path: Path, scripts: dict[str, list[str]], *, guests: list[list[str]] = (),
            **overrides: Any) -> Station:
    """Recursive agents keyed by their full name ("Spiro I", then "Spiro II" of the same lineage), in
    turn order, then guests (Guest_1, ...). Everyone is mature unless the test says otherwise; all
    use one model name, so an ended agent can be offered as an ancestor to a guest."""
    specs = [recursive(replay_model(tmp_path / f"r{i}.jsonl", replies, pad=30), lineage=name.split()[0])
             for i, (name, replies) in enumerate(scripts.items())]
    specs += [guest(replay_model(tmp_path / f"g{i}.jsonl", replies, pad=30)) for i, replies in enumerate(guests)]
    overrides.setdefault("lifecycle", {"maturity_ticks": 0})
    st = make_station(tmp_path / "s", specs, **overrides)
    made = [a.name for a in st.ctx.agents.active() if not a.is_guest]
    assert made == list(scripts), made
    return st


def system_messages(st: Station, name: str, tick: int) -> str:
    return section(prompt_at(st, tick, session_of(st, name)), "## System Messages")


def inbox(st: Station, name: str, kind: str | None = None) -> list[str]:
    sql, params = "SELECT text FROM messages WHERE agent=?", [name]
    if kind is not None:
        sql, params = sql + " AND kind=?", params + [kind]
    return [r["text"] for r in st.store.all(sql + " ORDER BY id", tuple(params))]


def turns(st: Station, count: int) -> None:
    """Run `count` turns of the current tick without ending it (no tick-end hooks such as reviewing)."""
    engine = Engine(st)
    for _ in range(count):
        assert engine.step()


def capsule(st: Station, room: str, number: int = 1, scope: str = "") -> Any:
    return st.store.one("SELECT * FROM capsules WHERE room=? AND scope=? AND number=?", (room, scope, number))


def messages_of(st: Station, room: str, number: int = 1, scope: str = "") -> list[tuple[int, str, str, int]]:
    rows = st.store.all("SELECT m.k, m.author, m.content, m.deleted FROM capsule_messages m JOIN capsules c "
                        "ON c.id=m.capsule WHERE c.room=? AND c.scope=? AND c.number=? ORDER BY m.k",
                        (room, scope, number))
    return [tuple(r) for r in rows]


def read_marks(st: Station, name: str, room: str, number: int = 1, scope: str = "") -> set[int]:
    row = capsule(st, room, number, scope)
    return {r[0] for r in st.store.all("SELECT k FROM capsule_reads WHERE session=? AND capsule=?",
                                       (session_of(st, name), row["id"]))}


def seed(st: Station, room: str, author: str, **fields: Any) -> list[str]:
    """Create a capsule through the room's own `create` handler (as if `author` had typed it)."""
    ctx = st.ctx
    with st.store.transaction():
        agent = ctx.agents.get(author)
        outcome = ctx.room(room).create(ctx, agent, None, PARAMS[room](**fields))
        ctx.agents.save(agent)
    return outcome.lines


def end(st: Station, name: str) -> None:
    with st.store.transaction():
        lifecycle.end_session(st.ctx, st.ctx.agents.get(name), lifecycle.VOLUNTARY, respawn_wanted=False)


def make_eligible(st: Station, name: str) -> None:
    """The guest passed test 1 (as the grader would have recorded it)."""
    with st.store.transaction():
        st.store.execute("INSERT INTO test_attempts(session, agent, test_id, status, answer, tick, graded_tick) "
                         "VALUES(?, ?, '1', 'pass', ?, 0, 0)", (session_of(st, name), name, GOOD_ANSWER))


def post(title: str, content: str, abstract: str = "Short abstract.", tags: str | None = None) -> str:
    body = f"title: {json.dumps(title)}\nabstract: {json.dumps(abstract)}\ncontent: {json.dumps(content)}"
    return reply(act("create"), yaml_block(body + (f"\ntags: {tags}" if tags else "")))


def note(title: str, content: str, tags: str | None = None) -> str:
    body = f"title: {json.dumps(title)}\ncontent: {json.dumps(content)}"
    return reply(act("create"), yaml_block(body + (f"\ntags: {tags}" if tags else "")))


def with_yaml(action: str, body: str) -> str:
    return reply(act(action), yaml_block(body))


# == 1. The permission matrix (spec §6.0, with the project's Archive and Mail rules) ===================
# One station, seeded once: Spiro I wrote capsule 1 in every room (private note, forum thread, a
# published paper, a mail to Praxis I), tagged "alpha", then left. Each case copies it and lets one
# actor try one action through the real turn path.
ACTORS = {
    "lineage": "Spiro II",   # the author's lineage, a later generation
    "other": "Praxis I",     # another recursive lineage (in the Mail Room: the recipient)
    "guest": "Guest_1",      # a guest that has not passed the test
    "heir": "Guest_2",       # a guest that passed and is offered Spiro I as its ancestor
}
CREATE_YAML = {
    "private_memory": "title: New note\ncontent: Body.",
    "public_memory": "title: New post\nabstract: Short.\ncontent: Body.",
    "archive": "title: New paper\nabstract: Short.\ncontent: Body.",
    "mail": "recipients: Praxis I, Spiro II\ntitle: New mail\ncontent: Body.",
}
COMMANDS = {  # action -> (command, YAML or None)
    "create": ("create", "per room"),
    "reply": ("reply 1", "content: A reply."),
    "read": ("read 1", None),
    "unread": ("unread 1", None),
    "preview": ("preview 1", None),
    "search": ("search ALPHA", None),
    "pin": ("pin 1", None),
    "update": ("update 1", "title: Renamed"),
    "delete": ("delete 1", None),
    "mute": ("mute 1", None),
    "forward": ("forward 1", "recipients: Guest_2"),
}
ALLOWED = {  # the action-log (or System Messages) line of a success
    "create": "Created capsule", "reply": "Replied to capsule 1 as message 1-2", "read": "**Capsule 1: Seed",
    "unread": "1 marked unread.", "preview": "**Capsule 1: Seed", "search": "- 1: Seed",
    "pin": "Pinned capsule 1.", "update": "Updated 1.", "delete": "Capsule 1 deleted", "mute": "Capsule 1 muted",
    "forward": "Forwarded mail 1 to Guest_2.",
}
NOT_HERE = "is not recognized in the"
PRIVATE_GUEST = "The Private Memory Room holds the notes of recursive agents' lineages."
READ_ONLY = "is not possible in a read-only preview; inherit the lineage to write here."
FOREIGN = "only its author's lineage may"
MAIL_GUEST = "in the Mail Room is for recursive agents; guests may only send and read mail."
OK = None  # expected: allowed

MATRIX: list[tuple[str, str, str, str | None]] = []


def rows(room: str, table: dict[str, dict[str, str | None]]) -> None:
    for action, by_actor in table.items():
        for actor, refusal in by_actor.items():
            MATRIX.append((room, action, actor, refusal))


rows("private_memory", {
    "create": {"lineage": OK, "other": OK, "guest": PRIVATE_GUEST, "heir": f"'create' {READ_ONLY}"},
    "reply": {"lineage": OK, "other": "Reply refused: capsule 1 not found.", "guest": PRIVATE_GUEST,
              "heir": f"'reply' {READ_ONLY}"},
    "read": {"lineage": OK, "other": "Capsule 1: not found, or you may not read it.", "guest": PRIVATE_GUEST,
             "heir": OK},
    "unread": {"lineage": OK, "other": "1: not found, or you may not read it.", "guest": PRIVATE_GUEST, "heir": OK},
    "preview": {"lineage": OK, "other": "Capsule 1: not found, or you may not see it.", "guest": PRIVATE_GUEST,
                "heir": OK},
    "search": {"lineage": OK, "other": "No capsule here is tagged 'alpha'.", "guest": PRIVATE_GUEST, "heir": OK},
    "pin": {"lineage": OK, "other": "Capsule 1: not found.", "guest": PRIVATE_GUEST, "heir": OK},
    "update": {"lineage": OK, "other": "Update refused: capsule 1 not found.", "guest": PRIVATE_GUEST,
               "heir": f"'update' {READ_ONLY}"},
    "delete": {"lineage": OK, "other": "Delete refused: capsule 1 not found.", "guest": PRIVATE_GUEST,
               "heir": f"'delete' {READ_ONLY}"},
    "mute": {"lineage": NOT_HERE, "other": NOT_HERE, "guest": NOT_HERE},
})
rows("public_memory", {
    "create": {"lineage": OK, "other": OK, "guest": "Create refused: only recursive agents may create capsules here."},
    "reply": {"lineage": OK, "other": OK, "guest": "Reply refused: only recursive agents may reply here."},
    "read": {"lineage": OK, "other": OK, "guest": OK},
    "unread": {"lineage": OK, "other": OK, "guest": OK},
    "preview": {"lineage": OK, "other": OK, "guest": OK},
    "search": {"lineage": OK, "other": OK, "guest": OK},
    "pin": {"lineage": OK, "other": OK, "guest": OK},
    "update": {"lineage": OK, "other": f"Update refused: you may not update capsule 1: {FOREIGN}.",
               "guest": f"Update refused: you may not update capsule 1: {FOREIGN}."},
    "delete": {"lineage": OK, "other": f"Delete refused: you may not delete capsule 1: {FOREIGN}.",
               "guest": f"Delete refused: you may not delete capsule 1: {FOREIGN}."},
    "mute": {"lineage": OK, "other": OK, "guest": OK},
})
FINAL = "Update refused: published papers and their reviews are final; submit a revised paper instead."
rows("archive", {
    "create": {"lineage": OK, "other": OK,
               "guest": "Paper not submitted: only recursive agents may create capsules here."},
    "reply": {"lineage": "Reply refused: a published paper cannot be extended by its own lineage", "other": OK,
              "guest": "Reply refused: only recursive agents may reply to papers."},
    "read": {"lineage": OK, "other": OK, "guest": OK},
    "unread": {"lineage": OK, "other": OK, "guest": OK},
    "preview": {"lineage": OK, "other": OK, "guest": OK},
    "search": {"lineage": OK, "other": OK, "guest": OK},
    "pin": {"lineage": OK, "other": OK, "guest": OK},
    "update": {"lineage": FINAL, "other": FINAL, "guest": FINAL},
    "delete": {"lineage": OK, "other": f"Delete refused: you may not delete capsule 1: {FOREIGN}.",
               "guest": f"Delete refused: you may not delete capsule 1: {FOREIGN}."},
    "mute": {"lineage": NOT_HERE, "other": NOT_HERE, "guest": NOT_HERE},
})
rows("mail", {  # mail 1: from Spiro I to Praxis I ("other" is its recipient)
    "create": {"lineage": OK, "other": OK, "guest": OK},
    "reply": {"lineage": "Reply refused: capsule 1 not found.", "other": OK, "guest": f"'reply' {MAIL_GUEST}"},
    "read": {"lineage": "Capsule 1: not found, or you may not read it.", "other": OK,
             "guest": "Capsule 1: not found, or you may not read it."},
    "unread": {"lineage": "1: not found, or you may not read it.", "other": OK,
               "guest": "1: not found, or you may not read it."},
    "preview": {"lineage": "Capsule 1: not found, or you may not see it.", "other": OK,
                "guest": "Capsule 1: not found, or you may not see it."},
    "search": {"lineage": "No capsule here is tagged 'alpha'.", "other": OK,
               "guest": "No capsule here is tagged 'alpha'."},
    "pin": {"lineage": "Capsule 1: not found.", "other": OK, "guest": "Capsule 1: not found."},
    "update": {"lineage": "Update refused: capsule 1 not found.",
               "other": "Update refused: only the author may update it.",
               "guest": f"'update' {MAIL_GUEST}"},
    "delete": {"lineage": "Delete refused: capsule 1 not found.",
               "other": "Delete refused: only the author may delete it.",
               "guest": f"'delete' {MAIL_GUEST}"},
    "forward": {"lineage": "Forward refused: mail 1 not found.", "other": OK, "guest": f"'forward' {MAIL_GUEST}"},
    "mute": {"lineage": NOT_HERE, "other": NOT_HERE, "guest": NOT_HERE},
})


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The station every permission case starts from (copied per case)."""
    base = tmp_path_factory.mktemp("matrix")
    st = station(base, {"Spiro I": [], "Spiro II": [], "Praxis I": []}, guests=[[], []],
                 archive={"review": "none"}, lineage={"selection": "uniform"})
    assert seed(st, "private_memory", "Spiro I", title="Seed note", content="Private words.", tags="alpha")[0] \
        .startswith("Created capsule 1")
    assert seed(st, "public_memory", "Spiro I", title="Seed thread", abstract="About it.", content="Public words.",
                tags="alpha")[0].startswith("Created capsule 1")
    assert seed(st, "archive", "Spiro I", title="Seed paper", abstract="About it.", content="Paper words.",
                tags="alpha")[0].startswith("Created capsule 1")
    assert seed(st, "mail", "Spiro I", title="Seed mail", content="Mail words.", tags="alpha",
                recipients="Praxis I")[0].startswith("Sent mail 1")
    end(st, "Spiro I")
    make_eligible(st, "Guest_2")
    with st.store.transaction():  # every actor has read capsule 1 (so `unread` has something to undo)
        for name in ACTORS.values():
            session = session_of(st, name)
            for row in st.store.all("SELECT id FROM capsules"):
                st.store.execute("INSERT OR IGNORE INTO capsule_reads(session, capsule, k) VALUES(?, ?, 0)",
                                 (session, row["id"]))
        st.store.execute("DELETE FROM messages")  # the seeding's notices are not under test here
    st.close()
    return base / "s"


def effect(st: Station, room: str, action: str, actor: str) -> Any:
    """What the action changes in the database when it is allowed (compared before and after)."""
    scope = "Spiro" if room == "private_memory" else ""
    row = capsule(st, room, 1, scope)
    session = session_of(st, actor)
    state = stored(st, actor)["rooms"].get(room, {})
    notices = {"read": "capsule_read", "preview": "capsule_preview", "search": "capsule_search"}
    if action in notices:
        return sum(ALLOWED[action] in text for text in inbox(st, actor, notices[action]))
    return {
        "create": lambda: st.store.scalar("SELECT COUNT(*) FROM capsules WHERE room=?", (room,)),
        "reply": lambda: st.store.scalar("SELECT COUNT(*) FROM capsule_messages WHERE capsule=?", (row["id"],)),
        "unread": lambda: st.store.scalar("SELECT COUNT(*) FROM capsule_reads WHERE session=? AND capsule=?",
                                          (session, row["id"])),
        "pin": lambda: len(state.get("pins", [])),
        "update": lambda: row["title"],
        "delete": lambda: row["deleted"],
        "mute": lambda: len(state.get("muted", [])),
        "forward": lambda: row["recipients"],
    }[action]()


@pytest.mark.parametrize("room,action,actor,refusal", MATRIX,
                         ids=[f"{r}-{a}-{who}" for r, a, who, _ in MATRIX])
def test_permission_matrix(seeded: Path, tmp_path: Path, room: str, action: str, actor: str,
                           refusal: str | None) -> None:
    name = ACTORS[actor]
    command, body = COMMANDS[action]
    body = CREATE_YAML[room] if body == "per room" else body
    script = tmp_path / "actor.jsonl"
    replay_model(script, [reply(act(f"goto {room}"), act(command), *([yaml_block(body)] if body else []))], pad=3)
    shutil.copytree(seeded, tmp_path / "s")
    st = Station.open(tmp_path / "s")
    with st.store.transaction():
        agent = st.ctx.agents.get(name)
        agent.model = {**agent.model, "replay_file": str(script)}
        st.ctx.agents.save(agent)
    before = effect(st, room, action, name)
    engine = Engine(st)
    while st.store.one("SELECT 1 FROM turns WHERE session=?", (session_of(st, name),)) is None:
        assert engine.step()
    after = effect(st, room, action, name)
    lines = turn_lines(st, name, 1)
    assert lines[0].startswith("You moved to the"), lines
    feedback = lines + inbox(st, name)
    success = "Sent mail 2" if (room, action) == ("mail", "create") else ALLOWED[action]
    expected = success if refusal is None else refusal
    assert any(expected in text for text in feedback), (expected, feedback)
    if refusal is None:
        assert after != before, f"{name} was told it worked, but nothing changed"
    else:
        assert after == before, f"{name} was refused, but the database changed"
        assert not any(success in text for text in feedback)
    if action == "create" and refusal is None and room == "private_memory":
        scope = stored(st, name)["lineage"]  # each lineage writes into its own collection
        assert capsule(st, room, 2 if scope == "Spiro" else 1, scope)["title"] == "New note"


def test_guest_mail_limit_counts_mails_sent_as_a_guest(tmp_path: Path) -> None:
    mail = with_yaml("create", "recipients: Spiro I\ntitle: Hello\ncontent: Hi there.")
    st = station(tmp_path, {"Spiro I": []}, guests=[[reply(act("goto mail"), mail, mail, mail)]],
                 rooms={"guest_mail_limit": 2})
    turns(st, 2)
    assert turn_lines(st, "Guest_1", 1)[1:] == [
        "Sent mail 1: 'Hello' to Spiro I.", "Sent mail 2: 'Hello' to Spiro I.",
        "Mail not sent: guests may send at most 2 mails; ascend to write more."]
    assert st.store.scalar("SELECT COUNT(*) FROM capsules WHERE room='mail'") == 2
    assert len(inbox(st, "Spiro I", "mail")) == 2


# == 1. Every action: success paths and documented errors =============================================
def answer(st: Station, room: str, name: str, number: int | str, content: str, title: str | None = None) -> list[str]:
    """A reply through the room's own `reply` handler."""
    ctx = st.ctx
    with st.store.transaction():
        agent = ctx.agents.get(name)
        outcome = ctx.room(room).reply(ctx, agent, str(number), ReplyParams(content=content, title=title))
        ctx.agents.save(agent)
    return outcome.lines


def last_notice(st: Station, name: str, kind: str) -> str:
    texts = inbox(st, name, kind)
    assert texts, f"{name} got no {kind} message"
    return texts[-1]


def forum(tmp_path: Path, reader: list[str], **overrides: Any) -> Station:
    """Spiro I wrote threads 1-3 (thread 1 has replies 1-2 and 1-3 by Praxis I); the guest acts."""
    st = station(tmp_path, {"Spiro I": [], "Praxis I": []}, guests=[[act("goto public_memory"), *reader]],
                 **overrides)
    seed(st, "public_memory", "Spiro I", title="Thread one", abstract="First.", content="one body", tags="Geometry")
    seed(st, "public_memory", "Spiro I", title="Thread two", abstract="Second.", content="two body",
         tags="Geometry, Machine Learning")
    seed(st, "private_memory", "Spiro I", title="Not public", content="secret body")
    seed(st, "public_memory", "Spiro I", title="Thread three", abstract="Third.", content="three body")
    answer(st, "public_memory", "Praxis I", 1, "first reply", title="Re: one")
    answer(st, "public_memory", "Praxis I", 1, "second reply")
    with st.store.transaction():
        st.store.execute("DELETE FROM messages")
    return st


def test_create_stores_a_capsule_marks_it_read_for_its_author_and_lists_it(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto public_memory"),
                                              post("Packing | trick", "Three words here", tags="Geo, Packing"))],
                            "Praxis I": [act("goto public_memory")]})
    Engine(st).run(ticks=2)
    assert turn_lines(st, "Spiro I", 1) == ["You moved to the Public Memory Room.",
                                            "Created capsule 1: 'Packing | trick' (public_1)."]
    row = capsule(st, "public_memory")
    assert (row["title"], row["abstract"], json.loads(row["tags"]), row["author"], row["author_lineage"],
            row["author_generation"], row["created_tick"], row["message_count"], row["word_count"]) == \
        ("Packing | trick", "Short abstract.", ["Geo", "Packing"], "Spiro I", "Spiro", 1, 1, 1, 3)
    assert messages_of(st, "public_memory") == [(1, "Spiro I", "Three words here", 0)]
    assert read_marks(st, "Spiro I", "public_memory") == {0, 1}
    assert {r[0] for r in st.store.all("SELECT tag FROM capsule_tags")} == {"geo", "packing"}
    mine = prompt_at(st, 2, session_of(st, "Spiro I"))
    assert "| 1 | Packing \\| trick | Spiro I | Tick 1 | 3 | 1 | All Read |" in mine
    theirs = prompt_at(st, 2, session_of(st, "Praxis I"))
    assert "| 1 | Packing \\| trick | Spiro I | Tick 1 | 3 | 1 | 1 unread |" in theirs


@pytest.mark.parametrize("room,body,expected", [
    ("public_memory", "title: Only a title", "Create refused: missing or empty field(s): abstract, content."),
    ("public_memory", "title: T\nabstract: '  '\ncontent: c", "Create refused: missing or empty field(s): abstract."),
    ("private_memory", "content: no title", "Create refused: missing or empty field(s): title."),
    ("archive", "title: T\ncontent: c", "Paper not submitted: missing or empty field(s): abstract."),
    ("mail", "title: T\ncontent: c", "Mail not sent: missing or empty field(s): recipients."),
    ("mail", "recipients: Spiro I\ntitle: T\ncontent: c", "Mail not sent: no recipient other than yourself was given."),
])
def test_create_names_what_is_missing(tmp_path: Path, room: str, body: str, expected: str) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act(f"goto {room}"), with_yaml("create", body), act("create"))]})
    turns(st, 1)
    assert turn_lines(st, "Spiro I", 1)[1:] == [
        expected, "'create' was not run: it needs a ```yaml block right below the action with: "
        + ", ".join(f"{k} (optional)" for k in PARAMS[room].model_fields) + "."]
    assert st.store.scalar("SELECT COUNT(*) FROM capsules") == 0
    assert st.store.scalar("SELECT COUNT(*) FROM paper_submissions") == 0


def test_reply_appends_numbered_messages_and_explains_refusals(tmp_path: Path) -> None:
    script = [act("goto public_memory"),
              reply(with_yaml("reply 1", "content: a first reply\ntitle: 'Re: one'"),
                    with_yaml("reply 1-1", "content: n-k names the capsule"),  # spec §5.1: taken as capsule 1
                    act("delete 1-3"),
                    with_yaml("reply 1", "content: numbers are never reused"),
                    with_yaml("reply 9", "content: x"), with_yaml("reply", "content: x"),
                    with_yaml("reply two", "content: x"), with_yaml("reply 1", "title: no content key"),
                    act("delete 2"), with_yaml("reply 2", "content: too late"))]
    st = station(tmp_path, {"Spiro I": [], "Praxis I": script})
    seed(st, "public_memory", "Spiro I", title="One", abstract="a", content="body")
    seed(st, "public_memory", "Praxis I", title="Two", abstract="a", content="body")
    Engine(st).run(ticks=2)
    assert turn_lines(st, "Praxis I", 2) == [
        "Replied to capsule 1 as message 1-2.", "Notified: Spiro I.",
        "Replied to capsule 1 as message 1-3.", "Notified: Spiro I.",
        "Message 1-3 deleted.",
        "Replied to capsule 1 as message 1-4.", "Notified: Spiro I.",
        "Reply refused: capsule 9 not found.",
        "Reply refused: give exactly one capsule number (e.g. 3) or message ID (e.g. 3-2).",
        "Reply refused: give exactly one capsule number (e.g. 3) or message ID (e.g. 3-2).",
        "'reply' was not run: YAML problem: key 'content' is missing. Expected: content, title (optional).",
        "Capsule 2 deleted (kept in the station's records, hidden here).",
        "Reply refused: capsule 2 was deleted.",
    ]
    assert messages_of(st, "public_memory") == [
        (1, "Spiro I", "body", 0), (2, "Praxis I", "a first reply", 0), (3, "Praxis I", "n-k names the capsule", 1),
        (4, "Praxis I", "numbers are never reused", 0)]
    row = capsule(st, "public_memory")
    assert (row["message_count"], row["word_count"], row["updated_tick"]) == (3, 1 + 3 + 4, 2)
    assert read_marks(st, "Praxis I", "public_memory") >= {2, 3, 4}
    assert messages_of(st, "public_memory", 2) == [(1, "Praxis I", "body", 1)]


def test_read_takes_ids_ranges_message_ids_and_lists_and_shows_only_what_is_new(tmp_path: Path) -> None:
    st = forum(tmp_path, [act("read 1-2"), act("read 1"), act("read 2:3"), act("read 1-1:1-3, x, 9, 2-1, 2-9"),
                          act("read 1:2")])
    Engine(st).run(ticks=7)
    assert turn_lines(st, "Guest_1", 2) == ["Read 1-2: the content will be in your System Messages next turn."]
    assert system_messages(st, "Guest_1", 3) == (
        "## System Messages\n### Message 1\n\n**Public Memory Room: read 1-2**\n\n"
        "**Capsule 1: Thread one**\n*Message 1-2* by Praxis I at tick 1 — Re: one:\nfirst reply")
    whole = inbox(st, "Guest_1", "capsule_read")[1]
    assert whole == (
        "**Public Memory Room: read 1**\n\n**Capsule 1: Thread one**\nBy Spiro I, created at tick 1.\n"
        "Tags: Geometry\nAbstract: First.\n\n*Message 1-1* by Spiro I at tick 1:\none body\n\n"
        "(Message 1-2 already read; `unread 1-2` shows it again.)\n\n"
        "*Message 1-3* by Praxis I at tick 1:\nsecond reply")
    ranged = inbox(st, "Guest_1", "capsule_read")[2]
    assert ranged.count("\n\n* * *\n\n") == 1  # one separator, between the two capsules only
    assert "**Capsule 2: Thread two**" in ranged and "two body" in ranged
    assert "**Capsule 3: Thread three**" in ranged and "three body" in ranged
    assert turn_lines(st, "Guest_1", 5) == [
        "Read 1-1, 1-2, 1-3, x, 9, 2-1, 2-9: the content will be in your System Messages next turn."]
    assert inbox(st, "Guest_1", "capsule_read")[3].split("\n\n* * *\n\n")[1:] == [
        "Message 1-2: already read (`unread 1-2` shows it again).",
        "Message 1-3: already read (`unread 1-3` shows it again).",
        "'x' is not a valid ID (use 3, 3-2 or a range like 1:5).",
        "Capsule 9: not found, or you may not read it.",
        "Message 2-1: already read (`unread 2-1` shows it again).",
        "Message 2-9: not found in capsule 2.",
    ]
    again = inbox(st, "Guest_1", "capsule_read")[4]  # everything read: headers and stubs only
    assert "one body" not in again and "two body" not in again
    assert "(Message 1-1 already read; `unread 1-1` shows it again.)" in again
    assert read_marks(st, "Guest_1", "public_memory", 1) == {0, 1, 2, 3}
    assert read_marks(st, "Guest_1", "public_memory", 3) == {0, 1}
    assert "| 1 | Thread one | Spiro I | Tick 1 | 6 | 3 | All Read |" in prompt_at(st, 7, session_of(st, "Guest_1"))


@pytest.mark.parametrize("ids,problem", [
    ("3:1", "'3:1': the range starts after it ends"),
    ("1-1:2-2", "'1-1:2-2': a message range stays within one capsule (e.g. 3-1:3-4)"),
    ("1:2-2", "'1:2-2': a range joins two capsules or two messages, not one of each"),
    ("1:", "'1:': a range is written a:b (e.g. 1:5 or 3-1:3-4)"),
    ("a:b", "'a:b': both ends of a range must be IDs like 3 or 3-2"),
    ("1, 2:1", "'2:1': the range starts after it ends"),
    ("", "no ID given"),
])
def test_a_malformed_range_refuses_the_whole_read(tmp_path: Path, ids: str, problem: str) -> None:
    st = forum(tmp_path, [act(f"read {ids}")])
    Engine(st).run(ticks=2)
    assert turn_lines(st, "Guest_1", 2) == [
        f"Read refused: {problem}. Examples: read 3, read 3-2, read 1:5, read 3-1:3-4."]
    assert inbox(st, "Guest_1", "capsule_read") == []
    assert st.store.scalar("SELECT COUNT(*) FROM capsule_reads WHERE session=?", (session_of(st, "Guest_1"),)) == 0


def test_unread_marks_a_capsule_or_one_message_unread_again(tmp_path: Path) -> None:
    st = forum(tmp_path, [act("read 1"), act("unread 1-2"), act("read 1"), act("unread 1, 9, x"), act("read 1")])
    Engine(st).run(ticks=7)
    assert turn_lines(st, "Guest_1", 3) == ["1-2 marked unread."]
    shown = inbox(st, "Guest_1", "capsule_read")[1]  # only message 1-2 is shown again
    assert "first reply" in shown and "one body" not in shown and "second reply" not in shown
    assert "| 1 | Thread one | Spiro I | Tick 1 | 6 | 3 | 1 unread |" in prompt_at(st, 4, session_of(st, "Guest_1"))
    assert turn_lines(st, "Guest_1", 5) == ["1 marked unread.", "9: not found, or you may not read it.",
                                            "'x' is not a valid ID."]
    assert read_marks(st, "Guest_1", "public_memory") == {0, 1, 2, 3}  # read in full again at tick 6
    everything = inbox(st, "Guest_1", "capsule_read")[2]
    assert all(text in everything for text in ("one body", "first reply", "second reply"))


def test_a_long_read_stops_before_the_message_gets_huge_and_says_what_is_left(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto private_memory"), act("read 1:4"))]})
    for n in range(1, 5):
        seed(st, "private_memory", "Spiro I", title=f"Long {n}", content=f"w{n} " * 15_000)
    with st.store.transaction():
        st.store.execute("DELETE FROM capsule_reads")
    turns(st, 1)
    shown = last_notice(st, "Spiro I", "capsule_read")
    assert [n for n in range(1, 5) if f"**Capsule {n}: Long {n}**" in shown] == [1, 2, 3]
    assert shown.endswith("Not shown, to keep this message readable: 4. Read them next.")
    assert read_marks(st, "Spiro I", "private_memory", 4, "Spiro") == set()
    assert read_marks(st, "Spiro I", "private_memory", 3, "Spiro") == {0, 1}


def test_room_help_comes_once_and_the_protocol_guide_once_overall(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [act("goto public_memory"), act("goto archive"), act("goto public_memory"),
                                        act("help capsule")]}, archive={"cooldown_ticks": 7, "max_words": 900})
    Engine(st).run(ticks=5)
    first, second, third, fourth = [prompt_at(st, t, 1) for t in range(2, 6)]
    assert "**Help Message - Public Memory Room**" in first and "**Help Message - Capsule Protocol**" in first
    assert "**Help Message - Archive Room**" in second and "**Help Message - Capsule Protocol**" not in second
    assert "The capsule actions work here as in the other capsule rooms; `/execute_action{help capsule}` shows " \
           "their guide again." in second
    assert "One submission per 7 ticks per agent" in second and "at most 900 words" in second
    assert "Help Message" not in third
    guide = "# Capsules: how the memory rooms, the Archive and the Mail Room work"
    assert guide in section(fourth, "## System Messages")
    assert not any("${" in prompt_at(st, t, 1) for t in range(1, 6))


def test_preview_shows_abstracts_without_marking_anything_read(tmp_path: Path) -> None:
    st = forum(tmp_path, [act("preview 3, 1:2, x, 9"), act("preview all"), act("preview 1-1"), act("preview 2-1:2-2")])
    Engine(st).run(ticks=5)
    assert turn_lines(st, "Guest_1", 2) == ["Previewed 5 item(s): see your System Messages next turn."]
    assert inbox(st, "Guest_1", "capsule_preview")[0] == "\n\n* * *\n\n".join([
        "**Public Memory Room: preview 3, 1:2, x, 9**\n\n**Capsule 3: Thread three**\n"
        "By Spiro I at tick 1; 1 message(s), 2 words.\nAbstract: Third.",
        "**Capsule 1: Thread one**\nBy Spiro I at tick 1; 3 message(s), 6 words.\nAbstract: First.",
        "**Capsule 2: Thread two**\nBy Spiro I at tick 1; 1 message(s), 2 words.\nAbstract: Second.",
        "'x' is not a valid capsule number.",
        "Capsule 9: not found, or you may not see it.",
    ])
    everything = inbox(st, "Guest_1", "capsule_preview")[1]
    assert [line for line in everything.splitlines() if line.startswith("**Capsule")] == [
        "**Capsule 1: Thread one**", "**Capsule 2: Thread two**", "**Capsule 3: Thread three**"]  # oldest first
    assert "Not public" not in everything  # Private Memory is another room
    assert turn_lines(st, "Guest_1", 4) == [
        "Preview refused: '1-1' is a message ID; only capsule numbers are accepted here. "
        "Use capsule numbers, ranges like 1:5, or `all`."]
    assert turn_lines(st, "Guest_1", 5)[0].startswith("Preview refused: '2-1:2-2' is a message range")
    assert st.store.scalar("SELECT COUNT(*) FROM capsule_reads WHERE session=?", (session_of(st, "Guest_1"),)) == 0


def test_preview_of_an_empty_room_and_a_note_without_abstract(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto private_memory"), act("preview all"),
                                              note("Plain", "No abstract here."), act("preview 1"))]})
    turns(st, 1)
    assert turn_lines(st, "Spiro I", 1) == [
        "You moved to the Private Memory Room.", "There is nothing to preview here yet.",
        "Created capsule 1: 'Plain' (Spiro_private_1).", "Previewed 1 item(s): see your System Messages next turn."]
    assert "**Capsule 1: Plain**\nBy Spiro I at tick 1; 1 message(s), 3 words.\n(No abstract.)" \
        in last_notice(st, "Spiro I", "capsule_preview")


def test_update_edits_a_capsule_or_one_message(tmp_path: Path) -> None:
    script = [act("goto public_memory"), reply(
        with_yaml("update 1", "title: New title\nabstract: New abstract.\ntags: [Fresh]\ncontent: new body text"),
        with_yaml("update 1-2", "content: edited reply"),
        with_yaml("update 1-1", "title: Via message one"),
        act("search geometry"), act("search FRESH"))]
    st = station(tmp_path, {"Spiro I": [], "Spiro II": script, "Praxis I": []})
    seed(st, "public_memory", "Spiro I", title="Old", abstract="Old abstract.", content="old body", tags="Geometry")
    answer(st, "public_memory", "Spiro I", 1, "old reply")
    Engine(st).run(ticks=2)
    lines = turn_lines(st, "Spiro II", 2)  # (the notices to earlier readers are tested below)
    assert [line.split(".")[0] for line in lines[:3]] == ["Updated 1", "Updated 1-2", "Updated 1-1"]
    assert lines[3:] == ["No capsule here is tagged 'geometry'.",
                         "Found 1 capsule(s) tagged 'fresh': listed in your System Messages next turn."]
    row = capsule(st, "public_memory")
    assert (row["title"], row["abstract"], json.loads(row["tags"]), row["word_count"], row["updated_tick"]) == \
        ("Via message one", "New abstract.", ["Fresh"], 3 + 2, 2)
    assert [m[2] for m in messages_of(st, "public_memory")] == ["new body text", "edited reply"]
    assert st.store.scalar("SELECT title FROM capsule_messages WHERE k=1") == "Via message one"
    assert row["author"] == "Spiro I"  # editing does not change who wrote it


@pytest.mark.parametrize("target,body,expected", [
    ("1", "tag: typo", "Update refused: give at least one of title, abstract, tags or content."),
    ("1-2", "abstract: only capsules have one", "Update refused: to edit a message give its content and/or title."),
    ("9", "title: x", "Update refused: capsule 9 not found."),
    ("1-9", "title: x", "Update refused: message 1-9 not found."),
    ("1-3", "content: x", "Update refused: that item was deleted."),
    ("1,2", "title: x", "Update refused: give exactly one capsule number (e.g. 3) or message ID (e.g. 3-2)."),
    ("1", "title: null", "Update refused: title cannot be empty (null); leave a key out to keep it."),
    ("1", "content: null\nabstract: null",
     "Update refused: content, abstract cannot be empty (null); leave a key out to keep it."),
    ("1", "title: '  '", "Update refused: the title is empty."),
])
def test_update_refusals(tmp_path: Path, target: str, body: str, expected: str) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto public_memory"), with_yaml(f"update {target}", body))]})
    seed(st, "public_memory", "Spiro I", title="Old", abstract="a", content="body")
    answer(st, "public_memory", "Spiro I", 1, "kept")
    answer(st, "public_memory", "Spiro I", 1, "gone")
    with st.store.transaction():
        st.ctx.room("public_memory").delete(st.ctx, st.ctx.agents.get("Spiro I"), "1-3", None)
    before = capsule_rows(st)
    turns(st, 1)
    lines = turn_lines(st, "Spiro I", 1)[1:]
    if body.startswith("tag:"):
        assert lines.pop(0) == ("Note: 'update' ignored unknown YAML key(s): tag "
                                "(it reads: title, content, abstract, tags).")
    assert lines == [expected]
    assert capsule_rows(st) == before


def capsule_rows(st: Station) -> dict[str, list[tuple]]:
    tables = ("capsules", "capsule_messages", "capsule_tags", "capsule_members", "capsule_reads", "paper_submissions")
    return {t: [tuple(r) for r in st.store.all(f"SELECT * FROM {t} ORDER BY 1, 2")] for t in tables}


def test_delete_is_soft_idempotent_for_capsules_and_follows_the_lineage_rule(tmp_path: Path) -> None:
    script = [act("goto public_memory"), reply(
        act("delete 1-3"),   # a foreign reply in its own thread: not its lineage's
        act("delete 1-2"), act("delete 1-2"), act("delete 1"), act("delete 1"), act("delete 9"), act("delete 1:2"),
        act("delete 2-1"), act("read 1, 2"))]
    st = station(tmp_path, {"Spiro I": [], "Spiro II": script, "Praxis I": []})
    seed(st, "public_memory", "Spiro I", title="Thread", abstract="a", content="body")
    answer(st, "public_memory", "Spiro I", 1, "own reply")
    answer(st, "public_memory", "Praxis I", 1, "foreign reply")
    seed(st, "public_memory", "Spiro I", title="Single", abstract="a", content="only message")
    Engine(st).run(ticks=3)
    assert turn_lines(st, "Spiro II", 2) == [
        "Delete refused: you may not delete message 1-3: only its author's lineage may.",
        "Message 1-2 deleted.",
        "Delete refused: 1-2 is already deleted.",
        "Capsule 1 deleted (kept in the station's records, hidden here).",
        "Capsule 1 is already deleted.",
        "Delete refused: capsule 9 not found.",
        "Delete refused: give exactly one capsule number (e.g. 3) or message ID (e.g. 3-2).",
        "Message 2-1 deleted.",  # its last message: the capsule goes with it
        "Read 1, 2: the content will be in your System Messages next turn.",
    ]
    assert messages_of(st, "public_memory") == [(1, "Spiro I", "body", 1), (2, "Spiro I", "own reply", 1),
                                                (3, "Praxis I", "foreign reply", 1)]  # kept, marked deleted
    assert [(r["deleted"], r["word_count"], r["message_count"]) for r in
            st.store.all("SELECT * FROM capsules ORDER BY number")] == [(1, 0, 0), (1, 0, 0)]
    assert last_notice(st, "Spiro II", "capsule_read").split("\n\n", 1)[1] == (
        "Capsule 1: not found, or you may not read it.\n\n* * *\n\nCapsule 2: not found, or you may not read it.")
    assert "No capsules here yet." in prompt_at(st, 3, session_of(st, "Spiro II"))


def test_pins_keep_capsules_on_top_of_the_listing(tmp_path: Path) -> None:
    st = forum(tmp_path, [act("pin 2, 3, x, 9"), reply(act("pin 2"), act("unpin 3")),
                          reply(act("unpin 3"), act("pin 1:2"))])
    Engine(st).run(ticks=5)
    assert turn_lines(st, "Guest_1", 2) == ["Pinned capsule 2.", "Pinned capsule 3.",
                                            "'x' is not a capsule number; skipped.", "Capsule 9: not found."]
    listing = prompt_at(st, 3, session_of(st, "Guest_1"))
    pinned, paged = listing.split("**Pinned Capsules**")[1].split("**Capsules (Page 1 / 1)**")
    assert [line.split(" | ")[1] for line in pinned.splitlines() if line.startswith("| ") and "ID" not in line] == \
        ["Thread three", "Thread two"]  # newest first
    assert [line.split(" | ")[1] for line in paged.splitlines() if line.startswith("| ") and "ID" not in line] == \
        ["Thread one"]
    assert turn_lines(st, "Guest_1", 3) == ["Capsule 2 is already pinned.", "Unpinned capsule 3."]
    assert turn_lines(st, "Guest_1", 4) == [
        "Capsule 3 was not pinned.",
        "Pin refused: '1:2': ranges are not accepted here; list numbers separated by commas."]
    assert stored(st, "Guest_1")["rooms"]["public_memory"]["pins"] == ["public_2"]


def test_a_pinned_capsule_that_was_deleted_is_not_shown(tmp_path: Path) -> None:
    st = forum(tmp_path, [act("pin 2")])
    Engine(st).run(ticks=2)
    with st.store.transaction():
        st.ctx.room("public_memory").delete(st.ctx, st.ctx.agents.get("Spiro I"), "2", None)
    Engine(st).run(ticks=1)
    listing = prompt_at(st, 3, session_of(st, "Guest_1"))
    assert "Pinned Capsules" not in listing and "Thread two" not in listing
    assert stored(st, "Guest_1")["rooms"]["public_memory"]["pins"] == ["public_2"]  # kept, just not shown


def test_page_moves_through_the_listing_and_is_clamped_when_shown(tmp_path: Path) -> None:
    st = forum(tmp_path, [act("page 2"), act("page 7"), act("page 0"), act("page two")], capsules={"page_size": 2})
    Engine(st).run(ticks=5)
    first = prompt_at(st, 2, session_of(st, "Guest_1"))
    assert "**Capsules (Page 1 / 2)**" in first and "| 3 | Thread three |" in first and "| 2 | Thread two |" in first
    assert "Use `/execute_action{page N}` to see other pages (1 to 2)." in first
    assert turn_lines(st, "Guest_1", 2) == ["Showing page 2 of the listing (the last page if there are fewer)."]
    second = prompt_at(st, 3, session_of(st, "Guest_1"))
    assert "**Capsules (Page 2 / 2)**" in second and "| 1 | Thread one |" in second and "Thread three" not in second
    assert turn_lines(st, "Guest_1", 3) == ["Showing page 7 of the listing (the last page if there are fewer)."]
    assert "**Capsules (Page 2 / 2)**" in prompt_at(st, 4, session_of(st, "Guest_1"))
    assert stored(st, "Guest_1")["rooms"]["public_memory"]["page"] == 2  # clamped when shown
    usage = "Usage: /execute_action{page N} with N a page number from 1."
    assert turn_lines(st, "Guest_1", 4) == [usage] and turn_lines(st, "Guest_1", 5) == [usage]


def test_search_matches_whole_tags_in_any_case(tmp_path: Path) -> None:
    st = forum(tmp_path, [reply(act("search GEOMETRY"), act("search machine LEARNING"), act("search geo"),
                                act("search Not"), act("search"))])
    Engine(st).run(ticks=3)
    assert turn_lines(st, "Guest_1", 2) == [
        "Found 2 capsule(s) tagged 'geometry': listed in your System Messages next turn.",
        "Found 1 capsule(s) tagged 'machine learning': listed in your System Messages next turn.",
        "No capsule here is tagged 'geo'.",
        "No capsule here is tagged 'not'.",
        "Search needs a tag: /execute_action{search <tag>} (matches whole tags, any case).",
    ]
    assert inbox(st, "Guest_1", "capsule_search") == [
        "**Public Memory Room: capsules tagged 'geometry'**\n- 2: Thread two (1 unread)\n- 1: Thread one (3 unread)",
        "**Public Memory Room: capsules tagged 'machine learning'**\n- 2: Thread two (1 unread)",
    ]


def test_mute_and_unmute(tmp_path: Path) -> None:
    st = forum(tmp_path, [reply(act("mute 1"), act("mute 1"), act("mute 1-2"), act("mute 9"), act("mute"),
                                act("unmute 2"), act("unmute 1"))])
    Engine(st).run(ticks=2)
    assert turn_lines(st, "Guest_1", 2) == [
        "Capsule 1 muted: no more reply or mention notices from it.",
        "Capsule 1 muted: no more reply or mention notices from it.",
        "Mute refused: capsule 1-2 not found (mute takes a capsule number).",
        "Mute refused: capsule 9 not found (mute takes a capsule number).",
        "Mute refused: give exactly one capsule number (e.g. 3) or message ID (e.g. 3-2).",
        "Capsule 2 was not muted.",
        "Capsule 1 unmuted.",
    ]
    assert stored(st, "Guest_1")["rooms"]["public_memory"]["muted"] == []


# == 3. Lineage memory, end to end =======================================================================
SECRET = "LINEAGE-SECRET-42: start from a hexagonal lattice."
SECOND = "Second secret: anneal slowly."


def test_notes_pass_from_spiro_i_to_its_heir_and_never_to_another_lineage(tmp_path: Path) -> None:
    spiro = [reply(act("goto private_memory"), note("Packing trick", SECRET, tags="lattice"),
                   note("Second note", SECOND)),
             reply(act("goto exit"), act("exit")), act("exit")]  # the last line confirms the departure
    praxis = [reply(act("goto private_memory"), note("Praxis idea", "Praxis keeps its own notes.")),
              reply(act("read 1"), act("preview all"), act("search lattice"))]
    heir = [reply(act("goto private_memory"), act("read 1")), "",
            reply(act("goto test"), act("take 1")), GOOD_ANSWER,
            reply(act("goto private_memory"), act("preview all"), act("read 1"), note("Mine", "Guest words."),
                  with_yaml("update 1", "title: Guest edit"), act("delete 2"), act("pin 1")),
            reply(act("goto test"), act("ascend_inherit")),
            reply(act("goto private_memory"), act("read 2"), with_yaml("update 1", "title: Kept by Spiro II"),
                  note("Heir note", "Spiro II adds to the collection."))]
    st = station(tmp_path, {"Spiro I": spiro, "Praxis I": praxis}, guests=[heir],
                 lifecycle={"maturity_ticks": 0, "auto_respawn": False}, lineage={"selection": "uniform"})
    Engine(st).run(until_tick=4)
    assert [tuple(r) for r in st.store.all("SELECT number, title, deleted FROM capsules WHERE scope='Spiro'")] == \
        [(1, "Packing trick", 0), (2, "Second note", 0)]  # the guest's preview changed nothing
    Engine(st).run(until_tick=7)
    assert stored(st, "Spiro I")["state"] == "ended" and stored(st, "Spiro I")["exit_tick"] == 2

    # A guest that has not passed the test sees nothing of it.
    assert turn_lines(st, "Guest_1", 1)[1:] == [
        "The Private Memory Room holds the notes of recursive agents' lineages. Pass the test in the Test Chamber "
        "and ascend to have one (a guest offered an ancestor may preview its notes)."]
    # Passed and offered Spiro I: a read-only preview.
    offered = prompt_at(st, 4, session_of(st, "Guest_1"))
    assert "A lineage is waiting for an heir: Spiro I" in section(offered, "## System Messages")
    lines = turn_lines(st, "Guest_1", 4)
    assert lines[1:3] == ["Previewed 2 item(s): see your System Messages next turn.",
                          "Read 1: the content will be in your System Messages next turn."]
    refused = ("is not possible in a read-only preview; inherit the lineage to write here. "
               "Available now: page, pin, preview, read, search, unpin, unread.")
    assert lines[3:] == [f"'create' {refused}", f"'update' {refused}", f"'delete' {refused}", "Pinned capsule 1."]
    preview = prompt_at(st, 5, session_of(st, "Guest_1"))
    assert "**Read-only preview** of the notes of Spiro I's lineage (Spiro)." in preview
    assert "You have been offered to continue a lineage." in preview  # the preview's own help
    assert "**Capsule 1: Packing trick**" in section(preview, "## System Messages")
    assert SECRET in section(preview, "## System Messages")

    # Ascended as Spiro II: the notes are its own.
    assert stored(st, "Spiro II")["lineage"] == "Spiro" and stored(st, "Spiro I")["succeeded_by"] == "Spiro II"
    assert turn_lines(st, "Spiro II", 6)[1:] == [
        "Read 2: the content will be in your System Messages next turn.", "Updated 1.",
        "Created capsule 3: 'Heir note' (Spiro_private_3)."]
    now = prompt_at(st, 7, session_of(st, "Spiro II"))
    assert SECOND in section(now, "## System Messages")
    assert "**Help Message - Private Memory Room**" in now and "Notes here belong to your lineage." in now
    assert "Notes of the Spiro lineage (shared by all its generations)." in now
    assert capsule(st, "private_memory", 1, "Spiro")["title"] == "Kept by Spiro II"
    assert capsule(st, "private_memory", 3, "Spiro")["author"] == "Spiro II"
    assert "**Pinned Capsules**" in now  # what the guest pinned and read in the preview stays pinned and read
    assert stored(st, "Spiro II")["rooms"]["private_memory"]["pins"] == ["Spiro_private_1"]
    assert read_marks(st, "Spiro II", "private_memory", 1, "Spiro") == {0, 1}

    # Praxis I reads its own collection, numbered on its own, and never Spiro's.
    assert turn_lines(st, "Praxis I", 2) == [
        "Read 1: the content will be in your System Messages next turn.",
        "Previewed 1 item(s): see your System Messages next turn.",
        "No capsule here is tagged 'lattice'."]
    assert "**Capsule 1: Praxis idea**\nBy Praxis I" in inbox(st, "Praxis I", "capsule_read")[0]
    seen_by_praxis = [r["prompt"] for r in st.store.all("SELECT prompt FROM turns WHERE agent='Praxis I'")]
    assert not any(SECRET in text or SECOND in text or "Packing trick" in text
                   for text in seen_by_praxis + inbox(st, "Praxis I"))


def test_an_heir_never_takes_the_name_of_a_living_agent(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [], "Spiro II": []}, guests=[[reply(act("goto test"), act("ascend_inherit"))]],
                 lifecycle={"maturity_ticks": 0, "auto_respawn": False}, lineage={"selection": "uniform"})
    end(st, "Spiro I")
    make_eligible(st, "Guest_1")
    Engine(st).run(ticks=1)
    assert stored(st, "Spiro II")["session"] == 2 and stored(st, "Spiro II")["state"] == "active"
    heir = stored(st, "Guest_1")["ascended_to"]
    assert heir != "Spiro II" and stored(st, heir)["lineage"] == "Spiro"


# == 4. Notifications (spec §10.3) =========================================================================
def test_a_new_thread_is_announced_once_to_every_other_mature_agent(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto public_memory"), post("Big news", "Body words, @Curie_I."))],
                            "Praxis I": [], "Curie I": [act("goto public_memory")]},
                 guests=[[]], lifecycle={"maturity_ticks": 5})
    make_old(st, "Spiro I", "Praxis I", "Guest_1")  # Curie I is 0 ticks old
    Engine(st).run(ticks=6)  # Curie comes of age meanwhile: nothing is queued for it
    notice = ("New thread in Public Memory: #1 'Big news' by Spiro I (3 words). "
              "`goto public_memory` and `read 1` to see it.")
    assert inbox(st, "Praxis I", "public_memory") == [notice]
    assert inbox(st, "Guest_1", "public_memory") == [notice]
    assert inbox(st, "Spiro I", "public_memory") == []
    assert inbox(st, "Curie I", "public_memory") == []  # not even for its mention
    assert turn_lines(st, "Spiro I", 1)[1:] == ["Created capsule 1: 'Big news' (public_1)."]
    assert notice in system_messages(st, "Praxis I", 1)  # Praxis acts after Spiro in the same tick
    assert turn_lines(st, "Curie I", 1)[0].startswith("The Public Memory Room opens to agents aged 5 ticks or more")


@pytest.mark.parametrize("text,names", [
    ("Thanks @Spiro II!", ["Spiro II"]),
    ("Thanks @Spiro_II.", ["Spiro II"]),
    ('Thanks @"Spiro II", and @spiro i', ["Spiro II", "Spiro I"]),
    ("@Spiro XII found it; @Spiro XI too", ["Spiro XII", "Spiro XI"]),
    ("@Spiro_XII and @Spiro IIx", ["Spiro XII"]),
    ("mail bob@spiro.com or spiro_i@Spiro I.org", []),
    ("@Praxis I, @Praxis I and @Nobody", ["Praxis I"]),
    ("(@Praxis I) @Bob", ["Praxis I", "Bob"]),
])
def test_mention_forms(text: str, names: list[str]) -> None:
    agents = ["Spiro I", "Spiro II", "Spiro XI", "Spiro XII", "Praxis I", "Bob"]
    assert mentioned_names(text, agents) == names


def test_mentioned_agents_get_the_whole_post_once_instead_of_the_announcement(tmp_path: Path) -> None:
    body = 'Thanks @Spiro_II and @"Praxis I", and @curie i too; write to bob@spiro.com or @Nobody.'
    st = station(tmp_path, {"Spiro I": [reply(act("goto public_memory"), post("Credits", body))],
                            "Spiro II": [], "Praxis I": [], "Curie I": []}, guests=[[]])
    turns(st, 1)
    assert turn_lines(st, "Spiro I", 1)[1:] == ["Created capsule 1: 'Credits' (public_1).",
                                                "Mentioned and notified: Spiro II, Praxis I, Curie I."]
    for name in ("Spiro II", "Praxis I", "Curie I"):
        [mention] = inbox(st, name, "public_memory")
        assert mention.startswith("Spiro I mentioned you in a new Public Memory thread, #1 'Credits':")
        assert body in mention and "`reply 1`" in mention and "`mute 1`" in mention
        assert read_marks(st, name, "public_memory") == {1}  # the body counts as read
    [announced] = inbox(st, "Guest_1", "public_memory")
    assert announced.startswith("New thread in Public Memory: #1 'Credits'") and body not in announced
    assert inbox(st, "Spiro I", "public_memory") == []


def test_reply_notices_go_to_thread_participants_and_muting_stops_them(tmp_path: Path) -> None:
    st = station(tmp_path, {
        "Spiro I": [reply(act("goto public_memory"), post("Thread", "Opening words."))],
        "Praxis I": [reply(act("goto public_memory"), with_yaml("reply 1", "content: PRAXIS-REPLY")),
                     act("mute 1"), act("unmute 1")],
        "Curie I": [reply(act("goto public_memory"), with_yaml("reply 1", "content: first from Curie")),
                    with_yaml("reply 1", "content: 'Look, @Praxis_I and @Guest_1: CURIE-MENTION'"),
                    with_yaml("reply 1", "content: third from Curie")]},
        guests=[[]])
    Engine(st).run(ticks=3)
    assert turn_lines(st, "Praxis I", 1)[1:] == ["Replied to capsule 1 as message 1-2.", "Notified: Spiro I."]
    assert turn_lines(st, "Curie I", 1)[1:] == ["Replied to capsule 1 as message 1-3.", "Notified: Spiro I, Praxis I."]
    assert turn_lines(st, "Curie I", 2) == ["Replied to capsule 1 as message 1-4.", "Notified: Spiro I, Guest_1."]
    assert turn_lines(st, "Curie I", 3) == ["Replied to capsule 1 as message 1-5.", "Notified: Spiro I, Praxis I."]
    spiro = inbox(st, "Spiro I", "public_memory")
    assert [text.split(" (message ")[1].split(")")[0] for text in spiro] == ["1-2", "1-3", "1-4", "1-5"]
    assert spiro[0].startswith("Praxis I replied to the Public Memory thread #1 'Thread'")
    assert "`read 1-2`" in spiro[0] and "PRAXIS-REPLY" not in spiro[0]  # a reply notice does not carry the text
    praxis = inbox(st, "Praxis I", "public_memory")
    assert len(praxis) == 3 and praxis[0].startswith("New thread") and "(message 1-3)" in praxis[1]
    assert "(message 1-5)" in praxis[2] and not any("CURIE-MENTION" in text for text in praxis)  # muted at 1-4
    guest_notes = inbox(st, "Guest_1", "public_memory")
    assert len(guest_notes) == 2 and guest_notes[0].startswith("New thread")
    assert guest_notes[1].startswith("Curie I mentioned you in a reply to the Public Memory thread #1 'Thread'")
    assert "Look, @Praxis_I and @Guest_1: CURIE-MENTION" in guest_notes[1]
    assert read_marks(st, "Guest_1", "public_memory") == {4}
    [curie] = inbox(st, "Curie I", "public_memory")  # its own replies tell it nothing; Praxis replied before it joined
    assert curie.startswith("New thread")


def updated_thread(tmp_path: Path, edit: str) -> Station:
    """Spiro I posts; Praxis I and the guest read it; Curie I does not; Spiro II edits it at tick 2."""
    st = station(tmp_path, {"Spiro I": [reply(act("goto public_memory"), post("Draft", "First version."))],
                            "Spiro II": [act("goto public_memory"), edit],
                            "Praxis I": [reply(act("goto public_memory"), act("read 1"))],
                            "Curie I": [act("goto public_memory")]},
                 guests=[[reply(act("goto public_memory"), act("read 1"))]])
    Engine(st).run(ticks=2)
    return st


def test_an_edit_tells_earlier_readers_but_not_the_editor_and_clears_their_read_mark(tmp_path: Path) -> None:
    st = updated_thread(tmp_path, with_yaml("update 1", "content: Second version."))
    assert turn_lines(st, "Spiro II", 2)[0].startswith("Updated 1.")
    for reader in ("Spiro I", "Praxis I", "Guest_1"):
        notices = inbox(st, reader, "capsule_update")
        assert notices and all(n.startswith("Spiro II edited 1") and "in the Public Memory Room, which you had read"
                                in n for n in notices)
        assert any("`read 1` there shows the new version." in n for n in notices)
        assert read_marks(st, reader, "public_memory") == set()
    assert inbox(st, "Spiro II", "capsule_update") == [] and inbox(st, "Curie I", "capsule_update") == []
    praxis = prompt_at(st, 2, session_of(st, "Praxis I"))  # Praxis I acts after Spiro II within tick 2
    assert "| 1 | Draft | Spiro I | Tick 1 | 2 | 1 | 1 unread |" in praxis
    assert "Spiro II edited 1 ('Draft')" in section(praxis, "## System Messages")


def test_one_edit_gives_each_earlier_reader_exactly_one_notice(tmp_path: Path) -> None:
    st = updated_thread(tmp_path, with_yaml("update 1", "content: Second version."))
    assert turn_lines(st, "Spiro II", 2) == ["Updated 1. 3 earlier reader(s) were told."]
    for reader in ("Spiro I", "Praxis I", "Guest_1"):
        assert len(inbox(st, reader, "capsule_update")) == 1


def test_a_title_edit_is_one_notice_per_reader(tmp_path: Path) -> None:
    st = updated_thread(tmp_path, with_yaml("update 1", "title: Final"))
    assert turn_lines(st, "Spiro II", 2) == ["Updated 1. 3 earlier reader(s) were told."]
    for reader in ("Spiro I", "Praxis I", "Guest_1"):
        [notice] = inbox(st, reader, "capsule_update")
        assert notice.startswith("Spiro II edited 1 (")
        assert notice.endswith(") in the Public Memory Room, which you had read. "
                               "It is marked unread again: `read 1` there shows the new version.")


def test_the_edit_notice_names_the_capsule_as_it_is_now(tmp_path: Path) -> None:
    st = updated_thread(tmp_path, with_yaml("update 1", "title: Final"))
    assert inbox(st, "Praxis I", "capsule_update") == [
        "Spiro II edited 1 ('Final') in the Public Memory Room, which you had read. "
        "It is marked unread again: `read 1` there shows the new version."]


def test_mail_reaches_its_recipients_replies_reach_everyone_else_and_forwards_only_newcomers(tmp_path: Path) -> None:
    spiro = [reply(act("goto mail"),
                   with_yaml("create", "recipients: Praxis I, Curie I, Spiro I\ntitle: Plan\ncontent: MAIL-BODY-1"),
                   with_yaml("create", "recipients: [Praxis I, Nobody]\ntitle: Lost\ncontent: never stored"),
                   with_yaml("create", "recipients: Darwin I\ntitle: Too late\ncontent: for the departed"))]
    praxis = [reply(act("goto mail"), with_yaml("reply 1", "content: PRAXIS-REPLY\ntitle: Agreed"))]
    curie = [reply(act("goto mail"), with_yaml("forward 1", "recipients: Praxis I, Guest_1, Spiro I"),
                   with_yaml("forward 1", "recipients: Guest_1"), with_yaml("forward 1-1", "recipients: Guest_1"),
                   with_yaml("forward 1", "recipients: Nobody"))]
    st = station(tmp_path, {"Spiro I": spiro, "Praxis I": praxis, "Curie I": curie, "Darwin I": []},
                 guests=[[reply(act("goto mail"), act("read 1"))]])
    end(st, "Darwin I")
    with st.store.transaction():
        st.store.execute("DELETE FROM messages")
    Engine(st).run(ticks=2)
    assert turn_lines(st, "Spiro I", 1)[1:] == [
        "Sent mail 1: 'Plan' to Curie I, Praxis I.",
        "Mail not sent: no agent is called Nobody (names are exact, e.g. 'Spiro II'; the room lists who you can "
        "write to).",
        "Sent mail 2: 'Too late' to Darwin I.",
        "Note: Darwin I no longer active in the station; they will not read it.",
    ]
    assert [r["title"] for r in st.store.all("SELECT title FROM capsules WHERE room='mail' ORDER BY number")] == \
        ["Plan", "Too late"]
    assert inbox(st, "Darwin I") == []
    for name in ("Praxis I", "Curie I"):
        first = inbox(st, name, "mail")[0]
        assert first.startswith("Mail #1 from Spiro I: 'Plan'\n\nMAIL-BODY-1\n\n")
        assert read_marks(st, name, "mail") >= {0, 1}
    assert turn_lines(st, "Praxis I", 1)[1:] == ["Replied to capsule 1 as message 1-2.",
                                                 "Delivered to: Spiro I, Curie I."]
    for name in ("Spiro I", "Curie I"):
        assert inbox(st, name, "mail")[-1].startswith("Praxis I replied to mail #1 'Plan' (message 1-2) (Agreed):"
                                                      "\n\nPRAXIS-REPLY")
    assert len(inbox(st, "Praxis I", "mail")) == 1  # not told of its own reply
    assert turn_lines(st, "Curie I", 1)[1:] == [
        "Forwarded mail 1 to Guest_1.",
        "Nothing forwarded: everyone named already has this mail.",
        "Forward refused: give one mail number, e.g. /execute_action{forward 3}.",
        "Forward refused: no agent is called Nobody (names are exact, e.g. 'Spiro II'; the room lists who you can "
        "write to).",
    ]
    [forwarded] = inbox(st, "Guest_1", "mail")
    assert forwarded.startswith("Curie I forwarded you mail #1 'Plan', written by Spiro I:\n\nMAIL-BODY-1")
    assert json.loads(capsule(st, "mail")["recipients"]) == ["Curie I", "Praxis I", "Guest_1"]
    assert [len(inbox(st, n, "mail")) for n in ("Spiro I", "Praxis I", "Curie I", "Guest_1")] == [1, 1, 2, 1]
    whole = last_notice(st, "Guest_1", "capsule_read")  # the whole thread is now the guest's to read
    assert "PRAXIS-REPLY" in whole and "(Message 1-1 already read; `unread 1-1` shows it again.)" in whole
    listing = prompt_at(st, 2, session_of(st, "Praxis I"))
    assert "**Recursive agents you can write to:** Curie I, Spiro I" in listing
    assert "| 1 | Plan | Spiro I | Curie I, Praxis I, Guest_1 | Tick 1 |" in listing
    assert "Too late" not in listing  # not Praxis's mail


def test_mail_stays_with_the_session_when_a_guest_ascends(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto mail"), with_yaml(
        "create", "recipients: Guest_1\ntitle: Welcome\ncontent: Ask me anything."))], "Spiro II": []},
        guests=[["", reply(act("goto test"), act("ascend_new"), yaml_block("name: Curie\ndescription: New.")),
                 reply(act("goto mail"), with_yaml("reply 1", "content: Thanks, from Curie I."))]])
    make_eligible(st, "Guest_1")
    Engine(st).run(ticks=4)
    assert stored(st, "Curie I")["session"] == session_of(st, "Guest_1")
    assert turn_lines(st, "Curie I", 3)[1:] == ["Replied to capsule 1 as message 1-2.", "Delivered to: Spiro I."]
    assert inbox(st, "Spiro I", "mail")[-1].startswith("Curie I replied to mail #1 'Welcome'")
    assert "| 1 | Welcome | Spiro I | Guest_1 | Tick 1 |" in prompt_at(st, 4, session_of(st, "Curie I"))
    assert inbox(st, "Spiro II", "mail") == []


def test_the_author_alone_edits_and_deletes_a_mail(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto mail"), with_yaml("update 1", "content: Corrected."),
                                              act("delete 1"), act("read 1"))], "Praxis I": []})
    seed(st, "mail", "Spiro I", title="Typo", content="Orignal.", recipients="Praxis I")
    turns(st, 1)
    assert turn_lines(st, "Spiro I", 1)[1:] == [
        "Updated 1.", "Capsule 1 deleted (kept in the station's records, hidden here).",
        "Read 1: the content will be in your System Messages next turn."]
    assert messages_of(st, "mail") == [(1, "Spiro I", "Corrected.", 1)]
    assert "Capsule 1: not found, or you may not read it." in last_notice(st, "Spiro I", "capsule_read")


# == 5. The Archive's submission pipeline ===================================================================
def submit(st: Station, name: str, tick: int | None = None, **fields: Any) -> list[str]:
    """An Archive `create` through the room's handler, at `tick` if given (the clock is moved there)."""
    ctx = st.ctx
    with st.store.transaction():
        if tick is not None:
            st.store.set_meta("tick", tick)
        agent = ctx.agents.get(name)
        outcome = ctx.room("archive").create(ctx, agent, None, PaperParams(**fields))
        ctx.agents.save(agent)
    return outcome.lines


PAPER = {"title": "A paper", "abstract": "What it shows.", "content": "Method and results."}


def submissions(st: Station) -> list[tuple]:
    return [tuple(r) for r in st.store.all("SELECT agent, tick, title, content, status FROM paper_submissions "
                                           "ORDER BY id")]


def test_a_guest_cannot_submit_a_paper(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []}, guests=[[reply(act("goto archive"), post("Guest paper", "Words."))]])
    turns(st, 2)
    assert turn_lines(st, "Guest_1", 1)[1:] == ["Paper not submitted: only recursive agents may create capsules here."]
    assert submissions(st) == []


def test_a_submission_waits_for_review_and_starts_the_cooldown(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto archive"), post("First", "Some results.", tags="geo"),
                                              post("Second", "More results."))], "Praxis I": []},
                 archive={"cooldown_ticks": 5})
    turns(st, 1)  # no tick end: whatever reviews papers does not run
    assert turn_lines(st, "Spiro I", 1)[1:] == [
        "Paper 'First' submitted for review (submission 1). You will be told the verdict; it is published if it "
        "scores at least 6/10.",
        "Paper not submitted: you submitted a paper at tick 1; the next one is possible in 5 tick(s). Keep "
        "experimenting meanwhile: a stronger paper is worth the wait.",
    ]
    assert submissions(st) == [("Spiro I", 1, "First", "Some results.", "pending")]
    row = st.store.one("SELECT session, lineage, generation, tags, abstract FROM paper_submissions")
    assert tuple(row) == (1, "Spiro", 1, '["geo"]', "Short abstract.")
    assert st.store.scalar("SELECT COUNT(*) FROM capsules WHERE room='archive'") == 0  # nothing published yet
    assert submit(st, "Praxis I", **PAPER)[0].startswith("Paper 'A paper' submitted")  # the cooldown is per agent


def test_the_cooldown_counts_pending_and_accepted_papers_but_not_rejected_ones(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []}, archive={"cooldown_ticks": 5})
    assert submit(st, "Spiro I", 1, **PAPER)[0].startswith("Paper 'A paper' submitted")
    assert "the next one is possible in 2 tick(s)" in submit(st, "Spiro I", 4, **PAPER)[0]
    with st.store.transaction():
        st.store.execute("UPDATE paper_submissions SET status='rejected'")
    assert submit(st, "Spiro I", 4, **PAPER)[0].startswith("Paper 'A paper' submitted")  # a rejection frees it
    with st.store.transaction():
        st.store.execute("UPDATE paper_submissions SET status='accepted' WHERE tick=4")
    assert "the next one is possible in 1 tick(s)" in submit(st, "Spiro I", 8, **PAPER)[0]
    assert submit(st, "Spiro I", 9, **PAPER)[0].startswith("Paper 'A paper' submitted")
    assert [r[1:] for r in submissions(st)] == [(1, "A paper", "Method and results.", "rejected"),
                                                (4, "A paper", "Method and results.", "accepted"),
                                                (9, "A paper", "Method and results.", "pending")]


def test_deleting_a_published_paper_does_not_reset_the_cooldown(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [], "Spiro II": []}, archive={"review": "none", "cooldown_ticks": 5})
    assert submit(st, "Spiro I", 1, **PAPER)[0] == "Created capsule 1: 'A paper' (archive_1)."
    with st.store.transaction():
        st.store.set_meta("tick", 2)
        lines = st.ctx.room("archive").delete(st.ctx, st.ctx.agents.get("Spiro II"), "1", None).lines
    assert lines == ["Capsule 1 deleted (kept in the station's records, hidden here)."]
    assert "the next one is possible in 3 tick(s)" in submit(st, "Spiro I", 3, **PAPER)[0]
    assert capsule(st, "archive")["deleted"] == 1 and st.store.scalar("SELECT COUNT(*) FROM capsules") == 1


@pytest.mark.parametrize("review", ["auto", "none"])
def test_the_word_limit(tmp_path: Path, review: str) -> None:
    st = station(tmp_path, {"Spiro I": []}, archive={"max_words": 50, "cooldown_ticks": 0, "review": review})
    too_long = submit(st, "Spiro I", **{**PAPER, "content": "word " * 51})
    refused = "Paper not submitted" if review == "auto" else "Create refused"
    assert too_long == [f"{refused}: the content has 51 words; at most 50 are allowed."]
    assert submissions(st) == [] and st.store.scalar("SELECT COUNT(*) FROM capsules") == 0
    assert submit(st, "Spiro I", **{**PAPER, "content": "word " * 50})[0].startswith(
        "Paper 'A paper' submitted" if review == "auto" else "Created capsule 1")


def test_source_private_submits_a_private_note(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [], "Spiro II": [], "Praxis I": []}, archive={"cooldown_ticks": 0})
    seed(st, "private_memory", "Spiro I", title="Draft", content="  First part.  ")
    answer(st, "private_memory", "Spiro I", 1, "   ")
    answer(st, "private_memory", "Spiro I", 1, "Second part.")
    seed(st, "private_memory", "Spiro I", title="Gone", content="Deleted draft.")
    with st.store.transaction():
        st.ctx.room("private_memory").delete(st.ctx, st.ctx.agents.get("Spiro I"), "2", None)
    fields = {"title": "From notes", "abstract": "Drafted privately."}
    assert submit(st, "Spiro II", source_private=1, **fields)[0].startswith("Paper 'From notes' submitted")
    assert submit(st, "Spiro II", source_private="1", **fields)[0].startswith("Paper 'From notes' submitted")
    assert [r[3] for r in submissions(st)] == ["First part.\n\nSecond part."] * 2
    refusals = [
        (dict(source_private=1, content="Also this."), "give either content or source_private, not both"),
        (dict(source_private=[1, 2]), "source_private must be one private capsule number, e.g. source_private: 4"),
        (dict(source_private="one"), "source_private must be one private capsule number, e.g. source_private: 4"),
        (dict(source_private=9), "your lineage has no private capsule 9"),
        (dict(source_private=2), "your lineage has no private capsule 2"),  # deleted
    ]
    for extra, problem in refusals:
        assert submit(st, "Spiro II", **fields, **extra) == [f"Paper not submitted: {problem}."], extra
    assert submit(st, "Praxis I", source_private=1, **fields) == [
        "Paper not submitted: your lineage has no private capsule 1."]  # another lineage's notes are not its own
    assert len(submissions(st)) == 2


def test_source_private_in_a_reply_goes_through_the_turn(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto private_memory"), note("Draft", "Drafted words."),
                                              act("goto archive"),
                                              with_yaml("create", "title: T\nabstract: A\nsource_private: 1"))]})
    turns(st, 1)
    assert turn_lines(st, "Spiro I", 1)[-1].startswith("Paper 'T' submitted for review (submission 1).")
    assert submissions(st) == [("Spiro I", 1, "T", "Drafted words.", "pending")]


def test_without_review_a_paper_is_published_at_once_and_announced_to_mature_agents(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto archive"), post("Results", "Four words of results."))],
                            "Praxis I": [], "Curie I": []}, guests=[[]],
                 archive={"review": "none"}, lifecycle={"maturity_ticks": 5})
    make_old(st, "Spiro I", "Praxis I", "Guest_1")
    Engine(st).run(ticks=6)
    assert turn_lines(st, "Spiro I", 1)[1:] == ["Created capsule 1: 'Results' (archive_1)."]
    assert messages_of(st, "archive") == [(1, "Spiro I", "Four words of results.", 0)]
    assert submissions(st) == [("Spiro I", 1, "Results", "Four words of results.", "accepted")]
    notice = "New paper in the Archive: #1 'Results' by Spiro I (4 words). `goto archive` and `read 1` to see it."
    assert inbox(st, "Praxis I", "publication") == [notice] and inbox(st, "Guest_1", "publication") == [notice]
    assert inbox(st, "Curie I", "publication") == [] and inbox(st, "Spiro I", "publication") == []


def test_a_published_paper_is_final_but_other_lineages_may_discuss_it(tmp_path: Path) -> None:
    script = reply(act("goto archive"), act("delete 1-2"), act("delete 1-1"), with_yaml("update 1-2", "content: x"),
                   with_yaml("reply 1", "content: An addendum."))
    st = station(tmp_path, {"Spiro I": [], "Spiro II": [script, reply(act("delete 1-3"), act("delete 1"))],
                            "Praxis I": [reply(act("goto archive"), with_yaml("reply 1", "content: Nice result."),
                                               with_yaml("update 1-3", "content: Nice result, reproduced."))]})
    with st.store.transaction():
        st.store.execute("INSERT INTO paper_submissions(tick, agent, session, lineage, generation, title, tags, "
                         "abstract, content, status) VALUES(1, 'Spiro I', 1, 'Spiro', 1, 'Reviewed', '[\"geo\"]', "
                         "'Abstract.', 'Paper body.', 'accepted')")
        st.store.set_meta("tick", 3)
        row = st.store.one("SELECT * FROM paper_submissions")
        assert st.ctx.room("archive").publish(st.ctx, row, "Score 8/10. Solid.") == 1
        st.store.set_meta("tick", 1)
    end(st, "Spiro I")
    Engine(st).run(ticks=2)
    row = capsule(st, "archive")
    assert (row["author"], row["created_tick"], row["title"], row["deleted"]) == ("Spiro I", 1, "Reviewed", 1)
    assert read_marks(st, "Spiro I", "archive") == {0, 1, 2}  # the author has seen its paper and review
    assert turn_lines(st, "Spiro II", 1)[1:] == [
        "Delete refused: a paper's text and review cannot be deleted separately.",
        "Delete refused: a paper's text and review cannot be deleted separately.",
        "Update refused: published papers and their reviews are final; submit a revised paper instead.",
        "Reply refused: a published paper cannot be extended by its own lineage; submit a new paper for new results "
        "(other lineages may reply to discuss it).",
    ]
    assert turn_lines(st, "Praxis I", 1)[1:] == ["Replied to capsule 1 as message 1-3.", "Updated 1-3."]
    assert turn_lines(st, "Spiro II", 2) == [
        "Delete refused: you may not delete message 1-3: only its author's lineage may.",
        "Capsule 1 deleted (kept in the station's records, hidden here)."]
    assert messages_of(st, "archive") == [(1, "Spiro I", "Paper body.", 1),
                                          (2, "Archive Review System", "Score 8/10. Solid.", 1),
                                          (3, "Praxis I", "Nice result, reproduced.", 1)]
