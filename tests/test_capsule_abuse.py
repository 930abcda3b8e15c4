"""Abuse of the capsule rooms: oversized, malformed or unauthorised input is refused with a clear line
in the agent's next prompt, quickly, and nothing stored changes (the capsule tables are compared
before and after the turn).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import act, events, reply
from test_capsule_rooms import answer, capsule, capsule_rows, inbox, last_notice, seed, station, turn_lines, with_yaml

from station.apps.world import Station
from station.core.engine import Engine

MEGABYTE = "a" * 1_000_000


def attempt(tmp_path: Path, room: str, *actions: str, by: str = "Praxis I", setup: Any = None,
            **overrides: Any) -> tuple[Station, list[str]]:
    """Spiro I wrote capsule 1 in `room` (a public thread, a private note, a mail to Praxis I, or a paper
    published without review); then `by` (Praxis I or Spiro I) goes there and tries `actions` in one turn.
    Returns the station and the actor's result lines, after checking that nothing stored changed."""
    overrides.setdefault("archive", {"review": "none"})
    st = station(tmp_path, {"Spiro I": [], "Praxis I": []}, **overrides)
    fields = {"title": "Original", "content": "Original words."}
    if room in ("public_memory", "archive"):
        fields["abstract"] = "Original abstract."
    if room == "mail":
        fields["recipients"] = "Praxis I"
    seed(st, room, "Spiro I", **fields)
    if setup is not None:
        setup(st)
    with st.store.transaction():
        st.store.execute("DELETE FROM messages")
        agent = st.ctx.agents.get(by)
        script = tmp_path / "actor.jsonl"
        script.write_text(json.dumps({"text": reply(act(f"goto {room}"), *actions)}) + "\n", encoding="utf-8")
        agent.model = {**agent.model, "replay_file": str(script)}
        st.ctx.agents.save(agent)
    before = capsule_rows(st)
    started = time.perf_counter()
    engine = Engine(st)
    engine.step()
    engine.step()
    assert time.perf_counter() - started < 5
    assert capsule_rows(st) == before, "a refused action changed the stored capsules"
    lines = turn_lines(st, by, 1)
    assert lines[0].startswith("You moved to the")
    return st, lines[1:]


# -- size ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("room,action,refusal", [
    ("public_memory", with_yaml("create", f"title: Big\nabstract: a\ncontent: {MEGABYTE}"), "Create refused"),
    ("private_memory", with_yaml("create", f"title: Big\ncontent: {MEGABYTE}"), "Create refused"),
    ("mail", with_yaml("create", f"recipients: Spiro I\ntitle: Big\ncontent: {MEGABYTE}"), "Mail not sent"),
    ("archive", with_yaml("create", f"title: Big\nabstract: a\ncontent: {MEGABYTE}"), "Create refused"),
    ("public_memory", with_yaml("reply 1", f"content: {MEGABYTE}"), "Reply refused"),
    ("private_memory", with_yaml("update 1", f"content: {MEGABYTE}"), "Update refused"),
], ids=["public-create", "private-create", "mail-create", "archive-create", "public-reply", "private-update"])
def test_a_one_megabyte_body_is_refused(tmp_path: Path, room: str, action: str, refusal: str) -> None:
    st, lines = attempt(tmp_path, room, action, by="Spiro I" if room == "private_memory" else "Praxis I",
                        engine={"max_reply_chars": 2_000_000})
    assert lines == [f"{refusal}: the content is 1,000,000 characters long; at most 200,000 are allowed."]


def test_an_over_long_abstract_tag_list_or_recipient_list_is_refused(tmp_path: Path) -> None:
    names = json.dumps([f"Agent{i} I" for i in range(51)])
    st, lines = attempt(
        tmp_path, "public_memory",
        with_yaml("create", "title: T\ncontent: c\nabstract: " + json.dumps("word " * 501)),
        with_yaml("create", "title: T\nabstract: a\ncontent: c\ntags: " + ",".join(f"t{i}" for i in range(11))),
        with_yaml("create", "title: T\nabstract: a\ncontent: c\ntags: [" + "x" * 51 + "]"),
        with_yaml("create", "title: " + "T" * 201 + "\nabstract: a\ncontent: c"),
        act("goto mail"), with_yaml("create", f"title: T\ncontent: c\nrecipients: {names}"))
    assert lines == [
        "Create refused: the abstract has 501 words; at most 500 are allowed.",
        "Create refused: 11 tags given; at most 10 are allowed.",
        f"Create refused: tag '{'x' * 51}' must be one short line (at most 50 characters).",
        "Create refused: the title is 201 characters long; at most 200 are allowed.",
        "You moved to the Mail Room.",
        "Mail not sent: 51 recipients given; at most 50 are allowed.",
    ]


@pytest.mark.parametrize("action,problem", [
    ("read 1:1000000", "'1:1000000' names 1000000 items; ask for at most 100 at a time"),
    ("read 1-1:1-1000000", "'1-1:1-1000000' names 1000000 items; ask for at most 100 at a time"),
    ("read 1:99999999999999999999999", "'1:99999999999999999999999' names 99999999999999999999999 items; "
                                       "ask for at most 100 at a time"),
    ("read " + ",".join(str(i) for i in range(1, 150)),
     "that names more than 100 items; ask for at most 100 at a time"),
    ("read 1:60, 61:120", "that names more than 100 items; ask for at most 100 at a time"),
    ("unread 1:1000000", "'1:1000000' names 1000000 items; ask for at most 100 at a time"),
    ("preview 1:1000000", "'1:1000000' names 1000000 items; ask for at most 100 at a time"),
    ("pin " + ",".join(str(i) for i in range(1, 150)), "that names more than 100 items; ask for at most 100 at a time"),
], ids=["read-range", "read-message-range", "read-giant-range", "read-list", "read-two-ranges", "unread-range",
        "preview-range", "pin-list"])
def test_huge_ranges_and_lists_are_refused_at_once(tmp_path: Path, action: str, problem: str) -> None:
    st, lines = attempt(tmp_path, "public_memory", act(action))
    verb = action.split()[0].capitalize()
    [line] = lines
    assert line.startswith(f"{verb} refused: {problem}.")
    assert inbox(st, "Praxis I", "capsule_read") == inbox(st, "Praxis I", "capsule_preview") == []


BIG = "99999999999999999999999"  # past SQLite's 64-bit integers


@pytest.mark.parametrize("room,action,expected", [
    ("public_memory", act(f"read {BIG}"), f"Read {BIG}: the content will be in your System Messages next turn."),
    ("public_memory", act(f"read 1-{BIG}"), f"Read 1-{BIG}: the content will be in your System Messages next turn."),
    ("public_memory", act(f"delete {BIG}"), f"Delete refused: capsule {BIG} not found."),
    ("public_memory", act(f"delete 1-{BIG}"), f"Delete refused: message 1-{BIG} not found."),
    ("public_memory", with_yaml(f"update {BIG}", "title: x"), f"Update refused: capsule {BIG} not found."),
    ("public_memory", with_yaml(f"reply {BIG}", "content: x"), f"Reply refused: capsule {BIG} not found."),
    ("public_memory", act(f"pin {BIG}"), f"Capsule {BIG}: not found."),
    ("public_memory", act(f"mute {BIG}"), f"Mute refused: capsule {BIG} not found (mute takes a capsule number)."),
    ("public_memory", act(f"unread {BIG}"), f"{BIG}: not found, or you may not read it."),
    ("public_memory", act(f"preview {BIG}"), "Previewed 1 item(s): see your System Messages next turn."),
    ("mail", with_yaml(f"forward {BIG}", "recipients: Praxis I"), f"Forward refused: mail {BIG} not found."),
    ("archive", with_yaml("create", f"title: T\nabstract: a\nsource_private: {BIG}"),
     f"Paper not submitted: your lineage has no private capsule {BIG}."),
], ids=["read", "read-message", "delete", "delete-message", "update", "reply", "pin", "mute", "unread", "preview",
        "forward", "source_private"])
def test_an_absurd_capsule_number_is_simply_not_found(tmp_path: Path, room: str, action: str, expected: str) -> None:
    st, lines = attempt(tmp_path, room, action, by="Spiro I", archive={"review": "auto", "cooldown_ticks": 0})
    assert lines == [expected]
    assert events(st, "operator_alert") == []
    for text in inbox(st, "Spiro I", "capsule_read") + inbox(st, "Spiro I", "capsule_preview"):
        assert "not found" in text


# -- titles -------------------------------------------------------------------------------------------------
def test_a_unicode_title_is_welcome(tmp_path: Path) -> None:
    title = "Ünïcødé 🚀 title — ∑ 日本語"
    st = station(tmp_path, {"Spiro I": [reply(act("goto public_memory"),
                                              with_yaml("create", f"title: {title}\nabstract: a\ncontent: c"))]})
    Engine(st).run(ticks=2)
    assert turn_lines(st, "Spiro I", 1)[1:] == [f"Created capsule 1: '{title}' (public_1)."]
    assert capsule(st, "public_memory")["title"] == title
    assert f"| 1 | {title} | Spiro I | Tick 1 |" in st.store.scalar("SELECT prompt FROM turns WHERE tick=2")


ONE_LINE = "the title must be one line of text without control characters"


@pytest.mark.parametrize("title", [
    '"two\\nlines"', "|\n  two\n  lines", '"carriage\\rreturn"', '"bell\\a"', '"nul\\0byte"',
    '"\\e[31mred\\e[0m"', '"unit\\x1fseparator"', '"delete\\x7f"',
])
def test_control_characters_and_line_breaks_in_titles_are_refused(tmp_path: Path, title: str) -> None:
    st, lines = attempt(tmp_path, "public_memory", with_yaml("create", f"title: {title}\nabstract: a\ncontent: c"),
                        with_yaml("update 1", f"title: {title}"), with_yaml("update 1-1", f"title: {title}"),
                        with_yaml("reply 1", f"content: c\ntitle: {title}"), by="Spiro I")
    assert lines == [f"Create refused: {ONE_LINE}.", f"Update refused: {ONE_LINE}.", f"Update refused: {ONE_LINE}.",
                     "Reply refused: the reply title must be one line of text without control characters."]


@pytest.mark.parametrize("title", ['"line\\Lseparator"', '"paragraph\\Pseparator"', '"next\\Nline"'])
def test_unicode_line_breaks_in_titles_are_refused(tmp_path: Path, title: str) -> None:
    st, lines = attempt(tmp_path, "public_memory", with_yaml("create", f"title: {title}\nabstract: a\ncontent: c"))
    assert lines == [f"Create refused: {ONE_LINE}."]


# -- wrong YAML types ---------------------------------------------------------------------------------------
NOT_A_STRING = "Input should be a valid string"


@pytest.mark.parametrize("room,action,body,problem", [
    ("public_memory", "create", "title: [a, b]\nabstract: a\ncontent: c", f"'title': {NOT_A_STRING}"),
    ("public_memory", "create", "title: T\nabstract: a\ncontent: {x: 1}", f"'content': {NOT_A_STRING}"),
    ("public_memory", "create", "title: T\nabstract: [a]\ncontent: c", f"'abstract': {NOT_A_STRING}"),
    ("private_memory", "create", "title: {a: 1}\ncontent: c", f"'title': {NOT_A_STRING}"),
    ("public_memory", "reply 1", "content: [a, b]", f"'content': {NOT_A_STRING}"),
    ("public_memory", "update 1", "title: [x]", f"'title': {NOT_A_STRING}"),
    ("mail", "create", "title: T\ncontent: c\nrecipients: {Spiro I: yes}",
     "'recipients.list[str]': Input should be a valid list; 'recipients.str': Input should be a valid string"),
    ("mail", "forward 1", "recipients: {Curie I: 1}",
     "'recipients.list[str]': Input should be a valid list; 'recipients.str': Input should be a valid string"),
])
def test_yaml_of_the_wrong_type_is_explained(tmp_path: Path, room: str, action: str, body: str, problem: str) -> None:
    st, lines = attempt(tmp_path, room, with_yaml(action, body), by="Spiro I")
    [line] = lines
    name = action.split()[0]
    assert line.startswith(f"'{name}' was not run: YAML problem: {problem}. Expected: ")


def test_yaml_that_is_not_a_mapping_is_explained(tmp_path: Path) -> None:
    st, lines = attempt(tmp_path, "public_memory", with_yaml("create", "- title\n- content"))
    assert lines == ["'create' was not run: its YAML error: parameters must be a mapping of 'key: value' lines, "
                     "got a list. Tips: put the ```yaml block on the line right after the action, close it with "
                     "```, and indent the lines of a `|` block by two spaces."]


def test_recipients_given_as_a_number_name_nobody(tmp_path: Path) -> None:
    st, lines = attempt(tmp_path, "mail", with_yaml("create", "title: T\ncontent: c\nrecipients: 42"))
    assert lines == ["Mail not sent: no agent is called 42 (names are exact, e.g. 'Spiro II'; the room lists who "
                     "you can write to)."]


@pytest.mark.parametrize("body", ["source_private: {n: 1}", "source_private: 1.5", "source_private: true"])
def test_source_private_of_the_wrong_type_is_explained(tmp_path: Path, body: str) -> None:
    st, lines = attempt(tmp_path, "archive", with_yaml("create", f"title: T\nabstract: a\n{body}"),
                        archive={"review": "auto"})
    assert lines == ["Paper not submitted: source_private must be one private capsule number, "
                     "e.g. source_private: 4."]


@pytest.mark.parametrize("action,body", [
    ("create", "title: T\nabstract: a\ncontent: c\ntags: {geometry: 1}"),
    ("create", "title: T\nabstract: a\ncontent: c\ntags: [geometry, [nested]]"),
    ("update 1", "tags: {geometry: 1}"),
])
def test_tags_of_the_wrong_type_are_refused(tmp_path: Path, action: str, body: str) -> None:
    st, lines = attempt(tmp_path, "public_memory", with_yaml(action, body), by="Spiro I")
    [line] = lines
    assert line.startswith(f"'{action.split()[0]}' was not run: YAML problem: 'tags.")


# -- other people's things ----------------------------------------------------------------------------------
@pytest.mark.parametrize("room,action,refusal", [
    ("public_memory", "delete 1", "Delete refused: you may not delete capsule 1: only its author's lineage may."),
    ("public_memory", "delete 1-1", "Delete refused: you may not delete message 1-1: only its author's lineage may."),
    ("public_memory", "delete 1-2", "Delete refused: you may not delete message 1-2: only its author's lineage may."),
    ("private_memory", "delete 1", "Delete refused: capsule 1 not found."),
    ("archive", "delete 1", "Delete refused: you may not delete capsule 1: only its author's lineage may."),
    ("mail", "delete 1", "Delete refused: only the author may delete it."),
    ("mail", "delete 1-1", "Delete refused: only the author may delete it."),
])
def test_deleting_what_others_wrote_is_refused(tmp_path: Path, room: str, action: str, refusal: str) -> None:
    def reply_by_spiro(st: Station) -> None:
        if room == "public_memory":  # a second message, also by Spiro I, in the thread
            answer(st, room, "Spiro I", 1, "Spiro's own reply.")
    st, lines = attempt(tmp_path, room, act(action), setup=reply_by_spiro)
    assert lines == [refusal]


def test_a_thread_owner_cannot_delete_a_foreign_reply_but_may_delete_the_thread(tmp_path: Path) -> None:
    st, lines = attempt(tmp_path, "public_memory", act("delete 1-2"), by="Spiro I",
                        setup=lambda st: answer(st, "public_memory", "Praxis I", 1, "Praxis speaks."))
    assert lines == ["Delete refused: you may not delete message 1-2: only its author's lineage may."]


def published(st: Station) -> None:
    """A second paper, reviewed and published by the reviewer hook's own call."""
    with st.store.transaction():
        st.store.execute("INSERT INTO paper_submissions(tick, agent, session, lineage, generation, title, tags, "
                         "abstract, content, status) VALUES(1, 'Spiro I', 1, 'Spiro', 1, 'Reviewed', '[]', "
                         "'Abstract.', 'Reviewed words.', 'accepted')")
        row = st.store.one("SELECT * FROM paper_submissions WHERE title='Reviewed'")
        assert st.ctx.room("archive").publish(st.ctx, row, "Score 7/10.") == 2


FINAL = "Update refused: published papers and their reviews are final; submit a revised paper instead."


@pytest.mark.parametrize("by", ["Spiro I", "Praxis I"])
def test_published_papers_cannot_be_updated_by_anyone(tmp_path: Path, by: str) -> None:
    st, lines = attempt(tmp_path, "archive", with_yaml("update 1", "title: Improved"),
                        with_yaml("update 1", "content: Better words."), with_yaml("update 1-1", "content: Sneaky."),
                        with_yaml("update 2", "abstract: Rewritten."), with_yaml("update 2-2", "content: Score 10/10."),
                        with_yaml("update 2-1", "title: Renamed"), by=by, setup=published)
    assert lines == [FINAL] * 6
    assert [r["content"] for r in st.store.all("SELECT content FROM capsule_messages ORDER BY id")] == \
        ["Original words.", "Reviewed words.", "Score 7/10."]


def test_a_papers_review_cannot_be_deleted_or_answered_by_its_own_lineage(tmp_path: Path) -> None:
    st, lines = attempt(tmp_path, "archive", act("delete 2-2"), act("delete 2-1"),
                        with_yaml("reply 2", "content: Actually the score should be higher."),
                        by="Spiro I", setup=published)
    assert lines == [
        "Delete refused: a paper's text and review cannot be deleted separately.",
        "Delete refused: a paper's text and review cannot be deleted separately.",
        "Reply refused: a published paper cannot be extended by its own lineage; submit a new paper for new "
        "results (other lineages may reply to discuss it).",
    ]


# -- empty values and deleted things ------------------------------------------------------------------------
@pytest.mark.parametrize("body,refusal", [
    ("title: null", "Update refused: title cannot be empty (null); leave a key out to keep it."),
    ("title: ~", "Update refused: title cannot be empty (null); leave a key out to keep it."),
    ("title:", "Update refused: title cannot be empty (null); leave a key out to keep it."),
    ("title: ''", "Update refused: the title is empty."),
    ("content: null", "Update refused: content cannot be empty (null); leave a key out to keep it."),
    ("abstract: null\ntitle: Fine", "Update refused: abstract cannot be empty (null); leave a key out to keep it."),
])
@pytest.mark.parametrize("room", ["public_memory", "private_memory", "mail"])
def test_emptying_a_field_by_update_is_refused(tmp_path: Path, room: str, body: str, refusal: str) -> None:
    st, lines = attempt(tmp_path, room, with_yaml("update 1", body), by="Spiro I")
    assert lines == [refusal]


def deleted(st: Station) -> None:
    with st.store.transaction():
        room = next(r for r in ("public_memory", "private_memory", "mail")
                    if st.store.one("SELECT 1 FROM capsules WHERE room=?", (r,)))
        lines = st.ctx.room(room).delete(st.ctx, st.ctx.agents.get("Spiro I"), "1", None).lines
        assert lines[0].startswith("Capsule 1 deleted")


@pytest.mark.parametrize("room", ["public_memory", "private_memory", "mail"])
def test_a_deleted_capsule_is_gone_for_every_action(tmp_path: Path, room: str) -> None:
    st, lines = attempt(tmp_path, room, act("read 1"), act("read 1-1"), act("preview 1"), act("pin 1"),
                        act("unread 1"), act("search x"), with_yaml("reply 1", "content: Hello?"),
                        with_yaml("update 1", "title: Back"), with_yaml("update 1-1", "content: Back"),
                        act("delete 1-1"), by="Spiro I", setup=deleted)
    assert lines == [
        "Read 1: the content will be in your System Messages next turn.",
        "Read 1-1: the content will be in your System Messages next turn.",
        "Previewed 1 item(s): see your System Messages next turn.",
        "Capsule 1: not found.",
        "1: not found, or you may not read it.",
        "No capsule here is tagged 'x'.",
        "Reply refused: capsule 1 was deleted.",
        "Update refused: that item was deleted.",
        "Update refused: that item was deleted.",
        "Delete refused: 1-1 is already deleted.",
    ]
    reads = inbox(st, "Spiro I", "capsule_read")
    assert [text.split("\n\n", 1)[1] for text in reads] == ["Capsule 1: not found, or you may not read it."] * 2
    assert last_notice(st, "Spiro I", "capsule_preview").endswith("Capsule 1: not found, or you may not see it.")
