"""Poison pills: nothing an agent writes, a model returns or a submission leaves behind may stop the
station. Each test runs a real station (SQLite file, real engine) past the bad input and checks that
the next tick was committed and that the bad bytes are stored as replacement characters.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import act, make_station, recursive, replay_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from station.core.engine import Engine

RESEARCH = {"research": {"tasks": [{"evaluator": "general_python", "baselines": False}]},
            "lifecycle": {"maturity_ticks": 0}}


def run_ticks(station, ticks: int) -> None:
    try:
        Engine(station).run(until_tick=ticks)
    finally:
        station.close()


def committed_ticks(directory: Path) -> list[int]:
    import sqlite3

    db = sqlite3.connect(directory / "station.db")
    try:
        return [r[0] for r in db.execute("SELECT DISTINCT tick FROM turns ORDER BY tick")]
    finally:
        db.close()


def test_a_reply_with_lone_surrogates_nuls_and_escapes_is_stored_and_the_station_goes_on(tmp_path: Path) -> None:
    poison = "I think \ud800 then \udfff\x00\x1b]52;c;ZXZpbA==\x07 and " + "\ud83d\ude00"  # the last pair is valid
    model = replay_model(tmp_path / "r.jsonl", [poison, act("help lobby")], pad=3)
    station = make_station(tmp_path / "s", [recursive(model)])
    run_ticks(station, 3)
    assert committed_ticks(tmp_path / "s") == [1, 2, 3]
    import sqlite3

    reply = sqlite3.connect(tmp_path / "s" / "station.db").execute("SELECT reply FROM turns WHERE tick=1").fetchone()[0]
    assert reply == "I think \ufffd then \ufffd\x00\x1b]52;c;ZXZpbA==\x07 and \U0001F600"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=st.text(alphabet=st.characters(blacklist_categories=()), max_size=300))
def test_any_reply_at_all_leaves_the_station_running(tmp_path_factory, reply: str) -> None:
    directory = tmp_path_factory.mktemp("any") / "s"
    model = replay_model(directory.parent / "r.jsonl", [reply, act("storage list shared") + "\n" + reply], pad=2)
    station = make_station(directory, [recursive(model)], **RESEARCH)
    run_ticks(station, 3)
    assert committed_ticks(directory) == [1, 2, 3]


def test_file_names_that_are_not_utf8_are_listed_as_replacement_characters(tmp_path: Path) -> None:
    """A submission can leave such names in shared storage; listing them once stopped the station for good."""
    model = replay_model(tmp_path / "r.jsonl", [act("goto research"), act("storage list shared")], pad=3)
    station = make_station(tmp_path / "s", [recursive(model)], **RESEARCH)
    shared = tmp_path / "s" / "files" / "research" / "storage" / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    with open(os.path.join(os.fsencode(shared), b"\xff\xfe-notes.txt"), "w") as f:
        f.write("left by a submission")
    os.symlink("loop", shared / "loop")  # a link to itself: resolving it raises
    run_ticks(station, 4)
    assert committed_ticks(tmp_path / "s") == [1, 2, 3, 4]
    import sqlite3

    shown = sqlite3.connect(tmp_path / "s" / "station.db").execute("SELECT prompt FROM turns WHERE tick=3").fetchone()[0]
    assert "- \ufffd\ufffd-notes.txt (20 B)" in shown  # the listing is in the room's view of the next turn


def prompt_of(directory: Path, tick: int) -> str:
    import sqlite3

    db = sqlite3.connect(directory / "station.db")
    try:
        return db.execute("SELECT prompt FROM turns WHERE tick=?", (tick,)).fetchone()[0]
    finally:
        db.close()


def test_a_link_loop_in_storage_is_an_error_line_for_the_agent(tmp_path: Path) -> None:
    """Running code can leave a link to itself; reading or writing through it is refused, in words."""
    model = replay_model(tmp_path / "r.jsonl", [act("goto research"),
                                                 act("storage read shared/loop") + "\n" + act("storage read shared/x"),
                                                 act("storage write shared/loop/inner.txt") + "\n```yaml\ncontent: hi\n```"],
                         pad=3)
    station = make_station(tmp_path / "s", [recursive(model)], **RESEARCH)
    shared = tmp_path / "s" / "files" / "research" / "storage" / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    os.symlink("loop", shared / "loop")
    (shared / "x").write_bytes(b"plain")
    run_ticks(station, 5)
    assert committed_ticks(tmp_path / "s") == [1, 2, 3, 4, 5]
    shown = prompt_of(tmp_path / "s", 3)
    assert "Storage read refused: 'shared/loop' could not be used: it leads through a loop of links." in shown
    assert "`shared/x` (5 B):" in shown  # the other read of the same turn is not lost
    assert ("Storage write refused: 'shared/loop/inner.txt' could not be used: it leads through a loop of links."
            in prompt_of(tmp_path / "s", 4))
    # The room's view reads the disk again a turn later, when code may have swapped a file for the loop.
    from rooms.research import storage as rs

    root = rs.storage_root(tmp_path / "s" / "files")
    for operation in (lambda loc: rs.read_text(root, loc, 100), lambda loc: rs.list_files(root, loc),
                      lambda loc: rs.delete_file(root, rs.parse_path("shared/loop/x", None))):
        with pytest.raises(rs.StorageError, match="could not be used|not a folder|not found"):
            operation(rs.parse_path("shared/loop", None))


_NAME = st.binary(min_size=1, max_size=40).filter(lambda b: b"/" not in b and b"\x00" not in b
                                                  and b not in (b".", b".."))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.dictionaries(_NAME, st.binary(max_size=3000), min_size=1, max_size=4),
       big=st.booleans())
def test_any_file_names_and_contents_in_storage_leave_the_station_running(tmp_path_factory, files: dict,
                                                                          big: bool) -> None:
    """What code leaves in shared storage is listed and read by an agent (names as the agent would type
    them, after replacement characters) without stopping the station."""
    directory = tmp_path_factory.mktemp("files") / "s"
    typed = [name.decode("utf-8", "replace") for name in files]
    reads = "\n".join(act(f"storage read shared/{name}") for name in typed[:3])
    model = replay_model(directory.parent / "r.jsonl", [act("goto research"),
                                                         act("storage list shared") + "\n" + reads], pad=3)
    station = make_station(directory, [recursive(model)], **RESEARCH)
    shared = directory / "files" / "research" / "storage" / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        with open(os.path.join(os.fsencode(shared), name), "wb") as f:
            f.write(content * (1 + (1 << 20) // (len(content) + 1)) if big else content)  # about 1 MB
    run_ticks(station, 4)
    assert committed_ticks(directory) == [1, 2, 3, 4]
    assert "**File Listings**" in prompt_of(directory, 3)


SUBMIT = "/execute_action{{submit 1}}\n```yaml\ntitle: Noise\ntags: test\nabstract: Bytes out.\ncontent: {code}\n```"


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(out=st.binary(max_size=2000), err=st.binary(max_size=2000))
def test_any_bytes_a_submission_prints_are_kept_and_the_station_goes_on(tmp_path_factory, out: bytes,
                                                                         err: bytes) -> None:
    import json
    import sqlite3

    directory = tmp_path_factory.mktemp("out") / "s"
    code = (f"import sys\nsys.stdout.buffer.write({out!r} * 300)\nsys.stderr.buffer.write({err!r} * 300)\n"
            "sys.stdout.buffer.write(b'\\nend of noise')\n")
    model = replay_model(directory.parent / "r.jsonl", [act("goto research"), SUBMIT.format(code=json.dumps(code))],
                         pad=6)
    station = make_station(directory, [recursive(model)], **RESEARCH)
    run_ticks(station, 6)
    assert committed_ticks(directory) == [1, 2, 3, 4, 5, 6]
    db = sqlite3.connect(directory / "station.db")
    status, stdout = db.execute("SELECT status, stdout FROM evaluations").fetchone()
    assert status == "finished" and stdout.endswith("end of noise")


def test_a_runaway_reply_is_cut_on_arrival_so_it_is_never_stored_in_full(tmp_path: Path) -> None:
    """A 2 MB answer (a model stuck in a loop) is kept as its first max_reply_chars characters only:
    in the input log, the turn and the conversation alike; the agent is told."""
    import sqlite3

    runaway = act("goto codex") + "\n" + "\ud800loop " * 350_000
    model = replay_model(tmp_path / "r.jsonl", [runaway, act("help lobby")], pad=3)
    station = make_station(tmp_path / "s", [recursive(model)], engine={"max_reply_chars": 5_000})
    run_ticks(station, 2)
    db = sqlite3.connect(tmp_path / "s" / "station.db")
    assert db.execute("SELECT length(reply) FROM turns WHERE tick=1").fetchone()[0] == 5_000
    assert db.execute("SELECT MAX(length(text)) FROM conversation WHERE role='assistant'").fetchone()[0] == 5_000
    assert db.execute("SELECT MAX(length(payload)) FROM inputs").fetchone()[0] < 10_000
    assert (tmp_path / "s" / "station.db").stat().st_size < 5 << 20
    assert "Your reply was 2,100,028 characters long; only the first 5,000 were read and kept." in prompt_of(
        tmp_path / "s", 2)


def test_a_long_reply_is_shown_cut_on_its_dialogue_page_with_a_link_to_the_whole(tmp_path: Path) -> None:
    from helpers import web_client

    from station.apps.web.app import create_app
    from station.apps.web.data import SHOWN_CHARS

    long_reply = act("help lobby") + "\n" + "".join(f"line {i} of a very long answer\n" for i in range(20_000))
    model = replay_model(tmp_path / "r.jsonl", [long_reply], pad=2)
    station = make_station(tmp_path / "s", [recursive(model)], engine={"max_reply_chars": 1_000_000})
    run_ticks(station, 2)
    client = web_client(create_app(tmp_path / "s"))
    page = client.get("/agents/Spiro I")
    assert page.status_code == 200
    assert len(page.text) < 4 * SHOWN_CHARS + 200_000  # the prompts and two cut replies, not the whole
    assert "line 100 of a very long answer" in page.text and "line 19999 of" not in page.text
    more = len(long_reply) - SHOWN_CHARS
    assert f"… {more:,} more characters: <a href=\"/turns/1/1/reply\">the whole reply</a>" in page.text
    whole = client.get("/turns/1/1/reply")
    assert whole.status_code == 200 and "line 19999 of a very long answer" in whole.text
    assert client.get("/turns/1/1/actions").status_code == 404 and client.get("/turns/1/99/reply").status_code == 404
