"""The study page's token timeline (whole-window default, one line per session, the reader's
choice of agents) and the overview's event feed (meaningful events in words, with links), over
the scripted 60-tick demo station."""

from __future__ import annotations

import html
import json
import re
import sqlite3
from pathlib import Path

import pytest
from conftest import copy_station
from fastapi.testclient import TestClient
from helpers import web_client

from station.apps.web import events, study
from station.apps.web.app import create_app

HOSTILE = "<script>alert('x')</script>"


@pytest.fixture(scope="module")
def client(demo60: Path) -> TestClient:
    return web_client(create_app(demo60))


@pytest.fixture()
def db(demo60: Path):
    db = sqlite3.connect(f"file:{demo60 / 'station.db'}?mode=ro", uri=True)
    yield db
    db.close()


def token_plot(page: str) -> str:
    found = re.search(r"<svg[^>]*id='token-plot'.*?</svg>", page, re.S)
    assert found, "the page draws the token timeline"
    return found.group(0)


def drawn_lines(page: str) -> set[str]:
    """The labels of the lines (and lone points) the token timeline draws."""
    return {html.unescape(t) for t in re.findall(r"<(?:polyline|circle)[^>]*><title>(.*?)</title>", token_plot(page))}


def window_form(page: str) -> str:
    found = re.search(r"<form[^>]*id=\"window-form\".*?</form>", page, re.S)
    assert found
    return found.group(0)


def test_the_default_lines_cover_the_whole_window(db: sqlite3.Connection) -> None:
    for first, last in [(None, None), (1, 30), (20, 60)]:
        shown = study.study(db, first, last)
        lo, hi = shown["first"], shown["last"]
        tenth = (hi - lo + 1) / 10
        for k in range(10):  # every tenth of the window that had turns has a drawn point
            start, end = lo + k * tenth, lo + (k + 1) * tenth
            had_turns = db.execute("SELECT 1 FROM turns WHERE tick >= ? AND tick < ? LIMIT 1", (start, end)).fetchone()
            drawn = any(start <= t < end for line in shown["lines"] for t, _ in line["points"])
            assert drawn or not had_turns, f"ticks {start:.0f}–{end:.0f} of {lo}–{hi} have turns but no line"
        assert len(shown["lines"]) <= study.MAX_LINES


def test_a_guest_and_its_ascended_self_are_one_line(client: TestClient, db: sqlite3.Connection) -> None:
    page = client.get("/study?first=1&last=60").text
    lines = drawn_lines(page)
    assert "Kepler I (was Guest_1)" in lines and "Guest_1" not in lines and "Kepler I" not in lines
    sessions = dict(db.execute("SELECT name, session FROM agents"))
    shown = study.study(db, 1, 60)["lines"]
    assert len({sessions[line["name"]] for line in shown}) == len(shown)  # never two lines for one session
    table = re.search(r"<table id=\"room-actions\">.*?</table>", page, re.S).group(0)
    assert '<a href="/agents/Kepler%20I">Kepler I (was Guest_1)</a>' in table and ">Guest_1<" not in table
    assert "one line" in page and "every tenth of the window" in page  # the default rule is told


def test_the_reader_chooses_the_agents_and_the_window_form_keeps_them(client: TestClient) -> None:
    page = client.get("/study?first=1&last=60&agent=Kepler+III&agent=Guest_3").text  # either name of a session
    assert drawn_lines(page) == {"Kepler III (was Guest_12)", "Gauss I (was Guest_3)"}
    form = window_form(page)
    assert '<input type="hidden" name="agent" value="Kepler III">' in form
    assert '<input type="hidden" name="agent" value="Gauss I">' in form
    assert 'value="Kepler III" checked' in page and 'value="Kepler I">' in page  # the checkbox list
    default = client.get("/study?first=1&last=60").text
    assert 'name="agent"' not in window_form(default)  # no choice: a clean address


def test_unknown_names_are_noted_and_the_choice_is_bounded(client: TestClient) -> None:
    page = client.get("/study", params={"first": 1, "last": 60, "agent": ["Nobody", HOSTILE, "Kepler III"]}).text
    assert drawn_lines(page) == {"Kepler III (was Guest_12)"}
    assert "Nobody" in page and "ignored" in page
    assert HOSTILE not in page and "&lt;script&gt;" in page
    many = client.get("/study", params={"agent": [f"n{i}" * 100 for i in range(80)]})
    assert many.status_code == 200 and "showing the default choice" in many.text


def test_at_most_twenty_lines_are_drawn() -> None:
    lives = {s: study.Life(s, points=[(s, 1)], names=[f"A{s}"]) for s in range(1, 31)}
    drawn, notes = study.choose(lives, [f"A{s}" for s in range(1, 31)], 1, 30)
    assert len(drawn) == study.MAX_CHOSEN and any("At most" in note for note in notes)


def test_the_overview_feed_shows_meaningful_events_in_words(client: TestClient) -> None:
    page = client.get("/").text
    kinds = set(re.findall(r'<li data-id="\d+" data-kind="(\w+)"', page))
    assert kinds and kinds <= set(events.MEANINGFUL)
    assert re.search(r'data-kind="evaluation_finished">tick \d+ · <a href="/research/\d+">evaluation #\d+ ', page)
    assert 'href="/?events=all"' in page and 'data-everything="0"' in page
    everything = client.get("/?events=all").text
    assert {"turn_started", "turn_finished"} & set(re.findall(r'data-kind="(\w+)"', everything))
    assert 'data-everything="1"' in everything and 'href="/"' in everything


def test_the_live_feed_sends_only_meaningful_events_unless_asked(client: TestClient) -> None:
    quiet = client.get("/api/live?everything=0").json()["events"]
    assert quiet and all(e["kind"] in events.MEANINGFUL and e["text"] for e in quiet)
    assert all(e["href"] is None or e["href"].startswith("/") for e in quiet)
    loud = client.get("/api/live?everything=1").json()["events"]
    assert any(e["kind"].startswith(("turn_", "tick_")) for e in loud)
    newest = max(e["id"] for e in loud)
    assert client.get(f"/api/live?after={newest}").json()["events"] == []


def test_ascensions_departures_and_papers_read_as_sentences(db: sqlite3.Connection) -> None:
    texts = {e["kind"]: e for e in events.recent(db, 200)}  # newest first: the oldest of each kind stays
    assert texts["agent_ascended"]["text"] == "Guest_1 ascended as Kepler I"
    assert texts["agent_departed"]["text"] == "Curie I left: voluntary departure"
    accepted = db.execute("SELECT payload FROM events WHERE kind='paper_reviewed' ORDER BY id").fetchone()[0]
    number = json.loads(accepted)["paper"]
    assert any(e["href"] == f"/papers/{number}" and "accepted (score" in e["text"] for e in events.recent(db, 200))


def test_agent_written_titles_in_events_are_escaped_and_clipped(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    db = sqlite3.connect(directory / "station.db")
    paper = db.execute("SELECT id FROM paper_submissions ORDER BY id DESC").fetchone()[0]
    db.execute("UPDATE paper_submissions SET title=? WHERE id=?", (HOSTILE + "y" * 300, paper))
    tick = db.execute("SELECT MAX(tick) FROM events").fetchone()[0]
    for kind, payload in [
        ("paper_submitted", {"submission": paper}),
        ("evaluation_submitted", {"evaluation": 99999, "task": "1", "title": HOSTILE}),
        ("human_request", {"request_id": 99, "title": HOSTILE}),
    ]:
        db.execute(
            "INSERT INTO events(tick, kind, agent, payload) VALUES(?, ?, ?, ?)",
            (tick, kind, "Kepler III", json.dumps(payload)),
        )
    db.commit()
    db.close()
    client = web_client(create_app(directory))
    page = client.get("/").text
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page
    live = client.get("/api/live").json()["events"]
    paper_event = next(e for e in live if e["kind"] == "paper_submitted")
    assert HOSTILE in paper_event["text"] and len(paper_event["text"]) < 150  # raw text, clipped; JS uses textContent
