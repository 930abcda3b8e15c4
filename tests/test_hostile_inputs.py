"""Poison pills: nothing an agent writes, a model returns or a submission leaves behind may stop the
station. Each test runs a real station (SQLite file, real engine) past the bad input and checks that
the next tick was committed and that the bad bytes are stored as replacement characters.
"""
from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import act, make_station, recursive, replay_model
from station.engine import Engine

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
