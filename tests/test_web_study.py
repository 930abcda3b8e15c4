"""The study page's token timeline (whole-window default, one line per session, the reader's
choice of agents) and the overview's event feed (meaningful events in words, with links), over
the scripted 60-tick demo station."""

from __future__ import annotations

import html
import json
import re
import sqlite3
from pathlib import Path
from urllib.parse import unquote

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


# -- the study's measures, lists, idea trees and export (station.study in the viewer) -----------------
# A small hand-made station (tests/study_station.py): three lives, the third named like a script; a mail
# cycle Ada I -> Bo I -> ROGUE -> Ada I; a paper; a forum thread titled like a script; and a build-on
# tree 2 <- 3 <- {4, 5, 6} whose steps 2->3, 3->4 and 3->5 go from one lineage's work to another's.
MEASURES = "/study/measures?first=1&last=40"
ROGUE = "<script>alert('x')"  # an agent's name (a name with a slash would have no page: /agents/{name})


def build_society(directory: Path) -> Path:
    from study_station import RINGS, SQUARE, StudyStation

    st = StudyStation(directory, last_tick=40, maturity_ticks=None)  # everyone sees every lineage
    st.life(1, "Guest_1", born=1, name="Ada I", lineage="Ada", generation=1, ascended=2)
    st.life(2, "Guest_2", born=1, name="Bo I", lineage="Bo", generation=1, ascended=2)
    st.life(3, "Guest_3", born=1, name=ROGUE, lineage="Cy", generation=1, ascended=3)
    st.turns(every=13)  # the last at tick 40: the study page's default window is 1-40
    st.mail(5, "Ada I", ["Bo I"], "Shall we compare notes?")
    st.mail(6, "Bo I", [ROGUE], "Ada asked me to compare notes; you too?")
    st.mail(7, ROGUE, ["Ada I"], "Bo told me about your notes.")
    st.capsule("public_memory", 10, ROGUE, "Restarts help, @Ada_I.", title=HOSTILE)
    st.paper(10, "Ada I", "Rings", "Rings of circles pack well.", decided=12, accepted=True)
    st.evaluation(0, "System", code="print('baseline')\n", title="Baseline", delivered=1, score=1.0)
    st.evaluation(22, "Ada I", code=SQUARE, title="Square grid", delivered=23, score=2.0)
    st.evaluation(25, "Bo I", code=RINGS, title="Rings", abstract="Improves evaluation 2.", delivered=26, score=2.5)
    for tick, author, abstract, score in [
        (28, ROGUE, "Builds on evaluation 3.", 2.4),
        (30, "Ada I", "After evaluation 3.", 2.7),
        (33, "Bo I", "Tunes evaluation 3.", 2.8),
    ]:
        st.evaluation(tick, author, code=f"# {tick}\n", title="Next", abstract=abstract, delivered=tick + 1, score=score)
    st.finish()
    return directory


@pytest.fixture(scope="module")
def society(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_society(tmp_path_factory.mktemp("society") / "st")


@pytest.fixture(scope="module")
def viewer(society: Path) -> TestClient:
    return web_client(create_app(society))


@pytest.fixture(scope="module")
def measures(viewer: TestClient) -> str:
    answer = viewer.get(MEASURES)
    assert answer.status_code == 200
    return answer.text


def part(page: str, element_id: str) -> str:
    """The element with this id (its opening tag to the matching close of its kind, not nested)."""
    found = re.search(rf"<(\w+)[^>]*id=['\"]{element_id}['\"].*?</\1>", page, re.S)
    assert found, f"the page has #{element_id}"
    return found.group(0)


def hrefs(html_part: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r"href=['\"]([^'\"]+)['\"]", html_part)]


def test_the_measures_page_draws_the_metrics_over_time_and_the_network(measures: str, viewer: TestClient) -> None:
    plots = part(measures, "metric-plots")
    drawn = re.findall(r"<svg[^>]*id='(metric-[\w-]+)'", plots)
    assert drawn == [f"metric-{name}" for name in (
        "density", "reciprocity", "modularity", "cross_lineage_share", "acts", "diversity", "directions",
        "best_score", "cost_usd")]
    acts = part(measures, "metric-acts")
    assert {"mail", "built_on"} <= {html.unescape(t) for t in re.findall(r"<title>(\w+)</title>", acts)}
    network = part(measures, "network")
    agents = {unquote(h.rsplit("/", 1)[1]) for h in hrefs(network)}
    assert {"Ada I", "Bo I", ROGUE} <= agents  # every node leads to its agent's page
    mail = re.findall(r"<line class='net-edge kind-mail'[^>]*><title>(.*?)</title>", network)
    assert sorted(html.unescape(t) for t in mail) == sorted(
        ["Ada I → Bo I: 1 mail", f"Bo I → {ROGUE}: 1 mail", f"{ROGUE} → Ada I: 1 mail"]
    )
    assert 'name="window" value="2"' in part(measures, "window-form")  # about twenty windows of 40 ticks
    rows = part(measures, "study-windows")
    assert '<a href="/study/measures?first=5&amp;last=6">5–6</a>' in rows  # a window opens on its own


def test_the_kind_filters_change_the_networks_edges(viewer: TestClient, measures: str) -> None:
    every = set(re.findall(r"data-kind='(\w+)'", part(measures, "network")))
    assert {"mail", "built_on", "review", "citation"} <= every
    for kinds in (["mail"], ["built_on"], ["mail", "citation"]):
        page = viewer.get("/study/measures", params={"first": 1, "last": 40, "kind": kinds}).text
        assert set(re.findall(r"data-kind='(\w+)'", part(page, "network"))) == set(kinds)
        form = part(page, "network-form")
        assert set(re.findall(r'value="(\w+)" checked', form)) == set(kinds)
        assert all(f'<input type="hidden" name="kind" value="{k}">' in part(page, "window-form") for k in kinds)
    bogus = viewer.get("/study/measures", params={"first": 1, "last": 40, "kind": ["nonsense", HOSTILE]}).text
    assert set(re.findall(r"data-kind='(\w+)'", part(bogus, "network"))) == every  # unknown kinds: every kind


def test_every_count_links_to_the_records_it_counts(viewer: TestClient, measures: str) -> None:
    totals = part(measures, "study-totals")
    counted = re.findall(r"<td>([^<]+)</td><td class=\"num\"><a href=\"([^\"]+)\">(\d+)</a>", totals)
    assert len(counted) > 8
    for what, href, count in counted:
        page = viewer.get(html.unescape(href))
        assert page.status_code == 200, href
        if href.startswith("/research"):
            shown = len(re.findall(r"<tr>", part(page.text, "leaderboard"))) - 1
        else:
            shown = int(re.search(r'id="(?:edge|life|text)-total">(\d+)<', page.text).group(1))
        assert shown == int(count), f"{what}: {count} counted, {shown} listed"
    mail = viewer.get("/study/edges?kind=mail&first=1&last=40").text
    records = hrefs(part(mail, "study-edges"))
    messages = [h for h in records if h.startswith("/mail/")]
    assert len(messages) == 3
    for href, text in zip(messages, ["Shall we compare notes?", "Ada asked me", "Bo told me"], strict=True):
        assert text in viewer.get(href).text  # the record the row counts
    window = viewer.get("/study/edges?first=5&last=6").text  # a window's row, cut from the page's study
    assert re.search(r'id="edge-total">2<', window) and "mail/3#1" not in window


def test_the_idea_tree_of_an_evaluation_from_its_page(viewer: TestClient) -> None:
    assert 'href="/study/ideas/4" id="idea-tree-link"' in viewer.get("/research/4").text
    page = viewer.get("/study/ideas/4").text
    listed = [int(n) for n in re.findall(r"<tr(?: class=\"chosen\")?><td><a href=\"/research/(\d+)\">", page)]
    assert listed == [2, 3, 4, 5, 6]  # its root, what it built on, and the rest of the root's tree
    counts = part(page, "tree-counts")
    assert "Root <a href=\"/research/2\">#2</a>, 2 steps up" in counts and "holds 5" in counts
    assert "3 steps drawn from one lineage's work to another's" in counts
    drawing = part(page, "idea-tree")
    assert len(re.findall(r"class='tree-step cross'", drawing)) == 3 and drawing.count("tree-node chosen") == 1
    for href in sorted(set(hrefs(drawing))):
        assert viewer.get(href).status_code == 200
    assert viewer.get("/study/ideas/99").status_code == 404


def test_names_and_titles_agents_wrote_are_shown_as_text(viewer: TestClient, measures: str) -> None:
    for page in (
        measures,
        viewer.get("/study/edges?first=1&last=40").text,
        viewer.get("/study/texts?first=1&last=40").text,
        viewer.get("/study/lives?first=1&last=40").text,
        viewer.get("/study/ideas/4").text,
    ):
        assert ROGUE not in page and "&lt;script&gt;alert(" in page


def test_the_static_export_carries_the_measures_lists_and_trees(society: Path, viewer: TestClient, tmp_path: Path) -> None:
    from station.apps.web.export import export

    viewer.get(MEASURES)  # the default window's study, kept: the export reads it from memory
    site = tmp_path / "site"
    export(society, site)
    measures = (site / "study" / "measures" / "first-1_last-40.html").read_text(encoding="utf-8")
    assert len(re.findall(r"<svg[^>]*id='metric-", measures)) == 9 and "id='network'" in measures
    assert "<form" not in measures  # no filters on a page read from disk
    trees = sorted(int(p.stem) for p in (site / "study" / "ideas").glob("*.html"))
    assert trees == [1, 2, 3, 4, 5, 6]  # one from each evaluation's page
    broken = []
    for page in (site / "study").rglob("*.html"):
        for href in re.findall(r"""href=["']([^"'#]+)""", page.read_text(encoding="utf-8")):
            if not (page.parent / unquote(href)).exists():
                broken.append(f"{page.relative_to(site)} -> {href}")
    assert not broken, broken[:5]
    listed = (site / "study" / "edges" / "kind-mail_first-1_last-40.html").read_text(encoding="utf-8")
    assert re.search(r'id="edge-total">3<', listed) and 'href="../../mail/1.html#message-1"' in listed


def test_a_large_stations_study_is_computed_in_the_background(viewer: TestClient, monkeypatch) -> None:
    from station.apps.web import study_cache

    monkeypatch.setattr(study_cache, "SMALL_STATION", 0)  # every station is large
    study_cache.forget()
    waiting = viewer.get("/study/ideas/4")
    assert waiting.status_code == 200 and "Not computed yet" in waiting.text and "idea-tree" not in waiting.text
    study_cache.join()
    assert "id='idea-tree'" in viewer.get("/study/ideas/4").text
    page = viewer.get(MEASURES).text  # another study: the page says it is coming, and shows the rest
    assert "computed in the background" in part(page, "study-waiting") and "metric-plots" not in page
    study_cache.join()
    assert "id='metric-plots'" in viewer.get(MEASURES).text
