"""The demo station as a user running `make run` and `station status` sees it: its social life
and its research (circle packing, n = 26, with real programs run in the sandbox)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_station

ROOT = Path(__file__).resolve().parents[1]
TICKS = 112  # beyond the README's 100: by 112 an heir has read a first generation's note (at tick 110)


def station(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "station.apps.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo60: Path) -> Path:
    """The demo run on to tick 112 with `station run`, from a copy of the shared one at tick 60
    (a resumed run is the same world: test_replay and test_crash hold it to that)."""
    d = copy_station(demo60, tmp_path_factory.mktemp("demo") / "demo")
    run = station("run", "--dir", str(d), "--until-tick", str(TICKS))
    assert run.returncode == 0, run.stderr
    return d


def test_status_counts_every_kind_of_social_activity(demo: Path) -> None:
    shown = station("status", str(demo), "--json")
    assert shown.returncode == 0, shown.stderr
    counts = json.loads(shown.stdout)["counts"]
    assert counts["papers"]["accepted"] >= 1
    assert counts["capsules"]["archive"] == counts["papers"]["accepted"]
    assert counts["capsules"]["mail"] >= 1
    assert counts["capsules"]["public"] >= 1
    assert counts["capsules"]["private"] >= 1
    assert counts["common_room_messages"] >= 1
    assert counts["reflections"] >= 1
    text = station("status", str(demo)).stdout
    assert f"{counts['papers']['accepted']} accepted" in text
    assert f"common room: {counts['common_room_messages']} messages" in text


def test_forum_threads_get_replies_and_reflections_have_several_rounds(demo: Path) -> None:
    import sqlite3
    db = sqlite3.connect(demo / "station.db")
    replies = db.execute("SELECT COUNT(*) FROM capsule_messages m JOIN capsules c ON c.id = m.capsule "
                         "WHERE c.room = 'public_memory' AND m.k > 1 AND m.author != c.author").fetchone()[0]
    assert replies >= 1
    rounds = [json.loads(p)["rounds"] for (p,) in
              db.execute("SELECT payload FROM events WHERE kind = 'reflection_finished'")]
    assert rounds and max(rounds) >= 2


def test_a_second_generation_reads_the_notes_of_the_first(demo: Path) -> None:
    """Inheritance through Private Memory: an heir's prompt shows a note its ancestor wrote."""
    import sqlite3
    db = sqlite3.connect(demo / "station.db")
    notes = db.execute("SELECT c.scope, m.author, m.content FROM capsule_messages m JOIN capsules c "
                       "ON c.id = m.capsule WHERE c.room = 'private_memory' AND m.author LIKE '% I'").fetchall()
    assert notes, "no first-generation agent wrote a private note"
    inherited = []
    for scope, author, content in notes:
        heirs = db.execute("SELECT session, name FROM agents WHERE lineage = ? AND name != ? AND kind = 'recursive'",
                           (scope, author)).fetchall()
        for session, heir in heirs:
            prompts = db.execute("SELECT prompt FROM turns WHERE session = ? AND agent = ?", (session, heir))
            if any(content in p.split("## Actions Detected")[0] for (p,) in prompts):
                inherited.append((author, heir))
    assert inherited  # an heir of a later generation (II, III, ...) read it


def test_the_leaderboard_improves_over_time_and_passes_2_60_by_tick_80(demo: Path) -> None:
    import sqlite3
    db = sqlite3.connect(demo / "station.db")
    rows = db.execute("SELECT finished_tick, score FROM evaluations WHERE status = 'finished' AND tick <= 80 "
                      "ORDER BY finished_tick, id").fetchall()
    records, best = [], 0.0
    for tick, score in rows:
        if score > best:
            records.append((tick, score))
            best = score
    assert len(records) >= 4, records  # baseline, grid, rows, optimised, ...: each a new best
    assert best >= 2.60, records
    assert records[-1][0] > records[0][0]
    counts = json.loads(station("status", str(demo), "--json").stdout)["counts"]["submissions"]
    assert counts["finished"] >= 10 and counts["queued"] + counts["running"] <= 5


def test_every_finished_evaluation_was_announced_to_its_author_once(demo: Path) -> None:
    import re
    import sqlite3
    db = sqlite3.connect(demo / "station.db")
    authored = {r[0] for r in db.execute("SELECT id FROM evaluations WHERE author != 'System' AND status != 'queued'")}
    announced = [int(re.search(r"Evaluation #(\d+)", t).group(1))
                 for (t,) in db.execute("SELECT text FROM messages WHERE kind = 'evaluation'")]
    assert len(announced) == len(set(announced)) and set(announced) <= authored
    # Only an author who had left when the result came hears nothing. Results come before each turn
    # and at the tick's end: an author who left in the delivery tick (at the exit, in its turn) may
    # have gone before its result came; any other author was still there.
    unheard = db.execute(
        "SELECT e.id, e.finished_tick, json_extract(a.data, '$.exit_tick') FROM evaluations e "
        "JOIN agents a ON a.name = e.author WHERE e.author != 'System' AND e.status != 'queued'").fetchall()
    assert [(i, left) for i, delivered, left in unheard
            if i not in announced and (left is None or left > delivered)] == []
    assert len(announced) >= len(authored) / 2
